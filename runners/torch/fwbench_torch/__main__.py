from fwbench_core.isolation import RunIsolation
from fwbench_core.server import serve


def main() -> None:
    from .backend import TorchBackend

    # PyTorch empties its allocator cache after every run (release_memory): runs need no process of their own.
    serve(TorchBackend, default_isolation=RunIsolation.THREAD)


if __name__ == "__main__":
    main()
