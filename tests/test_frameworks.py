"""The runner list: declared once (aggregator/fwbench_aggregator/base/frameworks.toml), read by launching, the command line,
sweeps, setup_envs.sh and the tests, and the source of each runner's Dockerfile and the Compose files.
A third framework, the fake backend declared in a file of its own, runs through the CLI with no other
edit."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir

from fwbench_aggregator.analyse.comparison import comparison_rows
from fwbench_aggregator.base import frameworks
from fwbench_aggregator.plan import spec as plan
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.run import launch
from fwbench_aggregator.store.results_store import ResultStore

FAKE_DECLARATION = """\
[fake]
module = "fwbench_core.fake"
folder = "runners/core"
environment = "aggregator"  # the fake needs no framework: it runs from the aggregator's environment
"""


@pytest.fixture()
def fake_framework(tmp_path, monkeypatch) -> dict[str, str]:
    """The fake runner declared as a framework of its own; returns the environment that declares it."""
    path = tmp_path / "extra-frameworks.toml"
    path.write_text(FAKE_DECLARATION)
    monkeypatch.setenv(frameworks.EXTRA_ENV, str(path))
    return {frameworks.EXTRA_ENV: str(path)}


def test_every_shipped_framework_has_its_package_and_environment_recipe():
    shipped = frameworks.shipped()
    assert len(shipped) >= 2, "parity compares the first two"
    for framework in shipped:
        assert (launch.REPO_ROOT / framework.folder / "pyproject.toml").exists()
        # A runner in another framework's environment (a Keras runner) installs only its package there.
        assert (launch.REPO_ROOT / framework.requirements).exists() == framework.owns_environment
        assert (launch.REPO_ROOT / framework.folder / framework.module.partition(".")[0]).is_dir()


def test_the_checked_in_dockerfiles_and_compose_files_are_generated_from_the_list():
    done = subprocess.run(
        [sys.executable, "scripts/generate_runner_files.py", "--check"],
        cwd=launch.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_shell_scripts_read_the_same_list():
    done = subprocess.run(
        [sys.executable, "aggregator/fwbench_aggregator/base/frameworks.py"],
        cwd=launch.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines() == [f"{f.name} {f.environment} {f.folder}" for f in frameworks.shipped()]


def test_an_extra_declaration_adds_a_framework_and_a_repeated_name_is_refused(tmp_path, monkeypatch, fake_framework):
    assert frameworks.names() == [*(f.name for f in frameworks.shipped()), "fake"]
    command = launch.embedded_command("fake", launch.default_venvs())
    assert command[0].endswith("aggregator/bin/python") and command[1:3] == ["-m", "fwbench_core.fake"]
    again = tmp_path / "again.toml"
    shipped = frameworks.shipped()[0].name
    again.write_text(f"[{shipped}]\nmodule = 'x'\nfolder = 'y'\n")
    monkeypatch.setenv(frameworks.EXTRA_ENV, f"{fake_framework[frameworks.EXTRA_ENV]}:{again}")
    with pytest.raises(frameworks.FrameworkListError, match=rf"again.toml: \[{shipped}\] is declared twice"):
        frameworks.names()


def test_a_sweep_runs_every_framework_compared_by_default(fake_framework):
    by_default = tuple(f.name for f in frameworks.shipped() if f.compared_by_default)
    assert by_default[:2] == ("torch", "tensorflow"), "the comparison this product is for"
    assert sweep_from_options("resnet18").runners == (*by_default, "fake")


def test_a_framework_not_compared_by_default_runs_only_when_named(tmp_path, monkeypatch):
    path = tmp_path / "opt-in.toml"
    path.write_text(FAKE_DECLARATION + "compared_by_default = false\n")
    monkeypatch.setenv(frameworks.EXTRA_ENV, str(path))
    assert "fake" in frameworks.names() and "fake" not in frameworks.default_names()
    assert "fake" not in sweep_from_options("resnet18").runners
    assert "fake" in sweep_from_options("resnet18", runners="torch,fake").runners
    path.write_text(FAKE_DECLARATION + "compared_by_default = 'no'\n")
    with pytest.raises(
        frameworks.FrameworkListError, match=r"\[fake\] compared_by_default = 'no'; accepted values: true, false"
    ):
        frameworks.names()


@pytest.mark.frameworks
def test_a_third_framework_runs_through_the_cli_with_no_other_edit(tmp_path, fake_framework):
    help_text = fwbench("compare", "--help", env={**fake_framework, "COLUMNS": "250"}).stdout
    assert (
        ",".join(frameworks.default_names()) in help_text
    )  # the default: those compared by default, the fake included

    listed = fwbench("models", "--frameworks", "fake", env=fake_framework)
    assert listed.returncode == 0, listed.stderr
    assert "fake" in listed.stdout and "resnet18" in listed.stdout

    shipped = frameworks.shipped()[0].name
    done = fwbench(
        "compare",
        "--frameworks",
        f"{shipped},fake",
        "--batch-size",
        "2",
        "--shape",
        "3x32x32",
        "--warmup",
        "1",
        "--steps",
        "3",
        "--out",
        str(tmp_path),
        env=fake_framework,
    )
    assert done.returncode == 0, done.stderr
    summary = pd.read_parquet(only_run_dir(tmp_path) / "summary.parquet")
    assert set(summary["runner"]) == {shipped, "fake"} and (summary["status"] == "ok").all()


@pytest.mark.frameworks
def test_runs_each_in_a_fresh_process_are_stored_so_and_never_pooled_with_runs_in_the_runners_own(
    tmp_path, fake_framework
):
    store = tmp_path / "store"
    for isolation in ("process", "thread", "process-per-2-runs"):
        done = fwbench(
            "compare",
            "--frameworks",
            "fake",
            "--batch-size",
            "2",
            "--shape",
            "3x32x32",
            "--warmup",
            "1",
            "--steps",
            "3",
            "--repetitions",
            "3",
            "--run-isolation",
            isolation,
            "--store",
            str(store),
            "--out",
            str(tmp_path / isolation),
            env=fake_framework,
        )
        assert done.returncode == 0, done.stderr
        summary = pd.read_parquet(only_run_dir(tmp_path / isolation) / "summary.parquet")
        assert (
            set(summary["run_isolation"]) == {isolation}
            and "run_isolation=" + isolation in summary["runner_options"][0]
        )
    stored = ResultStore(store)
    table = comparison_rows(stored.load("summary"), stored.load("steps"))
    assert set(table["runner"]) == {
        "fake (run isolation process)",
        "fake (run isolation thread)",
        "fake (run isolation process-per-2-runs)",
    }
    assert (table["runs"] == 3).all()
    refused = fwbench("compare", "--runner", "fake=127.0.0.1:1", "--run-isolation", "process", env=fake_framework)
    assert refused.returncode == 2 and "a runner given with --runner runs as it was started" in " ".join(
        refused.stderr.split()
    ), refused.stderr
    unknown = fwbench("compare", "--run-isolation", "fork", env=fake_framework)
    assert (
        unknown.returncode == 2
        and "accepted values: thread, process, process-on-gpu, process-per-2-runs" in " ".join(unknown.stderr.split())
    ), unknown.stderr


def test_the_aggregators_run_isolations_are_the_runners():
    from fwbench_core.isolation import RunIsolation

    assert [i.value for i in plan.RunIsolation] == [i.value for i in RunIsolation]


def test_the_tensorflow_image_lets_tensorflow_grow_its_gpu_memory_rather_than_take_it_all():
    tensorflow = next(f for f in frameworks.frameworks().values() if f.name == "tensorflow")
    assert ("TF_FORCE_GPU_ALLOW_GROWTH", "true") in tensorflow.image_env
    assert (
        "    TF_FORCE_GPU_ALLOW_GROWTH=true \\\n" in (launch.REPO_ROOT / tensorflow.folder / "Dockerfile").read_text()
    )


def environments_listing(*names: str) -> subprocess.CompletedProcess:
    """What set-up reads: the environments the named frameworks need (frameworks.py --environments)."""
    return subprocess.run(
        [sys.executable, "aggregator/fwbench_aggregator/base/frameworks.py", "--environments", *names],
        cwd=launch.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_keras_runner_is_set_up_in_its_backends_environment_with_its_package():
    done = environments_listing("keras-jax")
    assert done.returncode == 0, done.stderr
    # The jax environment, from the JAX runner's lock, with the Keras runners' package beside the JAX runner's.
    assert done.stdout.split() == ["jax", "runners/jax", "runners/keras"]
    assert launch.environment_python("keras-jax", launch.default_venvs()) == launch.environment_python(
        "jax", launch.default_venvs()
    )
    keras_runners = [f for f in frameworks.shipped() if f.folder == "runners/keras"]
    assert {f.environment for f in keras_runners} == {"tensorflow", "jax", "torch"}
    assert not any(f.compared_by_default for f in keras_runners)


def test_setting_up_an_unknown_framework_names_the_known_ones():
    done = environments_listing("keras")
    assert done.returncode == 2
    assert "no framework named keras" in done.stderr and "keras-torch" in done.stderr


def test_the_keras_backends_study_runs_every_keras_runner_beside_the_native_ones():
    from fwbench_aggregator.plan.study_file import load_sweep

    study = load_sweep(str(launch.REPO_ROOT / "examples" / "studies" / "keras_backends.yaml"))
    keras_runners = {f.name for f in frameworks.shipped() if f.folder == "runners/keras"}
    assert keras_runners <= set(study.runners)
    assert {"torch", "tensorflow", "jax"} <= set(study.runners)
