"""Generate the Python gRPC stubs for the Runner contract into a target folder.

Each environment (torch runner, TensorFlow runner, aggregator, every container
image) runs this at install time with its own protobuf runtime, because
protobuf's generated code refuses a runtime older than the generator that made
it. Generating per environment keeps one .proto as the single source and lets an
old TensorFlow image keep its old protobuf.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PROTO_FILES = sorted(PROTO_ROOT.glob("fwbench/**/*.proto"))


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc  # only needed at install time

    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *map(str, PROTO_FILES),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")
    return sorted(out_dir.glob("fwbench/**/*.py"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(sysconfig.get_paths()["purelib"]),
        help="folder to write the fwbench package into (default: this interpreter's site-packages)",
    )
    written = generate(parser.parse_args().out)
    print(f"generated {len(written)} modules with {sys.executable}", file=sys.stderr)


if __name__ == "__main__":
    main()
