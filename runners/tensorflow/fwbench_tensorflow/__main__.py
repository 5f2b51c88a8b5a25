import os

from fwbench_core.server import serve

# TensorFlow's C++ start-up chatter on stderr hides the runner's own log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    from .backend import TensorFlowBackend

    serve(TensorFlowBackend)


if __name__ == "__main__":
    main()
