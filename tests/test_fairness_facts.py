"""The settings a fair comparison needs equal (fwbench_core/fairness.py) are kept once: every shipped backend reads
them from the core and none defines its own. The backends' source is parsed, not imported: no framework loads here."""

from __future__ import annotations

import ast
from pathlib import Path

from fwbench_aggregator.base import frameworks
from fwbench_core import fairness

REPO_ROOT = Path(__file__).resolve().parents[1]
FAIRNESS_MODULE = "fwbench_core.fairness"
FAIRNESS_FACTS = {name for name in vars(fairness) if name.isupper()}
# What every backend's training step reads: the optimizer's settings.
OPTIMIZER_FACTS = {"LEARNING_RATE", "MOMENTUM"}


def assigned_names(source: str) -> set[str]:
    """Every name the source stores to, at any depth."""
    nodes = ast.walk(ast.parse(source))
    return {node.id for node in nodes if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def names_imported_from(source: str, module: str) -> set[str]:
    return {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == module
        for alias in node.names
    }


def backend_sources() -> dict[str, str]:
    return {
        str(path.relative_to(REPO_ROOT)): path.read_text()
        for framework in frameworks.shipped()
        for path in sorted((REPO_ROOT / framework.folder).rglob("*.py"))
    }


def test_assigned_names_sees_every_kind_of_assignment_and_no_attribute():
    source = "A = 1\nB: float = 2\nC += 3\nD, (E, F) = G\ndef f():\n    H = 4\nx.I = 5\n"
    assert assigned_names(source) == {"A", "B", "C", "D", "E", "F", "H"}


def test_fairness_module_holds_the_optimizer_settings_and_the_reference_tolerance():
    assert OPTIMIZER_FACTS | {"REFERENCE_TOLERANCE"} <= FAIRNESS_FACTS


def test_no_backend_defines_its_own_fairness_fact():
    own = {path: sorted(assigned_names(source) & FAIRNESS_FACTS) for path, source in backend_sources().items()}
    assert {path: names for path, names in own.items() if names} == {}


def test_every_backend_reads_the_optimizer_settings_from_the_core():
    # Whichever of its modules builds the training step (TensorFlow's workload.py, the others' backend.py).
    for framework in frameworks.shipped():
        package = REPO_ROOT / framework.folder / framework.module.partition(".")[0]
        imported = set().union(
            *(names_imported_from(path.read_text(), FAIRNESS_MODULE) for path in package.rglob("*.py"))
        )
        assert OPTIMIZER_FACTS <= imported, package
