from fwbench_core.server import serve


def main() -> None:
    from .backend import TorchBackend

    serve(TorchBackend)


if __name__ == "__main__":
    main()
