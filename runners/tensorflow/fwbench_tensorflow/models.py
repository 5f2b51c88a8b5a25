"""The TensorFlow runner's models: the built-in Keras definitions (fwbench_keras.models, which every Keras runner
builds too) and plug-ins' build_tensorflow.py."""

from fwbench_keras.models import MODELS as KERAS_MODELS
from fwbench_keras.models import check_plugin_decoder, plugin_builder_of

from fwbench_core.registry import ModelRegistry

MODELS: ModelRegistry = KERAS_MODELS.serving_plugins_as(
    "tensorflow", plugin_builder_of("tensorflow"), check_plugin_decoder
)
