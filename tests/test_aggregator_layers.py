"""The aggregator's import rule (docs/architecture.md): packages by stage, each importing only itself and the
layers below it, so that the pipeline the docs name is the one the code runs.

    cli -> app -> present -> analyse -> store -> run -> plan -> base

Nothing imports cli or app from below; only cli and present import typer or rich (the terminal); no module imports
a framework; every module sits in a layer, and none grows past 400 lines.
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


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_the_import_reader_sees_relative_absolute_and_nested_imports(tmp_path):
    probe = tmp_path / "run" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("from ..analyse import stats\nfrom . import jobs\ndef f():\n    import rich.table\n"
                     "from fwbench_aggregator.cli import app\nimport pandas\nfrom .. import app\n")
    layers, others = imports_of(probe, tmp_path)
    assert layers == {"analyse", "run", "cli", "app"} and others == {"rich", "pandas"}


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
