"""Framework versions side by side (docs/versions.md), without Docker: the version matrix of a sweep file, runner
labels FRAMEWORK@VERSION, the Compose override checked statically and merged with compose.yaml, the version report's
statistics, and the whole study through the command line on fake runners that report two versions of torch."""

from __future__ import annotations

import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from support.cli import fwbench, fwbench_in_process
from support.fakes import Fake

from fwbench_aggregator.analyse.versions import CONFIRMED, NOT_CONFIRMED, confirmed, version_changes, version_key
from fwbench_aggregator.base import frameworks
from fwbench_aggregator.plan.field_checks import SweepError
from fwbench_aggregator.plan.study_file import load_sweep
from fwbench_aggregator.plan.versions import FIRST_PORT, Version, load_versions
from fwbench_aggregator.run import launch
from fwbench_aggregator.run.compose_versions import COMPOSE_ENV, override_text
from fwbench_aggregator.run.compose_versions import service as version_service
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_core.fake import FRAMEWORK_VERSION_ENV, STEP_TIME_ENV

ROOT = Path(__file__).resolve().parents[1]
TOOLS = Path(sys.executable).parent  # docker-compose and check-jsonschema come with the test environment
OLD_TAG, NEW_TAG = "2.13.0-cuda12.6-cudnn9-runtime", "2.14.0-cuda12.6-cudnn9-runtime"
# The fake versions step 20 ms, a slower one 25 ms: at 4 against 5 ms the planted regression read "no change" once in
# a CI run's second part, where a busy host's wake-up delays are milliseconds (as in test_rounds.py).
STEP_S, SLOWER_STEP_S = 0.020, 0.025
TINY = (
    "models: [resnet18]\nmodes: [infer]\nbatch_sizes: [2]\nshapes: [3x32x32]\nwarmup: 1\nsteps: 5\nmin_measure_s: 0\n"
)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- the matrix and its labels ------------------------------------------------------------------------------------


def test_each_tag_is_a_runner_labelled_by_its_leading_version_on_a_port_of_its_own(tmp_path):
    study = write(tmp_path / "s.yaml", f"versions: {{torch: [{OLD_TAG}, {NEW_TAG}], tensorflow: [2.21.0-gpu]}}\n{TINY}")
    assert load_sweep(study).runners == ("torch@2.13.0", "torch@2.14.0", "tensorflow@2.21.0")
    matrix = load_versions(study)
    assert [(v.tag, v.service, v.port) for v in matrix.versions] == [
        (OLD_TAG, "torch-2.13.0", FIRST_PORT),
        (NEW_TAG, "torch-2.14.0", FIRST_PORT + 1),
        ("2.21.0-gpu", "tensorflow-2.21.0", FIRST_PORT + 2),
    ]
    assert matrix.versions[0].runner_value == f"torch@2.13.0=127.0.0.1:{FIRST_PORT}"


def test_versions_order_by_release_not_by_text():
    assert sorted(["2.10.0", "2.9.1", "2.10.0rc1", "2.9.1+cu126"], key=version_key) == [
        "2.9.1",
        "2.9.1+cu126",
        "2.10.0rc1",
        "2.10.0",
    ]


@pytest.mark.parametrize(
    "field, named",
    [
        (
            f"versions: {{torch: [{NEW_TAG}, 2.14.0-cuda12.8-cudnn9-runtime]}}",
            [NEW_TAG, "2.14.0-cuda12.8-cudnn9-runtime"],
        ),
        (f"runners: [torch@2.14.0]\nversions: {{torch: [{NEW_TAG}]}}", [NEW_TAG, "torch@2.14.0"]),
    ],
)
def test_a_label_clash_is_refused_before_any_run_naming_both(tmp_path, field, named):
    study = write(tmp_path / "s.yaml", f"{field}\n{TINY}")
    done = fwbench_in_process(
        "sweep", str(study), "--store", str(tmp_path / "store"), "--runner", "torch@2.14.0=127.0.0.1:1"
    )
    assert done.exit_code == 2 and "Traceback" not in done.output
    text = " ".join(done.output.split())
    assert "versions.torch[" in text and all(name in text for name in named), text
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    "field, problem",
    [
        ("versions: {torch: [2.10]}", "quote the tag"),
        ("versions: {pytorch: [2.14.0]}", "unknown framework 'pytorch' (did you mean torch?)"),
        ("versions: {torch: [latest]}", "does not start with a version"),
        ("versions: {torch: [2.14.0], embedded: yes please}", "versions.embedded"),
    ],
)
def test_a_bad_version_field_is_named(tmp_path, field, problem):
    with pytest.raises(SweepError) as refused:
        load_sweep(write(tmp_path / "s.yaml", f"{field}\n{TINY}"))
    assert problem in str(refused.value) and "line 1" in str(refused.value)


def test_runner_labels_are_runner_names_and_a_runner_given_twice_is_refused():
    twice = fwbench_in_process(
        "describe", "--runner", "torch@2.14.0=127.0.0.1:1", "--runner", "torch@2.14.0=127.0.0.1:2"
    )
    assert twice.exit_code == 2 and "given twice" in twice.output
    bad = fwbench_in_process("describe", "--runner", "torch@@2=127.0.0.1:1")
    assert bad.exit_code == 2 and "FRAMEWORK@VERSION" in " ".join(bad.output.split())


def test_a_label_starts_its_runner_from_the_environment_of_that_name(tmp_path):
    with pytest.raises(launch.RunnerStartError, match=r"scripts/setup_version_env.sh torch 2.8.0"):
        launch.embedded_command("torch@2.8.0", tmp_path)
    python = tmp_path / "torch@2.8.0" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    assert launch.embedded_command("torch@2.8.0", tmp_path)[:3] == [str(python), "-m", "fwbench_torch"]


# --- the Compose override -----------------------------------------------------------------------------------------


def compose_config(override: Path) -> dict:
    done = subprocess.run(
        [TOOLS / "docker-compose", "-f", "compose.yaml", "-f", str(override), "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "DOCKER_HOST")},
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_the_override_runs_one_runner_per_tag_as_compose_yaml_runs_its_framework(tmp_path):
    study = write(tmp_path / "s.yaml", f"versions: {{torch: [{OLD_TAG}, {NEW_TAG}], tensorflow: [2.20.0-gpu]}}\n{TINY}")
    override = write(
        tmp_path / "override.yaml",
        override_text(
            load_versions(study),
            str(study),
            "override.yaml",
            False,
            {"torch@2.14.0": ("sha256:aa", "pytorch/pytorch@sha256:bb")},
        ),
    )
    raw = yaml.safe_load(override.read_text())["services"]
    assert list(raw) == ["torch-2.13.0", "torch-2.14.0", "tensorflow-2.20.0"]
    assert raw["torch-2.14.0"]["labels"] == {"fwbench.runner": "torch@2.14.0", "fwbench.tag": NEW_TAG}
    merged = compose_config(override)
    env = dict(
        line.split("=", 1) for line in (ROOT / ".env").read_text().splitlines() if "=" in line and line[0] != "#"
    )
    plain = merged["services"]["torch"]
    for _label, service, tag, port in (
        ("torch@2.13.0", "torch-2.13.0", OLD_TAG, FIRST_PORT),
        ("torch@2.14.0", "torch-2.14.0", NEW_TAG, FIRST_PORT + 1),
    ):
        version = merged["services"][service]
        assert version["build"]["args"]["BASE_IMAGE"] == f"{env['TORCH_BASE_IMAGE']}:{tag}"
        assert version["build"]["dockerfile"] == plain["build"]["dockerfile"] == "runners/torch/Dockerfile"
        assert version["image"] == f"{env['FWBENCH_IMAGE_PREFIX']}/torch-runner:{tag}"
        assert version["environment"]["FWBENCH_IMAGE"] == version["image"]
        assert [(p["host_ip"], int(p["published"]), p["target"]) for p in version["ports"]] == [
            ("127.0.0.1", port, 50051)
        ]
        # Everything else as compose.yaml's torch runner: user, volumes, the GPUs, its environment.
        for key in ("user", "volumes", "deploy", "restart", "pull_policy"):
            assert version[key] == plain[key], key
        assert set(plain["environment"]) <= set(version["environment"])
    assert merged["services"]["torch-2.14.0"]["environment"]["FWBENCH_IMAGE_DIGEST"] == "sha256:aa"
    assert merged["services"]["torch-2.14.0"]["environment"]["FWBENCH_BASE_IMAGE_DIGEST"] == "pytorch/pytorch@sha256:bb"
    assert "FWBENCH_IMAGE_DIGEST" not in merged["services"]["torch-2.13.0"]["environment"]
    checked = subprocess.run(
        [
            TOOLS / "check-jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            write(tmp_path / "merged.yaml", yaml.safe_dump(merged)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_versions_up_names_a_tag_that_does_not_build_and_brings_up_the_others(tmp_path):
    """Compose here is a recording stand-in (no image is built): the tag 9.9.9 fails to build, as an unknown tag
    does, and the others are started and printed as --runner values."""
    log = tmp_path / "compose.log"
    compose = write(
        tmp_path / "compose",
        f"""#!/bin/sh
echo "$@" >> {log}
case "$*" in
  *" config"*) exec {TOOLS / "docker-compose"} "$@" ;;
  *"build torch-9.9.9"*) echo "pytorch/pytorch:9.9.9-cuda12.6-cudnn9-runtime: not found" >&2; exit 1 ;;
esac
""",
    )
    compose.chmod(compose.stat().st_mode | stat.S_IEXEC)
    study = write(
        tmp_path / "s.yaml", f"versions: {{torch: [{OLD_TAG}, 9.9.9-cuda12.6-cudnn9-runtime, {NEW_TAG}]}}\n{TINY}"
    )
    done = fwbench(
        "versions", "up", str(study), "--store", str(tmp_path / "store"), "--cpu", env={COMPOSE_ENV: str(compose)}
    )
    assert done.returncode == 1, done.stderr
    assert "torch@9.9.9" in done.stderr and "image tag 9.9.9-cuda12.6-cudnn9-runtime" in done.stderr
    assert done.stdout.split() == [
        "--runner",
        f"torch@2.13.0=127.0.0.1:{FIRST_PORT}",
        "--runner",
        f"torch@2.14.0=127.0.0.1:{FIRST_PORT + 2}",
    ]
    calls = log.read_text().splitlines()
    assert [c.rsplit(" ", 1)[1] for c in calls if " build " in c] == ["torch-2.13.0", "torch-9.9.9", "torch-2.14.0"]
    assert calls[-1].endswith("up -d --wait torch-2.13.0 torch-2.14.0")
    override = tmp_path / "store.versions.compose.yaml"
    assert f"-f {override}" in calls[-1] and "deploy" not in override.read_text()  # --cpu: no GPU reservation
    down = fwbench("versions", "down", str(study), "--store", str(tmp_path / "store"), env={COMPOSE_ENV: str(compose)})
    assert down.returncode == 0, down.stderr
    assert log.read_text().splitlines()[-1].endswith("rm --stop --force torch-2.13.0 torch-9.9.9 torch-2.14.0")


# --- the version report's statistics ------------------------------------------------------------------------------


def synthetic(versions: dict[str, tuple[float, dict]], runs: int = 4) -> pd.DataFrame:
    """Summaries of `runs` runs per version: (median step time s, extra columns), with a little spread."""
    rows = []
    for version, (step_s, extra) in versions.items():
        for repetition in range(runs):
            rows.append(
                {
                    "run_id": f"{version}-{repetition}",
                    "runner": f"torch@{version}",
                    "framework": "torch",
                    "framework_version": version,
                    "model": "resnet50",
                    "mode": "train",
                    "batch_size": 64,
                    "input_shape": "3x224x224",
                    "precision": "amp_bf16",
                    "device": "gpu:0",
                    "repetition": repetition,
                    "status": "ok",
                    "median_step_time_s": step_s * (1 + 0.004 * (repetition % 2)),
                    "python_version": "3.12.1",
                    "device_name": "H100",
                    "runner_options": "host_id=a",
                    **extra,
                }
            )
    return pd.DataFrame(rows)


def test_each_version_is_judged_against_the_previous_one_regressions_first_and_flagged_where_not_only_it_changed():
    summary = synthetic(
        {
            "2.10.0": (0.100, {}),
            "2.9.0": (0.100, {}),
            "2.11.0": (0.090, {"python_version": "3.13.0"}),
            "2.12.0": (0.108, {}),
        }
    )
    changes = version_changes(summary, pd.DataFrame())
    assert list(zip(changes["version_from"], changes["version_to"], changes["change"])) == [
        ("2.11.0", "2.12.0", "regression"),
        ("2.10.0", "2.11.0", "improvement"),
        ("2.9.0", "2.10.0", "no change"),
    ]
    regression = changes.iloc[0]
    assert regression["text"].startswith(
        "torch 2.11.0 → 2.12.0: resnet50 train b64 amp_bf16 3x224x224 gpu:0 20% slower ["
    )
    assert regression["ci_low"] < regression["ratio"] < regression["ci_high"]
    assert "11% faster [" in changes.iloc[1]["text"]
    assert changes.iloc[1]["environment"] == "python_version 3.12.1 → 3.13.0"
    assert changes.iloc[0]["environment"] == "python_version 3.13.0 → 3.12.1" and changes.iloc[2]["environment"] == ""


def test_a_regression_is_confirmed_only_where_the_second_round_calls_it_too():
    first = version_changes(synthetic({"2.13": (0.100, {}), "2.14": (0.110, {})}), pd.DataFrame())
    agrees = version_changes(synthetic({"2.13": (0.100, {}), "2.14": (0.111, {})}), pd.DataFrame())
    disagrees = version_changes(synthetic({"2.13": (0.100, {}), "2.14": (0.1002, {})}), pd.DataFrame())
    assert confirmed(first, agrees)["confirmation"].tolist() == [CONFIRMED]
    kept = confirmed(first, disagrees).iloc[0]
    assert kept["confirmation"] == NOT_CONFIRMED and kept["change"] == "regression"
    assert kept["ratio"] == pytest.approx(1.10, rel=0.01) and math.isclose(
        kept["confirmation_ratio"], 1.002, rel_tol=1e-2
    )
    assert confirmed(first, None)["confirmation"].tolist() == ["not checked"]


# --- the study through the command line, on fake runners reporting versions ----------------------------------------


@pytest.fixture()
def fake_versions(fakes):
    """Start fake runners reporting torch at a version, each with its step time: {version: address}."""

    def start(**versions: float) -> dict[str, str]:
        wanted = []
        for name, step_s in versions.items():
            version = name.lstrip("v").replace("_", ".")
            tag = f"{version}-cuda12.6-cudnn9-runtime"
            # As an image built by `fwbench versions up` reports itself (run.compose_versions).
            image = {
                "FWBENCH_IMAGE": f"fwbench/torch-runner:{tag}",
                "FWBENCH_IMAGE_DIGEST": f"sha256:image-{version}",
                "FWBENCH_BASE_IMAGE": f"pytorch/pytorch:{tag}",
                "FWBENCH_BASE_IMAGE_DIGEST": f"sha256:base-{version}",
                "FWBENCH_ENVIRONMENT_LOCK": f"lock-{version}",
            }
            wanted.append(Fake(version, step_s=step_s, framework="torch", version=version, env=image))
        return fakes(*wanted).addresses

    return start


def version_study(tmp_path: Path, addresses: dict[str, str], *extra: str, repetitions: int = 4):
    tags = [f"{v}-cuda12.6-cudnn9-runtime" for v in addresses]
    study = write(
        tmp_path / "study.yaml", f"versions: {{torch: [{', '.join(tags)}]}}\n{TINY}repetitions: {repetitions}\n"
    )
    runners = [arg for v, a in addresses.items() for arg in ("--runner", f"torch@{v}={a}")]
    return fwbench("sweep", str(study), "--store", str(tmp_path / "store"), *runners, *extra)


@pytest.mark.slow
def test_a_planted_slowdown_in_one_version_is_found_and_confirmed(tmp_path, fake_versions):
    done = version_study(tmp_path, fake_versions(v2_13_0=STEP_S, v2_14_0=SLOWER_STEP_S))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert (
        "torch 2.13.0 → 2.14.0: resnet18 infer b2 fp32 3x32x32 cpu:0" in text and "confirmed by a second round" in text
    )
    changes = pd.read_csv(tmp_path / "store" / "report" / "version_changes.csv")
    [row] = changes.to_dict("records")
    assert (row["change"], row["confirmation"]) == ("regression", CONFIRMED)
    assert 1.15 < row["ratio"] < 1.35 and row["ci_low"] > 1.0
    confirmation = ResultStore(tmp_path / "store" / "confirmation").load("summary")
    assert sorted(confirmation["runner"].unique()) == ["torch@2.13.0", "torch@2.14.0"]
    assert confirmation.sort_values("started_at_unix_s")["runner"].tolist()[:4] == [
        "torch@2.13.0",
        "torch@2.14.0",
        "torch@2.14.0",
        "torch@2.13.0",
    ]  # interleaved A B B A
    summary = ResultStore(tmp_path / "store").load("summary")
    assert set(zip(summary["runner"], summary["framework_version"])) == {
        ("torch@2.13.0", "2.13.0"),
        ("torch@2.14.0", "2.14.0"),
    }
    recorded = summary.set_index("runner")[
        ["image_digest", "container_base_image", "base_image_digest"]
    ].drop_duplicates()
    assert recorded.loc["torch@2.14.0"].tolist() == [
        "sha256:image-2.14.0",
        f"pytorch/pytorch:{NEW_TAG}",
        "sha256:base-2.14.0",
    ]
    # Every run names its environment's lock and the numeric libraries beneath the framework (the fake's own numpy).
    environment = summary.set_index("runner")[["environment_lock", "numpy_version", "blas"]].drop_duplicates()
    assert environment.loc["torch@2.13.0", "environment_lock"] == "lock-2.13.0"
    assert (environment["numpy_version"].str.len() > 0).all() and (environment["blas"].str.len() > 0).all()
    assert pd.isna(row["environment"])  # the same base image family, Python, host and device: nothing flagged
    # From the store alone, later: the same report.
    again = fwbench("report", "--versions", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert "regression" in again.stdout and "confirmed by a second round" in " ".join(again.stdout.split())
    page = (tmp_path / "again" / "versions.html").read_text()
    assert "torch 2.13.0 → 2.14.0" in page and "data:image/png;base64," in page


@pytest.mark.slow
def test_an_aa_pair_of_identical_versions_shows_no_change_and_needs_no_confirmation(tmp_path, fake_versions):
    done = version_study(tmp_path, fake_versions(v1_0=STEP_S, v1_1=STEP_S), repetitions=3)
    assert done.returncode == 0, done.stderr
    changes = pd.read_csv(tmp_path / "store" / "report" / "version_changes.csv")
    assert changes["change"].tolist() in (["no change"], ["unresolved"]), changes.to_dict("records")
    assert not (tmp_path / "store" / "confirmation").exists()


@pytest.mark.slow
def test_an_unreachable_version_is_named_by_its_tag_and_the_others_results_kept(tmp_path, fake_versions):
    addresses = {**fake_versions(v2_13_0=STEP_S, v2_14_0=SLOWER_STEP_S), "2.15.0": "127.0.0.1:9"}
    done = version_study(tmp_path, addresses, "--no-confirm", repetitions=3)
    assert done.returncode == 1
    assert "runner torch@2.15.0 failed" in done.stderr and "image tag 2.15.0-cuda12.6-cudnn9-runtime" in done.stderr
    summary = ResultStore(tmp_path / "store").load("summary")
    assert sorted(summary["runner"].unique()) == ["torch@2.13.0", "torch@2.14.0"]
    changes = pd.read_csv(tmp_path / "store" / "report" / "version_changes.csv")
    assert changes[["change", "confirmation"]].values.tolist() == [["regression", "not checked"]]


@pytest.mark.slow
def test_embedded_versions_start_from_environments_named_by_their_labels(tmp_path):
    """versions with embedded: true: each runner from .venvs/FRAMEWORK@VERSION (here a fake framework's, whose
    environments are this Python with the version to report)."""
    declaration = write(tmp_path / "fake.toml", '[fake]\nmodule = "fwbench_core.fake"\nfolder = "runners/core"\n')
    venvs = tmp_path / "venvs"
    for version in ("1.0", "1.1"):
        python = venvs / f"fake@{version}" / "bin" / "python"
        python.parent.mkdir(parents=True)
        write(python, f'#!/bin/sh\n{FRAMEWORK_VERSION_ENV}={version} exec {sys.executable} "$@"\n')
        python.chmod(0o755)
    study = write(tmp_path / "s.yaml", f"versions: {{fake: ['1.0', '1.1'], embedded: true}}\n{TINY}repetitions: 3\n")
    done = fwbench(
        "sweep",
        str(study),
        "--store",
        str(tmp_path / "store"),
        "--venvs",
        str(venvs),
        "--no-confirm",
        env={frameworks.EXTRA_ENV: str(declaration), STEP_TIME_ENV: "0.004"},
    )
    assert done.returncode == 0, done.stderr
    summary = ResultStore(tmp_path / "store").load("summary")
    assert set(zip(summary["runner"], summary["framework_version"])) == {("fake@1.0", "1.0"), ("fake@1.1", "1.1")}
    assert (tmp_path / "store" / "report" / "version_points.csv").exists()


def test_a_version_report_of_a_store_without_runs_is_refused_naming_the_store(tmp_path):
    done = fwbench_in_process("report", "--versions", "--store", str(tmp_path / "empty"))
    assert done.exit_code == 2 and "holds no readable runs" in done.output and "Traceback" not in done.output


def test_a_keras_runners_version_runs_its_backends_image_at_that_tag_with_its_own_entry_point():
    entry = version_service(Version("keras-jax", "26.10-py3", "keras-jax@3.15.1", 50100), cpu=True)
    assert entry["image"].endswith("/jax-runner:26.10-py3")
    assert entry["build"]["dockerfile"] == "runners/jax/Dockerfile"
    assert entry["build"]["args"]["BASE_IMAGE"].startswith("${JAX_BASE_IMAGE")
    assert entry["entrypoint"] == ["python3", "-m", "fwbench_keras.on_jax"]
    assert "entrypoint" not in version_service(Version("jax", "26.10-py3", "jax@0.10.2", 50101), cpu=True)
