"""Every script in benchmarks/ and studies/ runs: each one's --help names its purpose, and those that need no real
framework run on a tiny input (the studies' judges on a few rows of their stored data, the harness benchmarks on the
fake backend). They import the aggregator's and the core's internals, so a refactor that breaks one fails here, not
months later in a sitting. Each runs as a subprocess with this environment's python, all of them at once."""

from __future__ import annotations

import ast
import py_compile
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("benchmarks", "studies")
DATA = ROOT / "studies" / "data"
SCRIPT_LIMIT_S = 120
SCRIPTS = (
    "benchmarks/aa_validity.py",
    "benchmarks/block_time.py",
    "benchmarks/gpu_acceptance.py",
    "benchmarks/harness_overhead.py",
    "benchmarks/keras_own_form.py",
    "benchmarks/store_scale.py",
    "benchmarks/sweep_efficiency.py",
    "benchmarks/time_to_verdict.py",
    "benchmarks/worker_allocator.py",
    "studies/block_windows.py",
    "studies/design_aa.py",
    "studies/open_blocks_ab.py",
    "studies/plugin_runs.py",
    "studies/spending_study.py",
    "studies/trace_shape.py",
)
# Files in those folders that are not scripts, and what runs them.
MODULES = {
    "studies/design_judge.py": "design_aa.py judge and spending_study.py import it (their tiny runs below)",
    "benchmarks/gpu_acceptance_models/planted_conv/build_torch.py": "a plug-in the GPU acceptance's runners build",
    "benchmarks/gpu_acceptance_generation.py": "gpu_acceptance.py's section 9 (its CPU dry run in test_gpu_acceptance)",
}
FAKE_RUN_ARGS = ("--warmup", "1", "--steps", "3", "--repetitions", "1")


def purpose(script: str) -> str:
    """The first line of a script's docstring: what its --help must say."""
    return ast.get_docstring(ast.parse((ROOT / script).read_text())).splitlines()[0]


def tiny(folder: Path, name: str) -> Path:
    """Where a tiny input lies: a folder of its own, since design_judge names a sitting by its file's folder."""
    return folder / name / f"{name}.csv"


def write_tiny_inputs(folder: Path) -> None:
    """A few rows of the stored data: two torch configurations, their pairs, rounds, blocks or windows as measured."""
    rounds = pd.read_csv(DATA / "design-aa-2026-11-28" / "rounds.csv", keep_default_na=False)
    blocks = pd.read_csv(DATA / "design-aa-2026-12-01" / "blocks.csv", keep_default_na=False)
    windows = pd.read_csv(DATA / "design-aa-2026-12-01" / "windows.csv")
    two = ["resnet18", "mobilenet_v2"]
    picked = {
        "rounds": rounds[(rounds["framework"] == "torch") & rounds["model"].isin(two) & (rounds["mode"] == "infer")],
        "blocks": blocks[(blocks["framework"] == "torch") & blocks["model"].isin(two) & (blocks["mode"] == "infer")],
        "windows": windows[
            (windows["framework"] == "torch")
            & (windows["design"] == "W8 w0.1")
            & windows["configuration"].str.startswith(tuple(two))
        ],
    }
    for name, frame in picked.items():
        tiny(folder, name).parent.mkdir()
        frame.to_csv(tiny(folder, name), index=False)


def cases(folder: Path) -> dict[str, tuple[str, list[str], str]]:
    """Each case: the script, its arguments (tiny inputs in `folder`), and what its output must say."""
    found = {f"{script} --help": (script, ["--help"], purpose(script)) for script in SCRIPTS}
    found |= {
        "studies/design_aa.py judge": (
            "studies/design_aa.py",
            ["judge", str(tiny(folder, "rounds"))],
            "6 A/A comparisons, each with freshly started instances",
        ),
        "studies/design_aa.py judge blocks": (
            "studies/design_aa.py",
            ["judge", str(tiny(folder, "blocks"))],
            "planted found under paired auto, by configuration",
        ),
        "studies/spending_study.py": (
            "studies/spending_study.py",
            [
                "--runs",
                str(tiny(folder, "blocks")),
                "--paired",
                "--offsets",
                "none",
                "--planted",
                "1.5",
                "--procedures",
                "40",
            ],
            "noise: 2 configurations",
        ),
        "studies/block_windows.py judge": (
            "studies/block_windows.py",
            ["judge", str(tiny(folder, "windows"))],
            "W8 w0.1   median: resolves",
        ),
        "studies/open_blocks_ab.py --judge": (
            "studies/open_blocks_ab.py",
            ["--judge", str(DATA / "design-aa-2026-12-01-evening" / "open_ab.csv")],
            "medians by variant",
        ),
        "benchmarks/harness_overhead.py fake": (
            "benchmarks/harness_overhead.py",
            ["--framework", "fake", *FAKE_RUN_ARGS],
            "overhead fake resnet18 train b8",
        ),
        "benchmarks/store_scale.py": (
            "benchmarks/store_scale.py",
            ["--sizes", "2", "--keep", str(folder / "store_scale"), "--skip", "report,append"],
            "report1k",
        ),
        "benchmarks/worker_allocator.py fake": (
            "benchmarks/worker_allocator.py",
            ["--framework", "fake", *FAKE_RUN_ARGS],
            "worker, pinned",
        ),
    }
    return found


CASE_IDS = sorted(cases(Path()))


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, str]]:
    """Every case run at once (most of their time is imports), each with what its output must say."""
    folder = tmp_path_factory.mktemp("tiny")
    write_tiny_inputs(folder)
    every = cases(folder)

    def run(case: tuple[str, list[str], str]) -> tuple[subprocess.CompletedProcess, str]:
        script, arguments, expected = case
        done = subprocess.run(
            [sys.executable, str(ROOT / script), *arguments],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=SCRIPT_LIMIT_S,
        )
        return done, expected

    with ThreadPoolExecutor(4) as pool:
        return dict(zip(every, pool.map(run, every.values())))


@pytest.mark.parametrize("case", CASE_IDS)
def test_the_script_runs_and_says_what_it_does(ran, case):
    done, expected = ran[case]
    output = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stderr[-3000:]
    assert " ".join(expected.split()) in output, output[-3000:]


def test_every_script_there_is_run_here():
    """A new script in benchmarks/ or studies/ must join SCRIPTS (and so run above) or say in MODULES what runs it."""
    files = {str(path.relative_to(ROOT)) for folder in FOLDERS for path in (ROOT / folder).rglob("*.py")}
    assert files == set(SCRIPTS) | set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_the_modules_the_scripts_import_compile(module, tmp_path):
    py_compile.compile(str(ROOT / module), cfile=str(tmp_path / "compiled.pyc"), doraise=True)


def test_the_gpu_acceptance_shell_script_parses():
    done = subprocess.run(
        ["bash", "-n", str(ROOT / "benchmarks" / "gpu_acceptance.sh")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_studies_readme_names_every_study_and_its_data():
    """studies/README.md says what each study found: every script there and every sitting's folder is named."""
    readme = (ROOT / "studies" / "README.md").read_text()
    named = {Path(script).name for script in SCRIPTS + tuple(MODULES) if script.startswith("studies/")}
    sittings = {path.name for path in DATA.iterdir() if path.is_dir()}
    assert {name for name in named | sittings if name not in readme} == set()
