"""The built-in models' Keras definitions are backend-neutral (issue 71's first step): every one builds and runs
forward on Keras' JAX and PyTorch backends, in those frameworks' own environments, and from the same weights and
input gives the TensorFlow backend's output. The larger member of a family (resnet152, efficientnet_b4) is its
smaller member's builder at other depths (support.runners.LARGER_MEMBERS): its parity on each Keras runner is
test_parity's, and here it would add a third of the time (drawing and moving its weights on three backends). Only
wav2vec2's grouped convolution asks for its backend: TensorFlow's own kernel there, Keras' convolution elsewhere
(fwbench_keras/models/speech.py says why)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.runners import LARGER_MEMBERS

from fwbench_aggregator.run import launch
from fwbench_core.builtin import MODEL_SPECS

HERE = Path(__file__).resolve().parent
# float32 through up to 150 layers on another backend's kernels: differences of a few millionths were measured.
TOLERANCE = 1e-4
CHECKED = tuple(sorted(name for name in MODEL_SPECS if name not in LARGER_MEMBERS))
TIMEOUT_S = 600  # JAX's builds alone took 90 s on a 2-core VM


def forward(environment: str, backend: str, action: str, folder: Path) -> subprocess.Popen:
    python = launch.default_venvs() / environment / "bin" / "python"
    env = {**os.environ, "KERAS_BACKEND": backend}
    command = [str(python), str(HERE / "keras_backend_forward.py"), action, str(folder), *CHECKED]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def models_of(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.splitlines()[-1])["models"]


@pytest.mark.frameworks
def test_every_built_in_keras_model_runs_on_jax_and_torch_with_tensorflows_outputs(tmp_path):
    exported = models_of(forward("tensorflow", "tensorflow", "export", tmp_path))
    assert set(exported) == set(CHECKED) and all(found["ok"] for found in exported.values()), exported
    checks = {
        backend: forward(environment, backend, "check", tmp_path)
        for environment, backend in (("jax", "jax"), ("torch", "torch"))
    }
    for backend, process in checks.items():
        models = models_of(process)
        assert set(models) == set(CHECKED), backend
        failed = {
            name: found for name, found in models.items() if not found["ok"] or found["relative_difference"] > TOLERANCE
        }
        assert not failed, (backend, failed)


@pytest.mark.frameworks
def test_the_own_form_benchmark_times_ours_against_keras_applications_on_a_backend():
    """benchmarks/keras_own_form.py, tiny, on Keras' PyTorch backend (eager: no compilation to wait for)."""
    python = launch.default_venvs() / "torch" / "bin" / "python"
    script = HERE.parent / "benchmarks" / "keras_own_form.py"
    tiny = ["--models", "mobilenet_v2", "--image-size", "32", "--batch-size", "2", "--warmup", "1", "--steps", "2"]
    done = subprocess.run(
        [str(python), str(script), *tiny, "--repetitions", "2"],
        env={**os.environ, "KERAS_BACKEND": "torch"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "on torch, train b2 (32, 32, 3)" in done.stdout, done.stdout
    assert "mobilenet_v2 ours / keras.applications = " in done.stdout, done.stdout
    # Each side's parameter count beside its time: where the networks differ, it shows.
    assert done.stdout.count(" parameters") == 2, done.stdout
