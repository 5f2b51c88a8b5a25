"""python -m fwbench_keras.on_tensorflow: the Keras runner on tensorflow (keras-tensorflow in the runner list)."""

from .serve import main

if __name__ == "__main__":
    main("tensorflow")
