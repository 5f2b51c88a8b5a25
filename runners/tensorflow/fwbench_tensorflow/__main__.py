import os

from fwbench_core.isolation import RunIsolation
from fwbench_core.server import serve

# TensorFlow's C++ start-up chatter on stderr hides the runner's own log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN CPU kernels on every x86 CPU, not only those TensorFlow turns them on for by itself: without them a
# CPU cannot train a grouped convolution (wav2vec2_base) at all, and the CPU kernels would depend on the
# CPU's vendor. Describe reports the setting; TF_ENABLE_ONEDNN_OPTS=0 still turns them off.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def main() -> None:
    from .backend import TensorFlowBackend

    # TensorFlow never gives device memory back while its process lives: a GPU run gets its own process.
    serve(TensorFlowBackend, default_isolation=RunIsolation.PROCESS_ON_GPU)


if __name__ == "__main__":
    main()
