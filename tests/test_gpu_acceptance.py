"""The GPU acceptance script's logic, run here as its CPU dry run (benchmarks/gpu_acceptance.py --device cpu: the
same sections with the CPU as the device and tiny shapes), so that it does not fail for the first time on a GPU
machine, where the minutes are few. Real torch and JAX runners from their environments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fwbench_aggregator.run import launch

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_acceptance.py"
SECTIONS = (
    "1 A/A",
    "2 planted",
    "3 bare loop",
    "4 energy",
    "5 distributed",
    "6 native and MFU",
    "7 serving",
    "8 JAX",
    "9 generation",
)


def dry_run(tmp_path: Path, sections: tuple[str, ...]) -> tuple[dict[str, pd.DataFrame], str, Path]:
    """The dry run of `sections` (by number): each section's checks, what to show when an assertion fails, the
    report. The sections not chosen are listed as not run."""
    venvs = launch.default_venvs()
    out = tmp_path / "acceptance"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--out",
            str(out),
            "--wall-budget-s",
            "1200",
            "--sections",
            ",".join(section.split()[0] for section in sections),
            "--runner-python",
            str(venvs / "torch" / "bin" / "python"),
            "--jax-python",
            str(venvs / "jax" / "bin" / "python"),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert (out / "report.md").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    checks = pd.read_csv(out / "report.csv").fillna("")
    explained = f"{done.stdout[-3000:]}\n{(out / 'report.md').read_text()[-6000:]}"
    assert set(checks["section"]) == set(SECTIONS), explained
    assert not checks["detail"].str.contains("were spent").any(), explained  # every section had its time
    assert done.returncode in (0, 1), explained  # 1: some check failed; anything else is the script's own crash
    chosen = checks[checks["section"].isin(sections)]
    assert not (chosen["status"] == "not run").any(), explained
    return {section: frame for section, frame in chosen.groupby("section")}, explained, out / "report.md"


@pytest.mark.quiet  # judged from measured times
def test_the_cpu_dry_run_calls_the_planted_difference(tmp_path):
    by, explained, _ = dry_run(tmp_path, ("2 planted",))
    # The planted difference (runner b's model does twice the block work here) is called, b slower; or, where this
    # host's runs varied too much to tell anything (135% in one CI run, with nothing else running), the verdict
    # says so. A plant that did nothing reads "not resolved" or "no significant difference" and fails here.
    [planted] = by["2 planted"].to_dict("records")
    assert planted["status"] == "pass" or planted["detail"].startswith("too noisy to tell"), explained


def test_the_cpu_dry_run_writes_every_other_section_with_its_evidence(tmp_path):
    """Every section but the planted difference: none of their checks here is judged from measured times (the A/A
    grid states its wrong verdicts, the bare loop its ratio), so they need no quiet host."""
    by, explained, report = dry_run(tmp_path, tuple(section for section in SECTIONS if section != "2 planted"))
    # The A/A grid's 4 points are each judged, and the count of wrong verdicts is stated.
    assert by["1 A/A"]["check"].str.startswith("wrong verdicts over 4 points").any(), explained
    assert len(by["1 A/A"]) == 2 + 4, explained
    # A CPU has no power reading here: energy is withheld with its reason, never passed silently.
    assert set(by["4 energy"]["status"]) == {"withheld"} and by["4 energy"]["detail"].str.len().min() > 0, explained
    # What needs GPUs is refused before anything runs, with a message naming the device.
    refused = by["5 distributed"][by["5 distributed"]["check"].str.startswith("refused")]
    assert refused["status"].tolist() == ["pass", "pass"] and refused["detail"].str.contains("gpu:0").all(), explained
    assert by["5 distributed"]["check"].str.startswith("DDP world size 1 against the plain run").any(), explained
    assert by["6 native and MFU"]["check"].str.startswith("native profile").any(), explained
    serving = by["7 serving"]
    assert {"p50", "p90", "p99"} <= {c.split(", ")[1] for c in serving["check"] if c.count(", ") >= 2}, explained
    assert by["8 JAX"]["check"].str.startswith("JAX against torch").any(), explained
    # Generation (the tiny decoder here): each figure given for both runners; the same tokens and consistent
    # throughput are not matters of timing, so they pass here too (an A/A verdict on a CPU is not judged here).
    generation = by["9 generation"]
    figures = generation[generation["check"].str.contains("(A/A)", regex=False)]
    assert len(figures) == 2 and figures["figure"].str.contains(r"^a .* ms.*; b .* ms", regex=True).all(), explained
    assert (generation[~generation.index.isin(figures.index)]["status"] == "pass").all(), explained
    # The bare loop's ratio is a figure with its target, whatever a noisy CPU makes of it.
    assert by["3 bare loop"]["figure"].str.contains("runner .* ms, bare .* ms", regex=True).all(), explained
    # The report names what this machine lacks (this environment has no TensorFlow, the runner's has none either).
    assert "- TensorFlow: absent" in report.read_text(), explained
