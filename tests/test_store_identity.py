"""A run's id is its own: the same sweep on two machines, or two compares in one second, never share one, so stores
merge whole; a sweep finds its own runs by the configuration key each records; runs of the previous store format keep
their ids, and two of them sharing one are kept apart when their stores merge; an interrupted sweep counts its own
runs, not the store's."""

from __future__ import annotations

import json

from support.cli import fwbench_in_process
from support.store_runs import run_frames

from fwbench_aggregator.app import study as study_module
from fwbench_aggregator.app.study import own_run_ids, pending_runs, store_callbacks
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.plan.keys import new_run_id
from fwbench_aggregator.run.connection import Transport
from fwbench_aggregator.run.launch import StartupSettings
from fwbench_aggregator.run.study import run_sweep
from fwbench_aggregator.store.bundle import add_bundle, write_bundle
from fwbench_aggregator.store.config_keys import runs_by_config
from fwbench_aggregator.store.integrity import CHECKSUM_KEY, FILES_KEY, sealed
from fwbench_aggregator.store.migrations import CONFIG_KEY
from fwbench_aggregator.store.rekey import KEPT_APART_KEY
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.schema import STORE_FORMAT

SWEEP = dict(
    models="resnet18",
    batch_sizes="1,2",
    shapes="3x32x32",
    modes="infer",
    runners="first",
    repetitions=2,
    warmup=1,
    steps=2,
    min_measure_s=0.0,
)


def swept(root, address) -> ResultStore:
    """The sweep SWEEP, run into the store at `root` as `fwbench sweep` runs it."""
    store = ResultStore(root)
    pending, _ = pending_runs(sweep_from_options(**SWEEP).configurations(), store, StartupSettings())
    failures, interrupted = run_sweep(
        pending, {"first": address}, Transport(), StartupSettings(), *store_callbacks(store), 0.0
    )
    assert not failures and interrupted is None
    return ResultStore(root)


def test_a_run_id_is_random_and_a_sweep_finds_its_runs_by_their_configuration_key(tmp_path, fake_address):
    assert len({new_run_id() for _ in range(1000)}) == 1000
    store = swept(tmp_path / "store", fake_address)
    configurations = sweep_from_options(**SWEEP).configurations()
    wanted = {c.config_key(StartupSettings()) for c in configurations}
    assert {store.manifest(key)[CONFIG_KEY] for key in store.run_keys()} == wanted
    assert not store.run_keys() & wanted, "no id is a configuration's key"
    pending, done = pending_runs(configurations, store, StartupSettings())
    assert not pending and {key for key, _ in done} == store.run_keys() == own_run_ids(
        store, configurations, StartupSettings()
    )


def test_the_same_sweep_on_two_machines_merges_into_one_store_whole(tmp_path, fake_address):
    first = swept(tmp_path / "first", fake_address)
    second = swept(tmp_path / "second", fake_address)
    assert not first.run_keys() & second.run_keys()
    bundle = write_bundle(second, second.keys(), tmp_path / "second.tar.gz").path
    added = add_bundle(first, bundle)
    assert sorted(added.added) == sorted(second.keys()) and not (added.identical or added.kept_apart or added.refused)
    merged = ResultStore(tmp_path / "first")
    assert len(merged.run_keys()) == 2 * len(sweep_from_options(**SWEEP).configurations()) and not merged.damaged()
    pending, done = pending_runs(sweep_from_options(**SWEEP).configurations(), merged, StartupSettings())
    assert not pending and len(done) == len(merged.run_keys()), "a resume counts both machines' runs done"
    again = add_bundle(merged, bundle)
    assert sorted(again.identical) == sorted(second.keys()) and not (again.added or again.kept_apart or again.refused)


def test_two_compares_in_one_second_store_every_run(tmp_path, monkeypatch):
    """The id of a compare's run was a hash of its compare's id, the time to the second: a second compare begun in the
    same second ended with an AlreadyStored traceback after its first run."""
    from fwbench_aggregator.app import compare
    from fwbench_aggregator.plan.spec import RunSpec

    epoch = compare.time.gmtime(0)
    monkeypatch.setattr(compare.time, "gmtime", lambda *_: epoch)
    assert compare.run_id_for(RunSpec("resnet18")) != compare.run_id_for(RunSpec("resnet18"))
    store = ResultStore(tmp_path)
    config = {"compare": "19700101T000000Z-resnet18-train-b32", "runner": "torch", "repetition": 0}
    for _ in range(2):
        store.append(new_run_id(), config, run_frames("torch", 0.01), {})
    assert len(store.run_keys()) == 2


def previous_format_run(root, key: str, median_s: float, host: str) -> None:
    """A run as format 8 stored it: a sweep's run under its configuration's key, no config_key recorded."""
    store = ResultStore(root)
    store.append(key, {"runner": "torch", "batch_size": 8}, run_frames("torch", median_s), {"host": host})
    folder = root / "runs" / key
    manifest = json.loads((folder / "manifest.json").read_text())
    body = {k: v for k, v in manifest.items() if k not in (FILES_KEY, CHECKSUM_KEY)}
    resealed = sealed({**body, "store_format": 8}, manifest[FILES_KEY])
    (folder / "manifest.json").write_text(json.dumps(resealed))
    (root / "store.json").write_text(json.dumps({"store_format": 8}))


def test_a_previous_format_store_keeps_its_ids_and_its_runs_are_found_by_them(tmp_path):
    previous_format_run(tmp_path, "5eed5eed5eed5eed", 0.010, "gpu-a")
    store = ResultStore(tmp_path)
    assert store.format() == 8 and store.run_keys() == {"5eed5eed5eed5eed"} and not store.damaged()
    assert runs_by_config(store) == {"5eed5eed5eed5eed": ["5eed5eed5eed5eed"]}
    store.append(new_run_id(), {"runner": "jax"}, run_frames("jax", 0.02), {CONFIG_KEY: "c0ffee"})
    reopened = ResultStore(tmp_path)
    assert reopened.format() == STORE_FORMAT and runs_by_config(reopened)["5eed5eed5eed5eed"] == ["5eed5eed5eed5eed"]
    assert len(runs_by_config(reopened)["c0ffee"]) == 1


def test_two_previous_format_runs_sharing_an_id_are_kept_apart_when_their_stores_merge(tmp_path):
    previous_format_run(tmp_path / "a", "5eed5eed5eed5eed", 0.010, "gpu-a")
    previous_format_run(tmp_path / "b", "5eed5eed5eed5eed", 0.020, "gpu-b")
    source = ResultStore(tmp_path / "b")
    bundle = write_bundle(source, source.keys(), tmp_path / "b.tar.gz").path
    added = add_bundle(ResultStore(tmp_path / "a"), bundle)
    assert not (added.added or added.identical or added.refused) and list(added.kept_apart) == ["5eed5eed5eed5eed"]
    new = added.kept_apart["5eed5eed5eed5eed"]
    merged = ResultStore(tmp_path / "a")
    assert merged.run_keys() == {"5eed5eed5eed5eed", new} and not merged.damaged()
    summary = merged.load("summary").set_index("run_key")
    assert (
        summary.loc[new, "median_step_time_s"] == 0.020
        and summary.loc["5eed5eed5eed5eed", "median_step_time_s"] == 0.010
    )
    manifest = merged.manifest(new)
    assert manifest[KEPT_APART_KEY] == "5eed5eed5eed5eed" and manifest["host"] == "gpu-b"
    assert runs_by_config(merged) == {"5eed5eed5eed5eed": sorted(["5eed5eed5eed5eed", new])}, "a resume finds both"
    again = add_bundle(merged, bundle)
    assert again.identical == ["5eed5eed5eed5eed"] and not (again.added or again.kept_apart)
    said = fwbench_in_process("store", "add", str(bundle), "--store", str(tmp_path / "a"))
    assert said.exit_code == 0 and "1 already there, identical, skipped; 0 kept apart" in " ".join(said.output.split())


def test_an_interrupted_sweep_counts_its_own_runs_and_the_store_apart(tmp_path, fake_address, monkeypatch):
    store = ResultStore(tmp_path / "store")
    for n in range(5):  # another study's runs
        store.append(new_run_id(), {"runner": "other", "n": n}, run_frames("other", 0.01), {})
    real_run_sweep = study_module.run_sweep

    def interrupted_after_one(pending, *args, **kwargs):
        failures, _ = real_run_sweep(pending[:1], *args, **kwargs)
        return failures, KeyboardInterrupt()

    monkeypatch.setattr(study_module, "run_sweep", interrupted_after_one)
    done = fwbench_in_process(
        "sweep",
        "--models",
        "resnet18",
        "--batch-sizes",
        "1,2",
        "--shapes",
        "3x32x32",
        "--modes",
        "infer",
        "--repetitions",
        "2",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--min-measure-s",
        "0",
        "--store",
        str(tmp_path / "store"),
        "--runner",
        f"first={fake_address}",
        "--no-report",
        columns=300,
    )
    said = " ".join(done.output.split())
    assert done.exit_code == 130, done.output
    assert (
        "interrupted: the run in flight was cancelled; 1 runs of this study are kept in "
        f"{tmp_path / 'store'} (1 stored now; the store holds 6 runs in all)"
    ) in said
