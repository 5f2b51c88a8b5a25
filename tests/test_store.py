"""The append-only results store: round trip, refusal to rewrite, resume keys, and that a writer
killed at any moment never leaves a damaged run visible."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from fwbench_aggregator.plan.keys import config_key
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.schema import STORE_FORMAT

CONFIG = {
    "runner": "torch",
    "model": "resnet18",
    "model_options": {"head": "mlm"},
    "mode": "train",
    "batch_size": 32,
    "input_shape": "3x32x32",
    "precision": "fp32",
    "device": None,
    "layout": None,
    "compilation": None,
    "settings": {"warmup_steps": 5, "measured_steps": 20},
    "repetition": 0,
}


def frames(rows: int = 5, runner: str = "torch") -> dict[str, pd.DataFrame]:
    steps = pd.DataFrame(
        {
            "runner": runner,
            "step_index": range(rows),
            "warmup": [i < 2 for i in range(rows)],
            "step_time_s": [0.01 * (i + 1) for i in range(rows)],
        }
    )
    summary = pd.DataFrame([{"runner": runner, "status": "ok", "error": "", "median_step_time_s": 0.03}])
    return {"steps": steps, "summary": summary, "power": pd.DataFrame()}


def test_config_key_is_stable_and_order_independent():
    key = config_key(CONFIG)
    assert len(key) == 16 and int(key, 16) >= 0
    assert config_key(dict(reversed(list(CONFIG.items())))) == key
    assert config_key({**CONFIG, "input_shape": [3, 32, 32]}) == config_key({**CONFIG, "input_shape": (3, 32, 32)})
    assert config_key({**CONFIG, "repetition": 1}) != key
    assert config_key({**CONFIG, "model_options": {}}) != key
    # Pinned: a key must not change between versions, or --resume would rerun everything.
    assert config_key({"runner": "torch", "batch_size": 32}) == "513ce5763faeab27"


def test_round_trip(tmp_path):
    store = ResultStore(tmp_path)
    assert store.keys() == set() and store.load("steps").empty and store.configs().empty
    written = {}
    for runner in ("torch", "tensorflow"):
        config = {**CONFIG, "runner": runner}
        key = config_key(config)
        written[key] = frames(runner=runner)
        path = store.append(key, config, written[key], {"run_id": "r1", "host": tmp_path})
        assert path == tmp_path / "runs" / key
        assert store.config(key) == config
        assert store.manifest(key)["host"] == str(tmp_path)
    assert store.keys() == set(written)
    steps = store.load("steps")
    assert len(steps) == 10 and list(steps.columns[:2]) == ["run_key", "runner"]
    for key, stored in written.items():
        mine = steps[steps["run_key"] == key].drop(columns="run_key").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, stored["steps"], check_dtype=False)
    assert store.load("power").empty
    assert store.load("no_such_frame").empty
    configs = store.configs()
    assert set(configs["run_key"]) == set(written)
    assert set(configs["runner"]) == {"torch", "tensorflow"}
    assert set(configs["status"]) == {"ok"}
    assert configs["model_options"].iloc[0] == "head=mlm"


def test_append_only(tmp_path):
    store = ResultStore(tmp_path)
    key = config_key(CONFIG)
    store.append(key, CONFIG, frames(3), {})
    with pytest.raises(ValueError, match="append-only"):
        store.append(key, CONFIG, frames(7), {})
    with pytest.raises(ValueError, match="append-only"):
        store.append_failure(key, CONFIG, "RESOURCE_EXHAUSTED", "out of memory")
    assert len(store.load("steps")) == 3
    assert store.partials() == []
    for bad_key in ("../x", ".partial-x", ""):
        with pytest.raises(ValueError, match="run key"):
            store.append(bad_key, CONFIG, frames(), {})
    with pytest.raises(ValueError, match="frame name"):
        store.append("other", CONFIG, {"config": pd.DataFrame()}, {})


def test_resume_sees_done_and_failed_runs(tmp_path):
    configs = [{**CONFIG, "batch_size": b, "repetition": r} for b in (16, 32, 64) for r in range(2)]
    store = ResultStore(tmp_path)
    store.append(config_key(configs[0]), configs[0], frames(), {})
    store.append_failure(
        config_key(configs[1]), configs[1], "RESOURCE_EXHAUSTED", "CUDA out of memory", columns={"device": "gpu:0"}
    )

    reopened = ResultStore(tmp_path)
    todo = [c for c in configs if not reopened.has(config_key(c))]
    assert todo == configs[2:]
    assert reopened.keys() == {config_key(configs[0]), config_key(configs[1])}

    summary = reopened.load("summary").set_index("run_key")
    failed = summary.loc[config_key(configs[1])]
    assert failed["status"] == "failed"
    assert failed["error"] == "RESOURCE_EXHAUSTED: CUDA out of memory"
    # Placed on the report as a missing point: the configuration's columns, as results.py names them.
    assert failed["batch_size"] == 16 and failed["repetition"] == 1 and failed["device"] == "gpu:0"
    assert failed["model_options"] == "head=mlm" and failed["input_shape"] == "3x32x32"
    assert summary.loc[config_key(configs[0]), "status"] == "ok"
    statuses = reopened.configs().set_index("run_key")["status"]
    assert statuses[config_key(configs[1])] == "failed" and statuses[config_key(configs[0])] == "ok"
    assert reopened.manifest(config_key(configs[1]))["code"] == "RESOURCE_EXHAUSTED"
    # What else a store keeps (a max-batch search, a FLOP count) is no run.
    reopened.append("facts", {"model_facts": "resnet18"}, {"model_facts": pd.DataFrame([{"forward_flops": 1.0}])}, {})
    assert reopened.run_keys() == {config_key(configs[0]), config_key(configs[1])} and "facts" in reopened.keys()


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_partial_folders_are_ignored_then_cleaned(tmp_path):
    store = ResultStore(tmp_path)
    store.append("done", CONFIG, frames(), {})
    # What a writer killed mid-write leaves: a half-written parquet, no config.
    dead = tmp_path / "runs" / f".partial-half-{_dead_pid()}-abc"
    dead.mkdir()
    (dead / "steps.parquet").write_bytes(b"PAR1 truncated")
    # A writer still at work (this process) keeps its folder.
    alive = tmp_path / "runs" / f".partial-busy-{os.getpid()}-def"
    alive.mkdir()
    assert store.keys() == {"done"} and not store.has(dead.name)
    assert len(store.load("steps")) == 5 and len(store.configs()) == 1
    assert store.clean_partials() == [dead]
    assert store.partials() == [alive]


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    store = ResultStore(tmp_path)

    def broken_rename(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(os, "rename", broken_rename)
    with pytest.raises(OSError, match="disk full"):
        store.append("k", CONFIG, frames(), {})
    assert store.keys() == set() and store.partials() == []


WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np, pandas as pd
    from fwbench_aggregator.plan.keys import config_key
    from fwbench_aggregator.store.results_store import ResultStore

    store, writer = ResultStore(sys.argv[1]), int(sys.argv[2])
    rows = 50_000
    rng = np.random.default_rng(writer)
    print("ready", flush=True)
    for n in range(10_000):
        config = {"writer": writer, "n": n}
        steps = pd.DataFrame({"step_index": np.arange(rows), "step_time_s": rng.random(rows),
                              "runner": np.where(np.arange(rows) % 2, "torch", "tensorflow")})
        power = pd.DataFrame({"time_s": rng.random(rows), "power_w": rng.random(rows) * 300})
        summary = pd.DataFrame([{"runner": "torch", "status": "ok", "rows": rows}])
        store.append(config_key(config), config, {"steps": steps, "power": power, "summary": summary}, {"n": n})
        time.sleep(0.005)
    """
)


@pytest.mark.slow
def test_a_killed_writer_never_corrupts_the_store(tmp_path):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    print(f"kill moments drawn with random.Random({seed})")  # shown if the test fails
    for writer in range(5):
        process = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(writer)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert process.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.05, 0.3))  # let it write a few runs, then kill it wherever it is
        finally:
            process.kill()  # SIGKILL: no handler, no cleanup
            process.wait()
            process.stdout.close()
        assert process.returncode == -signal.SIGKILL, "the writer ended before it was killed"

    store = ResultStore(tmp_path)
    keys = store.keys()
    assert keys, "no run was completed before the kills; lengthen the waits"
    for key in keys:
        folder = tmp_path / "runs" / key
        config = json.loads((folder / "config.json").read_text())
        assert config_key(config) == key
        manifest = json.loads((folder / "manifest.json").read_text())
        assert {k: manifest[k] for k in ("n", "store_format")} == {"n": config["n"], "store_format": STORE_FORMAT}
        assert len(pd.read_parquet(folder / "steps.parquet")) == 50_000
        assert len(pd.read_parquet(folder / "power.parquet")) == 50_000
        assert pd.read_parquet(folder / "summary.parquet")["status"].tolist() == ["ok"]
    assert len(store.load("steps")) == 50_000 * len(keys)
    assert len(store.configs()) == len(keys)

    # The store stays usable: a fresh writer appends and reads back; leftovers are cleaned.
    left = store.partials()
    assert store.clean_partials() == left and store.partials() == []
    store.append("after", {"writer": -1}, frames(), {})
    assert store.keys() == keys | {"after"}
    assert len(store.load("steps")) == 50_000 * len(keys) + 5
