"""The core stays framework-neutral: none of its modules imports a framework."""

from __future__ import annotations

from pathlib import Path
import ast


REPO_ROOT = Path(__file__).resolve().parents[1]
CORE_DIR = REPO_ROOT / "runners" / "core" / "fwbench_core"


FRAMEWORKS = {"torch", "torchvision", "tensorflow", "keras", "tf_keras", "jax", "jaxlib", "flax"}


def imported_top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_imported_names_parser_sees_nested_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import torch.nn as nn\n    from keras import layers\nfrom . import x\n")
    assert imported_top_level_names(probe) == {"torch", "keras"}


def test_core_imports_no_framework():
    modules = sorted(CORE_DIR.rglob("*.py"))
    assert {"timing.py", "service.py", "server.py", "fake.py"} <= {m.name for m in modules}
    offenders = {
        str(m.relative_to(REPO_ROOT)): sorted(imported_top_level_names(m) & FRAMEWORKS) for m in modules
    }
    assert {k: v for k, v in offenders.items() if v} == {}
