import os

from fwbench_core.isolation import RunIsolation
from fwbench_core.server import serve

# Read when JAX starts its GPU backend: without it JAX takes 75% of every GPU's memory at its first GPU
# op, which the other runners on a shared GPU would then lack. XLA_PYTHON_CLIENT_PREALLOCATE=true still
# turns it back on.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def main() -> None:
    from .backend import JaxBackend

    # JAX's allocator keeps the GPU memory it took while its process lives: a GPU run gets its own process.
    serve(JaxBackend, default_isolation=RunIsolation.PROCESS_ON_GPU)


if __name__ == "__main__":
    main()
