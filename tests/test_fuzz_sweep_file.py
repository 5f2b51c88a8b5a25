"""The sweep file's reader under generated and mutated files (hypothesis, a small budget): it either reads a sweep or
refuses the file with its own error (SweepError: exit status 2 on the command line, naming the file), never a
traceback, and nothing is written but into the scratch folder, which holds only the file afterwards."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import fwbench_in_process

from fwbench_aggregator.base.frameworks import names as framework_names
from fwbench_aggregator.plan.field_checks import SweepError
from fwbench_aggregator.plan.study import Sweep
from fwbench_aggregator.plan.study_file import load_sweep

VALID = b"""\
runners: [torch, tensorflow]
models: [resnet18, bert_tiny]
modes: [train, infer]
batch_sizes: [16, 32]
shapes: {resnet18: [3x32x32], bert_tiny: [seq=128]}
options: {bert_tiny: {head: mlm}}
repetitions: 2
models_dir: plugins
"""
KEYS = [
    "runners",
    "models",
    "modes",
    "batch_sizes",
    "shapes",
    "options",
    "repetitions",
    "models_dir",
    "warmup",
    "steps",
    "precisions",
    "devices",
    "time_budget_s",
    "max_runs",
    "cooldown_s",
    "x",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(
        ["resnet18", "torch", "3x32x32", "../../etc", "/proc/self", "*a", "&a x", "!!python/object:os.system", "1e999"]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
GENERATED = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8).map(
    lambda raw: yaml.safe_dump(raw, allow_unicode=True).encode()
)


@st.composite
def mutated(draw) -> bytes:
    """The valid file with a few bytes replaced, inserted or deleted, or a line repeated or nested."""
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["replace", "insert", "delete", "brackets"]))
        if how == "replace" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(
                st.binary(min_size=1, max_size=8) | st.sampled_from([b"[", b"{", b": ", b"\n- ", b"&a ", b"*a"])
            )
        elif how == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        else:
            depth = draw(st.integers(1, 400))
            data[at:at] = b"[" * depth
    return bytes(data)


def _read(data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="fwbench-fuzz-") as scratch:
        scratch = Path(scratch)
        (scratch / "plugins").mkdir()
        path = scratch / "sweep.yaml"
        path.write_bytes(data)
        try:
            sweep = load_sweep(path, framework_names())
        except SweepError as error:
            assert str(error).startswith(str(path)), str(error)
            # The command line says the same, exit status 2, before anything is written.
            done = fwbench_in_process("sweep", str(path), "--store", str(scratch / "store"), columns=400)
            assert done.exit_code == 2 and "Traceback" not in done.output, done.output
        else:
            assert isinstance(sweep, Sweep)
        assert sorted(os.listdir(scratch)) == ["plugins", "sweep.yaml"] and os.listdir(scratch / "plugins") == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated())
def test_a_mutated_sweep_file_is_read_or_refused_by_name(data):
    _read(data)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=GENERATED)
def test_a_generated_sweep_file_is_read_or_refused_by_name(data):
    _read(data)
