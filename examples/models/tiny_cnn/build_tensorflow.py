"""The TensorFlow runner builds this model from its one Keras definition, build_keras.py, as every Keras runner
(keras-tensorflow, keras-jax, keras-torch) does."""

from .build_keras import build, load_torch_weights  # noqa: F401  (what the TensorFlow runner reads here)
