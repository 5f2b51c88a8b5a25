"""A study spread over a pool of machines (a Slurm allocation's nodes): each point's runs on one machine, the
points over all of them, a machine that dies mid-run named in the failure while the others finish the study,
and a resume that runs what the lost machine did not, repeating nothing. The machines here are fake-backend
runners on loopback; tests/test_slurm.py does the same on a real Slurm cluster."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from support.fakes import Fake

from fwbench_aggregator.app.study import pending_runs, store_callbacks
from fwbench_aggregator.base.vocabulary import Mode, Precision
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.plan.spec import RunSpec
from fwbench_aggregator.run import jobs, wire
from fwbench_aggregator.run.connection import Transport
from fwbench_aggregator.run.launch import RunnerStartError, StartupSettings, wait_until_serving
from fwbench_aggregator.run.scheduler import run_pooled
from fwbench_aggregator.run.study import Pool, Slot, run_sweep_on_pool
from fwbench_aggregator.store.results_store import ResultStore

# Every test here runs the command line, runners or generated requests end to end: seconds each.
pytestmark = pytest.mark.slow

RUNNERS = ("first", "second")


def test_units_spread_over_workers_and_a_lost_workers_rest_goes_to_another():
    ran: list[tuple[str, str]] = []
    lock = threading.Lock()

    def run_one(worker, job):
        with lock:
            ran.append((worker, job))
        return job != "b1"  # whichever worker runs b1 is lost during it

    units = [("cpu", ["a0", "a1"]), ("cpu", ["b0", "b1", "b2"]), ("cpu", ["c0"]), ("cpu", ["d0"])]
    left = run_pooled(units, [("w1", "cpu"), ("w2", "cpu")], run_one, threading.Event())
    assert left == []
    by_job = {job: worker for worker, job in ran}
    assert sorted(by_job) == ["a0", "a1", "b0", "b1", "b2", "c0", "d0"] and len(ran) == 7
    assert by_job["a0"] == by_job["a1"] and by_job["b0"] == by_job["b1"], "a unit runs whole on one worker"
    lost = by_job["b1"]
    assert [job for worker, job in ran if worker == lost][-1] == "b1", "a lost worker takes nothing more"
    assert by_job["b2"] != lost, "the rest of its unit goes to another worker"


def test_a_lane_whose_workers_are_all_lost_leaves_its_jobs():
    left = run_pooled(
        [("gpu:0", ["a0", "a1", "a2"]), ("gpu:0", ["b0"])],
        [("w1", "gpu:0")],
        lambda worker, job: job != "a1",
        threading.Event(),
    )
    assert left == ["a2", "b0"]


@pytest.fixture
def machines(fakes):
    """Two fake-backend 'machines', each one runner process serving both runner names."""
    return {runner.name: runner for runner in fakes(Fake("node1", step_s=0.002), Fake("node2", step_s=0.002)).runners}


def pool_of(machines) -> Pool:
    slots = [Slot(node, node, {name: runner.address for name in RUNNERS}) for node, runner in machines.items()]

    def lost(node):
        code = machines[node].process.poll()
        if code is not None:
            return f"its runner exited ({code})"
        try:
            wait_until_serving(machines[node].address, 2.0)
        except RunnerStartError:
            return "its runner does not answer"
        return None

    return Pool(slots, lost, {"cluster": {"job_id": "42"}})


def study():
    return sweep_from_options(
        models="resnet18,mobilenet_v2",
        batch_sizes="1,2",
        shapes="3x32x32",
        modes="infer",
        runners=",".join(RUNNERS),
        repetitions=2,
        warmup=1,
        steps=2,
        min_measure_s=0.3,
    )


def run_study(
    tmp_path,
    machines,
    kill_during: int | None = None,
    monkeypatch=None,
    how=signal.SIGKILL,
    transport: Transport = Transport(),
):
    """The study's pending runs on the pool; with `kill_during`, node2's runner gets the signal `how` during that
    call to it."""
    if kill_during is not None:
        real_run_job, calls = jobs.run_job, []

        def run_job(name, address, *args, **kwargs):
            if address == machines["node2"].address:
                calls.append(address)
                if len(calls) == kill_during:
                    threading.Timer(0.15, machines["node2"].process.send_signal, (how,)).start()
            return real_run_job(name, address, *args, **kwargs)

        monkeypatch.setattr(jobs, "run_job", run_job)
    store = ResultStore(tmp_path / "store")
    pending, done = pending_runs(study().configurations(), store, StartupSettings())
    failures, left, interrupted = run_sweep_on_pool(
        pending, pool_of(machines), transport, StartupSettings(), *store_callbacks(store), 0.0
    )
    assert interrupted is None
    return pending, done, failures, left, store


def nodes_of(store: ResultStore) -> dict[str, set[str]]:
    """Which machine ran each point (model), from the runs' manifests."""
    out: dict[str, set[str]] = {}
    for key in store.run_keys():
        out.setdefault(store.config(key)["model"], set()).update(store.manifest(key)["run_nodes"])
    return out


def test_each_point_runs_whole_on_one_machine_and_the_points_use_every_machine(tmp_path, machines):
    pending, _, failures, left, store = run_study(tmp_path, machines)
    assert not failures and not left and len(store.run_keys()) == len(pending) == 16
    placed = nodes_of(store)
    assert all(len(nodes) == 1 for nodes in placed.values())
    assert set().union(*placed.values()) == {"node1", "node2"}
    assert store.manifest(next(iter(store.run_keys())))["cluster"] == {"job_id": "42"}


def test_a_machine_lost_mid_run_is_named_the_rest_finish_elsewhere_and_a_resume_repeats_nothing(
    tmp_path, machines, monkeypatch
):
    pending, _, failures, left, store = run_study(tmp_path, machines, kill_during=2, monkeypatch=monkeypatch)
    assert len(failures) == 1 and not left
    [failure] = failures
    assert "node node2 lost" in failure.message and "--resume" in failure.message
    kept = store.run_keys()
    assert len(kept) == len(pending) - 1, "only the run in flight on the lost machine is missing"
    assert set(store.load("summary")["status"]) == {"ok"}, "the lost run is not stored as a failure"
    # A later job, with the machine back: only the missing run.
    machines["node2"].start()
    monkeypatch.undo()
    again, done, failures, left, store = run_study(tmp_path, machines)
    assert len(again) == 1 and len(done) == len(pending) - 1 and not failures and not left
    assert len(store.run_keys()) == len(pending) and store.run_keys() >= kept


@pytest.mark.quiet  # "within seconds": beside other tests on 2 cores it took 49 s
def test_a_machine_that_goes_silent_without_closing_its_connections_is_noticed_by_keepalive(
    tmp_path, machines, monkeypatch
):
    """A frozen machine (here: its runner stopped with SIGSTOP) sends no reset, as a node that loses power or its
    network; the pings notice it within seconds, where the call would otherwise wait for ever."""
    started = time.monotonic()
    try:
        pending, _, failures, left, store = run_study(
            tmp_path,
            machines,
            kill_during=2,
            monkeypatch=monkeypatch,
            how=signal.SIGSTOP,
            transport=Transport(keepalive_s=1.0),
        )
    finally:
        machines["node2"].process.send_signal(signal.SIGCONT)
    [failure] = failures
    assert "node node2 lost" in failure.message and "does not answer" in failure.message
    assert len(store.run_keys()) == len(pending) - 1 and not left
    assert time.monotonic() - started < 30


def test_a_runner_answers_pings_through_a_long_run_without_closing_the_connection(machines):
    """Pings twice a second, as fast as a cluster's aggregator might send them, never end a healthy run."""
    request = wire.to_request(
        RunSpec("resnet18", Mode.infer, 1, "3x32x32", Precision.fp32, None, None, warmup=1, steps=2, min_measure_s=4.0)
    )
    result = jobs.run_job("first", machines["node1"].address, Transport(keepalive_s=0.5), request)
    assert result.summary.measured_steps > 2
