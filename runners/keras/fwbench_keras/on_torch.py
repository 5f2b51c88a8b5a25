"""python -m fwbench_keras.on_torch: the Keras runner on torch (keras-torch in the runner list)."""

from .serve import main

if __name__ == "__main__":
    main("torch")
