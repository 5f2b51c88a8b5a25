"""A sweep's reuse chains against a real (fake-backend) runner: what each request asks, and what the store says."""

from __future__ import annotations

from fwbench_aggregator.app.study import pending_runs, store_callbacks
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.run import jobs
from fwbench_aggregator.run.connection import Transport
from fwbench_aggregator.run.launch import StartupSettings
from fwbench_aggregator.run.study import run_sweep
from fwbench_aggregator.store.results_store import ResultStore


def small_sweep(**overrides):
    fields = dict(
        models="resnet18",
        batch_sizes="1,2,4",
        shapes="3x32x32",
        modes="infer",
        runners="first,second",
        repetitions=2,
        warmup=1,
        steps=2,
        min_measure_s=0.0,
    )
    return sweep_from_options(**{**fields, **overrides})


def run(tmp_path, sweep, address, monkeypatch, skip: int = 0):
    """The sweep's pending runs (less the first `skip`) on `address` for both runners; the requests as sent, and the store."""
    sent = []
    real_run_job = jobs.run_job

    def recording_run_job(name, address, transport, request, **kwargs):
        sent.append((name, request))
        return real_run_job(name, address, transport, request, **kwargs)

    monkeypatch.setattr(jobs, "run_job", recording_run_job)
    store = ResultStore(tmp_path / "store")
    pending, _ = pending_runs(sweep.configurations(), store, StartupSettings())
    failures, interrupted = run_sweep(
        pending[skip:],
        {"first": address, "second": address},
        Transport(),
        StartupSettings(),
        *store_callbacks(store),
        0.0,
    )
    assert not failures and interrupted is None
    return sent, store


def test_each_runner_and_repetition_builds_once_for_its_batch_sizes(tmp_path, fake_address, monkeypatch):
    sent, store = run(tmp_path, small_sweep(), fake_address, monkeypatch)
    assert [(name, r.batch_size) for name, r in sent[:6]] == [
        ("first", 1),
        ("first", 2),
        ("first", 4),
        ("second", 1),
        ("second", 2),
        ("second", 4),
    ]
    keys = [r.reuse_key for _, r in sent]
    assert all(keys) and len(set(keys)) == 4 and all(len(set(keys[i : i + 3])) == 1 for i in range(0, 12, 3))
    # The chain's last run frees the build: nothing stays held while the other runner uses the device.
    assert [r.end_reuse for _, r in sent] == [False, False, True] * 4
    summary = store.load("summary")
    assert len(summary) == 12 and set(summary["status"]) == {"ok"}
    reused = summary.groupby(["runner", "repetition"]).apply(
        lambda runs: runs.sort_values("batch_size")["build_reused"].tolist(), include_groups=False
    )
    assert reused.tolist() == [[False, True, True]] * 4
    assert not summary["first_step_traced"].any()  # the fake steps eagerly


def test_a_resumed_chain_ends_where_its_pending_runs_end(tmp_path, fake_address, monkeypatch):
    sent, store = run(tmp_path, small_sweep(repetitions=1, runners="first"), fake_address, monkeypatch, skip=1)
    assert [(r.batch_size, r.end_reuse) for _, r in sent] == [(2, False), (4, True)]
    summary = store.load("summary").sort_values("batch_size")
    assert summary["build_reused"].tolist() == [False, True]


def test_without_reuse_every_run_builds(tmp_path, fake_address, monkeypatch):
    sent, store = run(tmp_path, small_sweep(reuse_builds=False), fake_address, monkeypatch)
    assert not any(r.reuse_key or r.end_reuse for _, r in sent)
    assert not store.load("summary")["build_reused"].any()
