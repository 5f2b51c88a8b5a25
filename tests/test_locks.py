"""Locked environments (scripts/lock.sh, scripts/env_lib.sh): every environment's lock matches its requirements, a
lock that no longer does is refused by set-up with the command that remakes it, and an environment holds exactly its
lock's packages, so that two set-ups from one lock are the same software."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fwbench_aggregator.base.frameworks import shipped
from fwbench_aggregator.run import launch

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS = {
    "aggregator": ROOT / "aggregator" / "requirements-test.txt",
    **{f.environment: ROOT / f.folder / "requirements.txt" for f in shipped() if f.owns_environment},
}
PROJECT_PACKAGES = {
    "fwbench-core",
    "fwbench-aggregator",
    *(f"fwbench-{f.name}" for f in shipped() if f.owns_environment),
    "fwbench-keras",
}


def env_lib(command: str, cwd: Path = ROOT, venvs: Path | None = None) -> subprocess.CompletedProcess:
    """A shell with scripts/env_lib.sh sourced, as set-up has it."""
    script = f"root=$PWD; venvs={venvs or '/nonexistent'}; python=python3; . scripts/env_lib.sh; {command}"
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300)


def pins(lines: str) -> dict[str, str]:
    found = (re.match(r"^([A-Za-z0-9_.-]+)==([^\s\\;]+)", line) for line in lines.splitlines())
    return {m.group(1).lower().replace("_", "-"): m.group(2) for m in found if m}


@pytest.mark.parametrize(
    "requirements",
    [*ENVIRONMENTS.values(), ROOT / "aggregator" / "requirements.txt"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_lock_matches_its_requirements_and_pins_each_of_them(requirements):
    done = env_lib(f"check_lock {requirements.relative_to(ROOT)}")
    assert done.returncode == 0, done.stderr
    locked = pins((requirements.with_suffix(".lock")).read_text())
    wanted = pins(requirements.read_text())
    assert wanted and all(locked.get(name) == version for name, version in wanted.items())
    assert "--hash=sha256:" in requirements.with_suffix(".lock").read_text()


def copy_for_setup(tmp_path: Path) -> Path:
    """What setup_envs.sh reads before it installs anything: the scripts, the runner list and the requirements."""
    copy = tmp_path / "repo"
    for relative in ("scripts", "aggregator/fwbench_aggregator/base"):
        shutil.copytree(ROOT / relative, copy / relative)
    for path in [*ENVIRONMENTS.values(), ROOT / "aggregator" / "requirements.txt"]:
        for file in (path, path.with_suffix(".lock")):
            target = copy / file.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(file, target)
    return copy


def test_setup_refuses_a_lock_its_requirements_moved_away_from_and_says_how_to_remake_it(tmp_path):
    copy = copy_for_setup(tmp_path)
    requirements = copy / "runners" / "torch" / "requirements.txt"
    requirements.write_text(requirements.read_text().replace("numpy==", "numpy>="))
    venvs = tmp_path / "venvs"
    done = subprocess.run(
        ["bash", str(copy / "scripts" / "setup_envs.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FWBENCH_VENVS": str(venvs)},
    )
    assert done.returncode == 2
    assert "runners/torch/requirements.lock no longer matches runners/torch/requirements.txt" in done.stderr
    assert "bash scripts/lock.sh" in done.stderr
    assert not any(venvs.glob("*/bin/python"))  # refused before anything was installed
    (copy / "runners" / "tensorflow" / "requirements.lock").unlink()
    done = subprocess.run(
        ["bash", str(copy / "scripts" / "setup_envs.sh"), "tensorflow"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FWBENCH_VENVS": str(venvs)},
    )
    assert done.returncode == 2 and "no lock for runners/tensorflow/requirements.txt" in done.stderr


def freeze(python: Path, uv: Path) -> dict[str, str]:
    done = subprocess.run(
        [str(uv), "pip", "freeze", "--python", str(python)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return {name: version for name, version in pins(done.stdout).items() if name not in PROJECT_PACKAGES}


@pytest.mark.frameworks
@pytest.mark.parametrize("environment", list(ENVIRONMENTS))
def test_an_environment_holds_exactly_its_locks_packages_and_names_the_lock(environment):
    venvs = launch.default_venvs()
    lock = ENVIRONMENTS[environment].with_suffix(".lock")
    assert freeze(venvs / environment / "bin" / "python", venvs / ".uv" / "bin" / "uv") == pins(lock.read_text())
    digest = subprocess.run(["sha256sum", str(lock)], capture_output=True, text=True).stdout.split()[0]
    assert (venvs / environment / "fwbench-lock.sha256").read_text().strip() == digest


@pytest.mark.frameworks
def test_two_setups_from_one_lock_are_the_same_packages(tmp_path):
    """A second aggregator environment made from the same lock, beside the suite's own: the same package set."""
    venvs = launch.default_venvs()
    second = tmp_path / "aggregator"
    lock = "aggregator/requirements-test.lock"
    done = env_lib(
        f"ensure_uv && make_env second {second} {lock} runners/core/pyproject.toml aggregator/pyproject.toml",
        venvs=venvs,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    uv = venvs / ".uv" / "bin" / "uv"
    assert freeze(second / "bin" / "python", uv) == freeze(venvs / "aggregator" / "bin" / "python", uv)
