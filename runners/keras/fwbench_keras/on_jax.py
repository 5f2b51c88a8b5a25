"""python -m fwbench_keras.on_jax: the Keras runner on jax (keras-jax in the runner list)."""

from .serve import main

if __name__ == "__main__":
    main("jax")
