import os

from fwbench_core.isolation import RunIsolation
from fwbench_core.server import serve

# TensorFlow's C++ start-up chatter on stderr hides the runner's own log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    from .backend import TensorFlowBackend

    # TensorFlow never gives device memory back while its process lives: a GPU run gets its own process.
    serve(TensorFlowBackend, default_isolation=RunIsolation.PROCESS_ON_GPU)


if __name__ == "__main__":
    main()
