"""The aggregator's import rule (docs/architecture.md): packages by stage, each importing only itself and the
layers below it, so that the pipeline the docs name is the one the code runs.

    cli -> app -> present -> analyse -> store -> run -> plan -> base

Nothing imports cli or app from below; only cli and present import typer or rich (the terminal); no module imports
a framework; only the wire's edge imports the contract's generated code; every module sits in a layer, and none grows
past 400 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "aggregator" / "fwbench_aggregator"
LAYERS = ("base", "plan", "run", "store", "analyse", "present", "app", "cli")  # lowest first
TERMINAL_LIBRARIES = {"typer", "rich", "click"}
TERMINAL_LAYERS = {"cli", "present"}
FRAMEWORKS = {"torch", "torchvision", "tensorflow", "keras", "tf_keras", "jax", "jaxlib", "flax"}
MAX_MODULE_LINES = 400
# The edge with the contract: run.wire builds every request and names every reply, run.client holds the gRPC stub,
# and base.vocabulary reads the enums' words from the generated descriptors (the floor every module stands on).
CONTRACT_MODULES = {"runner_pb2", "runner_pb2_grpc"}
CONTRACT_EDGE = {"run/wire.py", "run/client.py", "base/vocabulary.py"}


def layer_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else ""


def imports_of(path: Path, root: Path = PACKAGE) -> tuple[set[str], set[str]]:
    """The aggregator layers a module imports (relative or absolute), and the other top-level packages."""
    layers, others = set(), set()
    package = path.relative_to(root).parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "fwbench_aggregator":
                    layers.add(parts[1] if len(parts) > 1 else "")
                else:
                    others.add(parts[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - (node.level - 1)]) if node.level > 1 else list(package)
                target = [*base, *(node.module.split(".") if node.module else [])]
                names = [alias.name for alias in node.names]
                # "from .. import app" names a layer as the imported name itself.
                layers.update([target[0]] if target else [n for n in names])
            elif node.module:
                parts = node.module.split(".")
                if parts[0] == "fwbench_aggregator":
                    layers.add(parts[1] if len(parts) > 1 else "")
                else:
                    others.add(parts[0])
    return layers, others


def imports_the_contract(path: Path) -> bool:
    """Whether a module imports the generated code (fwbench.runner.v1's runner_pb2 or its gRPC stubs), anyhow."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [f"{node.module or ''}.{alias.name}" for alias in node.names] + [node.module or ""]
        else:
            continue
        if any(set(name.split(".")) & CONTRACT_MODULES for name in names):
            return True
    return False


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_the_import_reader_sees_relative_absolute_and_nested_imports(tmp_path):
    probe = tmp_path / "run" / "probe.py"
    probe.parent.mkdir()
    probe.write_text(
        "from ..analyse import stats\nfrom . import jobs\ndef f():\n    import rich.table\n"
        "from fwbench_aggregator.cli import app\nimport pandas\nfrom .. import app\n"
    )
    layers, others = imports_of(probe, tmp_path)
    assert layers == {"analyse", "run", "cli", "app"} and others == {"rich", "pandas"}


def test_the_contract_reader_sees_every_form_of_import(tmp_path):
    forms = [
        "from fwbench.runner.v1 import runner_pb2 as pb",
        "import fwbench.runner.v1.runner_pb2",
        "from fwbench.runner.v1.runner_pb2 import RunRequest",
        "def f():\n    from fwbench.runner.v1 import runner_pb2_grpc",
    ]
    for number, form in enumerate(forms):
        probe = tmp_path / f"probe{number}.py"
        probe.write_text(form + "\n")
        assert imports_the_contract(probe), form
    (tmp_path / "clean.py").write_text("from google.protobuf.json_format import MessageToDict\nfrom . import wire\n")
    assert not imports_the_contract(tmp_path / "clean.py")


def test_only_the_wire_edge_imports_the_contracts_generated_code():
    importers = {str(m.relative_to(PACKAGE)) for m in MODULES if imports_the_contract(m)}
    assert importers == CONTRACT_EDGE, "a module above the edge reads and writes the contract through run.wire"


def test_every_module_sits_in_a_layer():
    loose = [str(m.relative_to(PACKAGE)) for m in MODULES if layer_of(m) not in LAYERS]
    assert loose == ["__init__.py", "__main__.py"]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: str(m.relative_to(PACKAGE)))
def test_a_module_imports_only_its_own_layer_and_those_below(module):
    own = layer_of(module)
    if own not in LAYERS:
        return
    layers, others = imports_of(module)
    above = sorted(layer for layer in layers if layer not in LAYERS[: LAYERS.index(own) + 1])
    assert above == [], f"{own} may import only {', '.join(LAYERS[: LAYERS.index(own) + 1])}"
    if own not in TERMINAL_LAYERS:
        assert not others & TERMINAL_LIBRARIES, f"only {' and '.join(sorted(TERMINAL_LAYERS))} talk to the terminal"
    assert not others & FRAMEWORKS


@pytest.mark.parametrize("module", MODULES, ids=lambda m: str(m.relative_to(PACKAGE)))
def test_no_module_grows_past_the_limit(module):
    assert len(module.read_text().splitlines()) <= MAX_MODULE_LINES
