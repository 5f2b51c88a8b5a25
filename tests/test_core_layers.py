"""The runner core's import rule (docs/architecture.md): modules on floors, each importing only its own floor and those
below, with no import cycle, so that a request's path through a runner reads from the server down to the facts.

    server -> wire -> service -> execution -> measurement -> models and inputs -> processes -> facts

The core imports no framework; each runner package imports the core, never another runner; no module grows past 400
lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CORE = REPO_ROOT / "runners" / "core" / "fwbench_core"
RUNNER_PACKAGES = {name: REPO_ROOT / "runners" / name / f"fwbench_{name}" for name in ("torch", "tensorflow", "jax")}
FRAMEWORKS = {"torch", "torchvision", "tensorflow", "keras", "tf_keras", "jax", "jaxlib", "flax", "optax"}
MAX_MODULE_LINES = 400
# Floors, lowest first: each module of the core on one of them.
FLOORS = {
    "facts": {
        "__init__",
        "errors",
        "limits",
        "choices",
        "devices",
        "models",
        "runs",
        "fairness",
        "architectures",
        "handlers",
        "allocator",
        "safe_read",
        "env_flags",
        "system_folders",
    },
    "processes": {"process_tree", "worker_output", "worker_start", "worker_process"},
    "models and inputs": {
        "declaration",
        "plugin_modules",
        "plugin_checks",
        "plugins",
        "builtin",
        "registry",
        "catalog",
        "references",
        "decoding",
        "streams",
        "access",
        "sysinfo",
    },
    "measurement": {
        "power",
        "device_state",
        "backend",
        "onnx_runtime",
        "serving",
        "serving_generation",
        "timing",
        "generation",
        "telemetry",
        "placement",
        "validation",
        "model_resolution",
        "framework_settings",
        "measurement_settings",
        "admission",
        "run_path",
    },
    "execution": {"isolation", "apart", "plugin_worker", "distributed", "venue", "venues"},
    "service": {"service"},
    "wire": {"wire", "wire_events"},
    "server": {"server", "healthcheck", "fake"},
}
FLOOR_OF = {module: index for index, modules in enumerate(FLOORS.values()) for module in modules}


def core_name(path: Path) -> str:
    """A core module's name on its floor: its top-level name within the package (power/energy.py is "power")."""
    parts = path.relative_to(CORE).with_suffix("").parts
    return parts[0]


def imports_of(path: Path, package_root: Path) -> tuple[set[str], set[str]]:
    """The modules of its own package a module imports (by top-level name, lazily imported ones included), and the
    other top-level packages it imports."""
    own, others = set(), set()
    package = path.relative_to(package_root).parts[:-1]
    own_name = package_root.name
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                (own.add(parts[1]) if parts[0] == own_name and len(parts) > 1 else others.add(parts[0]))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - (node.level - 1)]) if node.level > 1 else list(package)
                target = [*base, *(node.module.split(".") if node.module else [])]
                own.update([target[0]] if target else ["__init__" if node.module is None and not base else ""])
                if not target:
                    # "from . import X": X is a module of the package, or a name its __init__ holds.
                    own.update(
                        a.name
                        if (package_root / f"{a.name}.py").exists() or (package_root / a.name).is_dir()
                        else "__init__"
                        for a in node.names
                    )
            elif node.module:
                parts = node.module.split(".")
                (own.add(parts[1]) if parts[0] == own_name and len(parts) > 1 else others.add(parts[0]))
    own.discard("")
    return own, others


CORE_MODULES = sorted(p for p in CORE.rglob("*.py"))
RUNNER_MODULES = sorted(p for root in RUNNER_PACKAGES.values() for p in root.rglob("*.py"))


def test_the_import_reader_sees_relative_lazy_and_package_imports(tmp_path):
    package = tmp_path / "fwbench_core"
    (package / "power").mkdir(parents=True)
    (package / "timing.py").write_text("")
    module = package / "power" / "energy.py"
    module.write_text(
        "from . import sampler\nfrom ..timing import x\ndef f():\n    from ..spec import y\n    import numpy\n"
    )
    own, others = imports_of(module, package)
    assert own == {"power", "timing", "spec"} and others == {"numpy"}


def test_every_core_module_sits_on_a_floor():
    assert sorted({core_name(m) for m in CORE_MODULES} - set(FLOOR_OF)) == []


@pytest.mark.parametrize("module", CORE_MODULES, ids=lambda p: str(p.relative_to(CORE)))
def test_a_core_module_imports_only_its_floor_and_those_below_and_no_framework(module):
    own, others = imports_of(module, CORE)
    floor = FLOOR_OF[core_name(module)]
    above = sorted(m for m in own if m in FLOOR_OF and FLOOR_OF[m] > floor)
    assert above == [], f"{core_name(module)} ({list(FLOORS)[floor]}) imports from a floor above it: {above}"
    assert not others & FRAMEWORKS, "the runner core never imports a framework"


def test_the_core_has_no_import_cycle():
    graph = {}
    for module in CORE_MODULES:
        name = core_name(module)
        graph.setdefault(name, set()).update(m for m in imports_of(module, CORE)[0] if m != name and m in FLOOR_OF)
    graph["__init__"] = set()  # the package's own facts (versions): imports nothing of its own
    visiting, done, cycles = set(), set(), []

    def visit(name: str, path: list[str]) -> None:
        if name in done:
            return
        if name in visiting:
            cycles.append(path[path.index(name) :] + [name])
            return
        visiting.add(name)
        for target in sorted(graph.get(name, ())):
            visit(target, path + [name])
        visiting.discard(name)
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []


@pytest.mark.parametrize("module", RUNNER_MODULES, ids=lambda p: str(p.relative_to(REPO_ROOT / "runners")))
def test_a_runner_imports_the_core_and_never_another_runner(module):
    runner = next(name for name, root in RUNNER_PACKAGES.items() if root in module.parents)
    _, others = imports_of(module, RUNNER_PACKAGES[runner])
    strangers = {f"fwbench_{name}" for name in RUNNER_PACKAGES if name != runner}
    assert not others & strangers, f"fwbench_{runner} imports another runner's package"


@pytest.mark.parametrize(
    "module", CORE_MODULES + RUNNER_MODULES, ids=lambda p: str(p.relative_to(REPO_ROOT / "runners"))
)
def test_no_module_grows_past_the_limit(module):
    lines = len(module.read_text().splitlines())
    key = str(module.relative_to(REPO_ROOT))
    assert lines <= MAX_MODULE_LINES, f"{key} has {lines} lines (at most {MAX_MODULE_LINES}): split it by concern"
