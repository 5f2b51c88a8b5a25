"""A study's runs: those sharing a machine and device one after the other, different devices at once, on one
host's runners or spread over a cluster's machines. Each completed run goes to the caller's `store` callback the
moment its summary arrives; a run that ran out of memory goes to `store_failure` (a fact about the configuration
that would repeat); any other failure is returned, for the caller to report and a resume to retry."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple, Protocol

from ..base.progress import Progress
from ..base.vocabulary import indexed_device
from ..plan.spec import StartupSettings
from ..plan.study import Configuration
from . import jobs, wire
from .client import RunnerClient, RunnerFailure, RunResult
from .connection import Transport
from .device_lock import Stopped
from .gate import Gate
from .runners import runner_facts
from .scheduler import device_group, run_grouped, run_pooled

# (configuration key, configuration, result, request, context): a completed run, to be stored (under an id of its own).
StoreRun = Callable[[str, Configuration, RunResult, wire.Request, dict], None]
# (key, configuration, failure, columns, context): a run that ran out of memory, to be stored as such; the columns
# say where it would have run (the device, shape and spread a success would report).
StoreFailure = Callable[[str, Configuration, RunnerFailure, dict, dict], None]


class Looks(Protocol):
    """Under repetitions auto, what decides whether a point's next round runs (app.sweep_rounds)."""

    def start(
        self,
        lanes: Mapping[str, Hashable],
        parallel: Mapping[Hashable, int],
        pending: Sequence[tuple[str, Configuration]],
    ) -> None: ...

    def wanted(self, key: str, c: Configuration) -> bool: ...

    def finished(self, key: str, c: Configuration, seconds: float, result: RunResult | None, failed: bool) -> None: ...


class _Always:
    """A fixed number of repetitions: every planned run is wanted."""

    def start(self, lanes, parallel, pending) -> None:
        pass

    def wanted(self, key: str, c: Configuration) -> bool:
        return True

    def finished(self, key, c, seconds, result, failed) -> None:
        pass


class Slot(NamedTuple):
    """A place in a pool of machines where a study's runs go: one runner of each framework on one node (or on
    one GPU of it)."""

    name: str  # "node1", or "node1/gpu:0" for runners that see one GPU each
    node: str  # the machine: it fails as a whole
    endpoints: dict[str, str]  # framework -> address


class Pool(NamedTuple):
    """The machines of a cluster allocation (slurm.py), and how to tell that one is gone."""

    slots: list[Slot]
    lost: Callable[[str], str | None]  # node -> why it is gone, or None while it serves
    context: dict  # added to every run's manifest (the allocation's job, nodes and options), with "run_nodes"
    rendezvous_port: int | None = None


class _Sweep:
    """What every run of a sweep shares, whichever scheduler places it: the runners' facts, the store callbacks
    (under a lock), the reuse chains, the progress, the clients in flight, the failures and the gate every run
    passes (run.gate)."""

    def __init__(
        self,
        pending,
        transport: Transport,
        startup: StartupSettings,
        store: StoreRun,
        store_failure: StoreFailure,
        first_endpoints: dict[str, str],
        progress: Progress,
        gate: Gate | None = None,
        looks: Looks | None = None,
        cooldown_s: float = 0.0,
    ) -> None:
        self.transport, self.startup, self.progress = transport, startup, progress
        self.gate = gate or Gate()
        self.looks: Looks = looks or _Always()
        # The schedulers call `between` before a lane's next job; the wait happens only where that job runs, so
        # that runs a look leaves out cost no cool-down.
        self.cooldown_s, self.cooling = cooldown_s, threading.local()
        self.store, self.store_failure = store, store_failure
        self.facts = {
            name: runner_facts(name, jobs.addresses_of(address)[0], transport)
            for name, address in first_endpoints.items()
        }
        self.failures: list[RunnerFailure] = []
        self.store_lock = threading.Lock()
        self.active: set[RunnerClient] = set()
        # This sweep's own chain keys (two sweeps on one runner never share a build), and each chain's pending runs
        # in order: after the last one still wanted its runner frees the build instead of holding it while another
        # runner uses the device.
        self.session = uuid.uuid4().hex[:8]
        self.chains: dict[str, list[tuple[str, Configuration]]] = {}
        for key, c in pending:
            if c.reuse_chain:
                self.chains.setdefault(c.reuse_chain, []).append((key, c))
        self.overall = progress.add_task("study", total=len(pending))

    def cool_down_next(self) -> None:
        self.cooling.due = True

    def _ends_chain(self, key: str, c: Configuration) -> bool:
        """Whether no run after this one in its reuse chain is still wanted."""
        chain = self.chains.get(c.reuse_chain, [])
        later = chain[[k for k, _ in chain].index(key) + 1 :] if chain else []
        return not any(self.looks.wanted(k, other) for k, other in later)

    def run(
        self,
        key: str,
        c: Configuration,
        address: str,
        rendezvous_port: int | None = None,
        context: dict | None = None,
        stop: threading.Event | None = None,
    ) -> RunnerFailure | None:
        """One run on `address` (a comma list: a job across machines), once through the gate, stored the moment it
        completes (with what it waited in its record), or its failure, stored where it would repeat; returns the
        failure. A run whose wait the sweep's stop ended does not run: a resume runs it. A run the looks no longer
        want (its point is settled) is left out, and so is its cool-down."""
        if not self.looks.wanted(key, c):
            self.looks.finished(key, c, 0.0, None, False)
            self.progress.advance(self.overall)
            return None
        if getattr(self.cooling, "due", False):
            self.cooling.due = False
            time.sleep(self.cooldown_s)
        started, stored = time.monotonic(), []
        failure = self._run(key, c, address, rendezvous_port, context, stop, stored)
        self.looks.finished(key, c, time.monotonic() - started, stored[0] if stored else None, failure is not None)
        return failure

    def _run(
        self,
        key: str,
        c: Configuration,
        address: str,
        rendezvous_port: int | None,
        context: dict | None,
        stop: threading.Event | None,
        stored: list[RunResult],
    ) -> RunnerFailure | None:
        label = f"{c.runner} {c.model} {c.mode.value} b{c.batch_size} #{c.repetition + 1}"
        self.progress.update(self.overall, description=label)
        reuse_key = f"{self.session}-{c.reuse_chain}" if c.reuse_chain else ""
        spec = c.run_spec(self.startup, reuse_key, end_reuse=bool(reuse_key) and self._ends_chain(key, c))
        request = wire.to_request(spec)
        record = dict(context or {})
        stopped = stop.is_set if stop is not None else (lambda: False)

        def store(result: RunResult) -> None:
            # Written as the summary arrives, while the runner frees the run's memory: off the gap between runs,
            # and still stored before the next run starts.
            with self.store_lock:
                self.store(key, c, result, request, record)
            stored.append(result)

        try:
            places = self.gate.places(c.runner, address, self.transport, request)
            with self.gate.passage(places, label, self.progress, stopped) as passage:
                if stopped():
                    return None
                record.update(passage.context())
                jobs.run_job(
                    c.runner,
                    address,
                    self.transport,
                    request,
                    repetition=c.repetition,
                    active=self.active,
                    on_summary=store,
                    rendezvous_port=rendezvous_port,
                )
            return None
        except Stopped:
            return None
        except RunnerFailure as failure:
            self.failures.append(failure)
            stopping = stop is not None and stop.is_set()
            # Only running out of memory is a fact about the configuration that a rerun would repeat; a refusal or
            # an unreachable runner is not stored, so that a resume runs it again. A call that failed after its
            # summary arrived has its run stored already.
            if failure.out_of_memory and not stopping and not stored:
                # Where the run would have been: the device, shape and spread a success would report.
                nodes = len(jobs.addresses_of(address))
                where = {
                    **self.facts[c.runner].failure_columns(
                        c.model, (c.devices or "").split(",")[0] or c.device, c.shape
                    ),
                    "strategy": c.strategy.value if c.strategy else "",
                    "devices": c.devices or "",
                    "nodes": nodes,
                    "world_size": nodes * (len(c.devices.split(",")) if c.devices else 1),
                }
                with self.store_lock:
                    self.store_failure(key, c, failure, where, record)
            return failure
        finally:
            self.progress.advance(self.overall)

    def cancel_in_flight(self) -> None:
        # Closing the channels cancels the runs in flight: each runner stops between steps.
        for client in list(self.active):
            client.close()


def run_sweep(
    pending: Sequence[tuple[str, Configuration]],
    endpoints: dict[str, str],
    transport: Transport,
    startup: StartupSettings,
    store: StoreRun,
    store_failure: StoreFailure,
    cooldown_s: float,
    progress: Progress = Progress(),
    gate: Gate | None = None,
    looks: Looks | None = None,
) -> tuple[list[RunnerFailure], KeyboardInterrupt | None]:
    """Every pending run, those sharing a machine and device one after the other, each stored the moment it
    completes (a repeatable failure too), each through `gate` (default: its devices' locks), each only while `looks`
    want it (default: all); returns the failures and the interrupt (Ctrl-C, or the CLI's SIGTERM) that stopped the
    sweep, if one did."""
    stop = threading.Event()
    sweep = _Sweep(pending, transport, startup, store, store_failure, endpoints, progress, gate, looks, cooldown_s)
    # A run on several devices or runners shares devices with the others: then a machine runs one at a time.
    whole_machines = any(c.devices or "," in endpoints.get(c.runner, "") for _, c in pending)

    def group(c: Configuration) -> tuple[str, str]:
        address = jobs.addresses_of(endpoints[c.runner])[0]
        facts = sweep.facts[c.runner]
        machine, device = device_group(address, c.device or facts.default_device, facts.options)
        return (machine, "") if whole_machines else (machine, device)

    def lane(c: Configuration) -> Hashable:
        # Under looks a point's rounds run in one lane, every runner's runs in turn, wherever its runners are.
        if looks is None:
            return group(c)
        return tuple(sorted({group(replace(c, runner=name)) for name in endpoints}))

    grouped = [(lane(c), (key, c)) for key, c in pending if c.runner in endpoints]
    sweep.looks.start({key: group for group, (key, _) in grouped}, {group: 1 for group, _ in grouped}, pending)
    try:
        run_grouped(
            grouped,
            lambda job: sweep.run(*job, endpoints[job[1].runner], stop=stop),
            stop,
            between=sweep.cool_down_next,
        )
    except KeyboardInterrupt as interrupt:
        sweep.cancel_in_flight()
        return sweep.failures, interrupt
    return sweep.failures, None


def units_of(pending: Sequence[tuple[str, Configuration]]) -> list[list[tuple[str, Configuration]]]:
    """The sweep's runs cut where the family changes (Configuration.family): each unit runs whole on one machine."""
    units: list[list[tuple[str, Configuration]]] = []
    for key, c in pending:
        if units and units[-1][-1][1].family() == c.family():
            units[-1].append((key, c))
        else:
            units.append([(key, c)])
    return units


def run_sweep_on_pool(
    pending: Sequence[tuple[str, Configuration]],
    pool: Pool,
    transport: Transport,
    startup: StartupSettings,
    store: StoreRun,
    store_failure: StoreFailure,
    cooldown_s: float,
    progress: Progress = Progress(),
    gate: Gate | None = None,
    looks: Looks | None = None,
) -> tuple[list[RunnerFailure], list[tuple[str, Configuration]], KeyboardInterrupt | None]:
    """A sweep over a cluster's machines: each unit (one point's runs, every runner and repetition) on one machine,
    the units spread over the machines, a machine's devices at once as on one; then the runs that span several
    machines, one at a time across the first live ones. A run that fails because its machine is gone is a failure
    naming the machine (not stored: a resume runs it again), and the rest goes on without that machine. Returns
    the failures, the runs left undone (no machine left for them) and the interrupt, if any."""
    stop = threading.Event()
    gone: dict[str, str] = {}
    gone_lock = threading.Lock()
    slots = {slot.name: slot for slot in pool.slots}

    def node_gone(node: str) -> str | None:
        with gone_lock:
            if node not in gone:
                why = pool.lost(node)
                if why is None:
                    return None
                gone[node] = why
                progress.note(f"node {node} is gone ({why}): the study goes on without it", "error")
            return gone[node]

    def lost_run(failure: RunnerFailure, c: Configuration, nodes: Sequence[str]) -> bool:
        """Whether the failure is a machine's loss; if so, it is restated naming the machine."""
        lost = [(node, why) for node in nodes if (why := node_gone(node))]
        if not lost:
            return False
        node, why = lost[0]
        sweep.failures.remove(failure)
        sweep.failures.append(
            RunnerFailure(
                c.runner,
                failure.code,
                f"node {node} lost during {c.model} {c.mode.value} b{c.batch_size} #{c.repetition + 1} ({why}); "
                f"the run is not stored, and a resume (--resume) runs it: {failure.message}",
                failure.reason,
            )
        )
        return True

    sweep = _Sweep(
        pending, transport, startup, store, store_failure, pool.slots[0].endpoints, progress, gate, looks, cooldown_s
    )
    whole_machines = any(c.devices or c.nodes > 1 for _, c in pending)

    def lane(c: Configuration) -> str:
        return "" if whole_machines else indexed_device(c.device or sweep.facts[c.runner].default_device)

    def run_on_slot(slot_name: str, job: tuple[str, Configuration]) -> bool:
        slot = slots[slot_name]
        failure = sweep.run(
            *job, slot.endpoints[job[1].runner], context={**pool.context, "run_nodes": [slot.node]}, stop=stop
        )
        return failure is None or not lost_run(failure, job[1], [slot.node])

    single = [unit for unit in units_of(pending) if unit[0][1].nodes == 1]
    spanning = [run for unit in units_of(pending) if unit[0][1].nodes > 1 for run in unit]
    workers = [(slot.name, lane_name) for slot in pool.slots for lane_name in {lane(u[0][1]) for u in single}]
    sweep.looks.start(
        {key: lane(c) for unit in single for key, c in unit},
        {lane_name: len(pool.slots) for _, lane_name in workers},
        pending,
    )
    try:
        left = run_pooled(
            [(lane(u[0][1]), u) for u in single],
            workers,
            run_on_slot,
            stop,
            between=sweep.cool_down_next,
            available=lambda name: slots[name].node not in gone,
        )
        for key, c in spanning:
            if stop.is_set():
                left.append((key, c))
                continue
            live = [slot for slot in pool.slots if not node_gone(slot.node)]
            if len(live) < c.nodes:
                left.append((key, c))
                continue
            chosen = live[: c.nodes]
            address = ",".join(slot.endpoints[c.runner] for slot in chosen)
            nodes = [slot.node for slot in chosen]
            failure = sweep.run(key, c, address, pool.rendezvous_port, {**pool.context, "run_nodes": nodes}, stop)
            if failure is not None:
                lost_run(failure, c, nodes)
    except KeyboardInterrupt as interrupt:
        sweep.cancel_in_flight()
        return sweep.failures, [], interrupt
    return sweep.failures, left, None
