"""The run stage: runners started (embedded) or named, runs in counterbalanced order, and every completed
run stored the moment it completes. Commands plan (plan.py, sweep.py), call these, then analyse
(analysis.py) and present (console.py, report.py): the data flows one way.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import NamedTuple, Optional

from fwbench.runner.v1 import runner_pb2 as pb
from google.protobuf.json_format import MessageToDict
import pandas as pd
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import analysis, jobs, stats
from . import results as results_mod
from . import store as store_mod
from .client import RunnerClient, RunnerFailure, RunResult
from .connection import EMBEDDED, Transport, embedded_runner_env
from .console import err_console
from .launch import LocalRunner, RunnerStartError, StartupSettings, default_venvs, embedded_command
from .options import runners_in_use
from .scheduler import device_group, run_grouped, run_pooled
from .sweep import Configuration, counterbalanced
from .vocabulary import indexed_device, shape_dims, shape_text, to_text


def start_embedded(
    frameworks: list[str], venvs: Path, log_dir: Path, stack: ExitStack, settings: StartupSettings = StartupSettings()
) -> tuple[dict, list]:
    """Start each framework's runner locally, all at once, requiring EMBEDDED's token; returns their addresses
    and the failures."""
    log_dir.mkdir(parents=True, exist_ok=True)
    failures: list[RunnerFailure] = []
    runners: dict[str, LocalRunner] = {}
    for name in frameworks:
        try:
            runners[name] = LocalRunner(
                name, embedded_command(name, venvs, settings), log_dir / f"{name}-runner.log",
                env=embedded_runner_env(), transport=EMBEDDED,
            )
        except RunnerStartError as error:
            failures.append(RunnerFailure(name, "UNAVAILABLE", str(error)))
    addresses: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(runners))) as pool:
        started = {name: pool.submit(runner.start) for name, runner in runners.items()}
        stack.callback(stop_all, list(runners.values()))
        for name, future in started.items():
            try:
                addresses[name] = future.result()
            except RunnerStartError as error:
                failures.append(RunnerFailure(name, "UNAVAILABLE", str(error)))
    return addresses, failures


def stop_all(runners: Sequence[LocalRunner]) -> None:
    """Stop the runners at once: each takes a while to exit (TensorFlow's longest), and none waits for another."""
    with ThreadPoolExecutor(max_workers=max(1, len(runners))) as pool:
        for stopping in [pool.submit(runner.stop) for runner in runners]:
            stopping.result()


def resolve_endpoints(
    runner: list[str], frameworks: str, venvs: Optional[Path], log_dir: Path, stack: ExitStack,
    settings: StartupSettings = StartupSettings(),
) -> tuple[dict[str, str], list[RunnerFailure]]:
    """The runners given as NAME=HOST:PORT (those in use: options.runners_in_use), or else the embedded ones,
    started now."""
    if runner:
        return dict(value.split("=", 1) for value in runners_in_use(runner, frameworks)), []
    err_console.print(f"starting the embedded runners: {frameworks}")
    return start_embedded(frameworks.split(","), venvs or default_venvs(), log_dir, stack, settings)


def run_all(
    endpoints: dict[str, str], requests: dict[str, pb.RunRequest], transport: Transport, repetitions: int = 1,
    cooldown_s: float = 0.0, on_result: Callable[[RunResult], None] = lambda result: None,
    rendezvous_port: Optional[int] = None,
) -> tuple[list[RunResult], list[RunnerFailure]]:
    """Run the request on each runner, one after the other (they may share a device), repetition after
    repetition in counterbalanced order (A B, B A, ...) so that drift favours neither. A runner that fails
    is named once and left out of later repetitions. `on_result` gets each run the moment it completes. A
    runner given several addresses runs each request as one job across them (jobs.py)."""
    results, failures = [], []
    failed: set[str] = set()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as progress:
        overall = progress.add_task("runs", total=repetitions * len(endpoints))
        for number, (repetition, name) in enumerate(counterbalanced(list(endpoints), repetitions)):
            if name in failed:
                progress.advance(overall)
                continue
            if cooldown_s and number:
                time.sleep(cooldown_s)
            label = f"{name} #{repetition + 1}/{repetitions}"
            progress.update(overall, description=label)
            task = progress.add_task(f"{label}: starting", total=None)

            def on_progress(p: pb.Progress, task=task, label=label) -> None:
                phase = to_text(pb.Phase, p.phase)
                progress.update(task, description=f"{label}: {phase}", completed=p.steps_done, total=p.steps_total)

            try:
                results.append(jobs.run_job(name, endpoints[name], transport, requests[name], on_progress, repetition,
                                            rendezvous_port))
                on_result(results[-1])
            except RunnerFailure as failure:
                failures.append(failure)
                failed.add(name)
            progress.remove_task(task)
            progress.advance(overall)
    return results, failures


def store_run(results_store: store_mod.ResultStore, key: str, config: dict, result: RunResult, request: pb.RunRequest) -> None:
    """Append one completed run to the store: its steps, summary, power samples and manifest."""
    store_frames(results_store, key, config, result, results_mod.manifest(key, [result], {result.runner: request}))


def store_frames(results_store: store_mod.ResultStore, key: str, config: dict, result: RunResult, manifest: dict) -> None:
    frames = {
        "steps": results_mod.steps_frame(key, [result]),
        "summary": results_mod.summary_frame(key, [result], []),
        "power": results_mod.power_frame(key, [result]),
    }
    results_store.append(key, config, frames, manifest)


def each_runner(
    runner: list[str], frameworks: str, venvs: Optional[Path], transport: Transport,
    visit: Callable[[str, str, RunnerClient], None],
) -> list[RunnerFailure]:
    """Call `visit(name, address, client)` for every runner (every node of a job across runners), started or
    named; returns the runners that failed."""
    with ExitStack() as stack, TemporaryDirectory() as logs:
        endpoints, failures = resolve_endpoints(runner, frameworks, venvs, Path(logs), stack)
        for name, address in ((n, a) for n, job in endpoints.items() for a in jobs.addresses_of(job)):
            try:
                with RunnerClient(name, address, transport) as client:
                    visit(name, address, client)
            except RunnerFailure as failure:
                failures.append(failure)
    return failures


# Failures that belong to the configuration and would repeat, with running out of memory: stored, so --resume
# skips them and reports mark them. A busy or unreachable runner, or an internal error, is not stored: a resume
# retries it.
REPEATABLE_FAILURES = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND"}


class RunnerFacts(NamedTuple):
    """What a sweep needs to know of a runner beyond its results."""

    default_device: str
    failure_columns: Callable[[str, Optional[str], Optional[str]], dict]  # (model, device, shape) of a failed run
    options: dict[str, str]  # its Describe options: which machine, which GPUs


def runner_facts(name: str, address: str, transport: Transport) -> RunnerFacts:
    """The runner's default device; for a failed run, the runner, framework, device and shape a
    successful one would have reported; and its Describe options."""
    with RunnerClient(name, address, transport) as client:
        info = client.describe()
    gpus = [d for d in info.devices if d.kind == pb.DEVICE_KIND_GPU]
    default_device = f"gpu:{gpus[0].index}" if gpus else "cpu:0"

    @functools.cache
    def default_shapes() -> dict[str, str]:
        # Asked only once a run has failed.
        with RunnerClient(name, address, transport) as client:
            return {m.name: shape_text(m.default_input_shape) for m in client.list_models()}

    def columns(model: str, device: Optional[str], shape: Optional[str]) -> dict:
        return {
            "runner": name,
            "framework": info.framework,
            "framework_version": info.framework_version,
            "device": indexed_device(device or default_device),
            "input_shape": shape_text(shape_dims(shape)) if shape else default_shapes().get(model, ""),
        }

    return RunnerFacts(default_device, columns, dict(info.options))


def run_comparison(
    endpoints: dict[str, str], transport: Transport, requests: dict[str, pb.RunRequest], repetitions: int,
    cooldown_s: float, results_store: store_mod.ResultStore, run_id: str, rendezvous_port: Optional[int] = None,
) -> tuple[list[RunResult], list[RunnerFailure]]:
    """`compare`'s runs: every runner, counterbalanced, each run added to the store the moment it completes."""

    def store(result: RunResult) -> None:
        request = requests[result.runner]
        config = {"compare": run_id, **MessageToDict(request), "runner": result.runner, "repetition": result.repetition}
        store_run(results_store, store_mod.run_key(config), config, result, request)

    return run_all(endpoints, requests, transport, repetitions, cooldown_s, store, rendezvous_port)


class Calibration(NamedTuple):
    row: dict  # analysis.calibration_row: what the store keeps
    comparison: stats.Comparison
    run_spread: float  # the larger of the two instances'


def run_medians_by_runner(
    endpoints: dict[str, str], transport: Transport, request: pb.RunRequest, repetitions: int
) -> tuple[list[RunResult], dict[str, list[float]], list[RunnerFailure]]:
    """The same request on every runner, counterbalanced: the results and each runner's per-run median
    step times (what an A/A comparison compares)."""
    results, failures = run_all(endpoints, {name: request for name in endpoints}, transport, repetitions)
    if failures:
        return results, {}, failures
    return results, medians_by_runner(results), []


def medians_by_runner(results: Sequence[RunResult]) -> dict[str, list[float]]:
    """Each runner's per-run median step times, in repetition order, from the results of one configuration."""
    summary = results_mod.summary_frame("a-a", list(results), [])
    runs = analysis.run_values(summary, results_mod.steps_frame("a-a", list(results)))
    # Rows are labelled with the strategy ("a ddp"); the caller knows its runners by name.
    names = dict(analysis.normalised(summary)[["runner", "runner_name"]].itertuples(index=False))
    return {names[label]: group.tolist() for label, group in runs.groupby("runner")["median_step_time_s"]}


def calibrate_twins(
    name: str, addresses: Sequence[str], transport: Transport, request: pb.RunRequest, repetitions: int,
    results_store: store_mod.ResultStore, run_id: str,
) -> tuple[Optional[Calibration], list[RunnerFailure]]:
    """Two instances of one runner against each other (A/A), and the noise floor that gives, stored."""
    twins = {name: addresses[0], f"{name}-2": addresses[1]}
    results, medians, failures = run_medians_by_runner(twins, transport, request, repetitions)
    if failures:
        return None, failures
    comparison = stats.compare(name, medians[name], f"{name}-2", medians[f"{name}-2"])
    summary = results_mod.summary_frame(run_id, results, [])
    row = analysis.calibration_row(analysis.normalised(summary).iloc[0].to_dict(), results[0].runner_info.framework, comparison)
    key = store_mod.run_key({"calibration": run_id, "runner": name})
    results_store.append(key, {"calibration": run_id, "runner": name, **MessageToDict(request)},
                         {"calibration": pd.DataFrame([row])},
                         results_mod.manifest(key, results, {twin: request for twin in twins}))
    return Calibration(row, comparison, max(stats.run_spread(medians[twin]) for twin in twins)), []


def pending_runs(
    configurations: Sequence[Configuration], results_store: store_mod.ResultStore, startup: StartupSettings
) -> tuple[list[tuple[str, Configuration]], list[tuple[str, Configuration]]]:
    """(key, configuration) of the runs still to do, and of those the store already holds."""
    pending, done = [], []
    for c in configurations:
        key = store_mod.run_key(c.key_fields(seed=0, intra_op_threads=startup.intra_op_threads,
                                             inter_op_threads=startup.inter_op_threads, cudnn_autotune=startup.cudnn_autotune))
        (done if results_store.has(key) else pending).append((key, c))
    return pending, done


class Slot(NamedTuple):
    """A place in a pool of machines where a study's runs go: one runner of each framework on one node (or on
    one GPU of it)."""

    name: str  # "node1", or "node1/gpu:0" for runners that see one GPU each
    node: str  # the machine: it fails as a whole
    endpoints: dict[str, str]  # framework -> address


class Pool(NamedTuple):
    """The machines of a cluster allocation (slurm.py), and how to tell that one is gone."""

    slots: list[Slot]
    lost: Callable[[str], Optional[str]]  # node -> why it is gone, or None while it serves
    context: dict  # added to every run's manifest (the allocation's job, nodes and options), with "run_nodes"
    rendezvous_port: Optional[int] = None


class _Sweep:
    """What every run of a sweep shares, whichever scheduler places it: the runners' facts, the store (under a
    lock), the reuse chains, the progress bar, the clients in flight and the failures."""

    def __init__(self, pending, transport: Transport, startup: StartupSettings, results_store: store_mod.ResultStore,
                 first_endpoints: dict[str, str], progress: Progress) -> None:
        self.transport, self.startup, self.results_store, self.progress = transport, startup, results_store, progress
        self.facts = {name: runner_facts(name, jobs.addresses_of(address)[0], transport)
                      for name, address in first_endpoints.items()}
        self.failures: list[RunnerFailure] = []
        self.store_lock = threading.Lock()
        self.active: set[RunnerClient] = set()
        # This sweep's own chain keys (two sweeps on one runner never share a build), and each chain's last pending
        # run, after which its runner frees the build instead of holding it while another runner uses the device.
        self.session = uuid.uuid4().hex[:8]
        self.chain_ends = {c.reuse_chain: key for key, c in pending if c.reuse_chain}
        self.overall = progress.add_task("sweep", total=len(pending))

    def run(self, key: str, c: Configuration, address: str, rendezvous_port: Optional[int] = None,
            context: Optional[dict] = None, stop: Optional[threading.Event] = None) -> Optional[RunnerFailure]:
        """One run on `address` (a comma list: a job across machines), stored the moment it completes, or its
        failure, stored where it would repeat; returns the failure."""
        self.progress.update(self.overall, description=f"{c.runner} {c.model} {c.mode.value} b{c.batch_size} #{c.repetition + 1}")
        reuse_key = f"{self.session}-{c.reuse_chain}" if c.reuse_chain else ""
        request = c.run_spec(self.startup, reuse_key, end_reuse=self.chain_ends.get(c.reuse_chain) == key).to_request()
        config = c.key_fields()

        def store(result: RunResult) -> None:
            # Written as the summary arrives, while the runner frees the run's memory: off the gap between runs,
            # and still stored before the next run starts.
            manifest = {**results_mod.manifest(key, [result], {result.runner: request}), **(context or {})}
            with self.store_lock:
                store_frames(self.results_store, key, config, result, manifest)

        try:
            jobs.run_job(c.runner, address, self.transport, request, repetition=c.repetition, active=self.active,
                         on_summary=store, rendezvous_port=rendezvous_port)
            return None
        except RunnerFailure as failure:
            self.failures.append(failure)
            stored = self.results_store.has(key)  # the call failed after its summary arrived: the run is kept
            stopping = stop is not None and stop.is_set()
            if (failure.code in REPEATABLE_FAILURES or failure.out_of_memory) and not stopping and not stored:
                # Where the run would have been: the device, shape and spread a success would report.
                nodes = len(jobs.addresses_of(address))
                where = {
                    **self.facts[c.runner].failure_columns(c.model, (c.devices or "").split(",")[0] or c.device, c.shape),
                    "strategy": c.strategy.value if c.strategy else "", "devices": c.devices or "", "nodes": nodes,
                    "world_size": nodes * (len(c.devices.split(",")) if c.devices else 1),
                }
                with self.store_lock:
                    self.results_store.append_failure(key, config, failure.code, failure.message, manifest=context,
                                                      columns=where)
            return failure
        finally:
            self.progress.advance(self.overall)

    def cancel_in_flight(self) -> None:
        # Closing the channels cancels the runs in flight: each runner stops between steps.
        for client in list(self.active):
            client.close()


def _progress() -> Progress:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    return Progress(*columns, console=err_console)


def run_sweep(
    pending: Sequence[tuple[str, Configuration]], endpoints: dict[str, str], transport: Transport, startup: StartupSettings,
    results_store: store_mod.ResultStore, cooldown_s: float,
) -> tuple[list[RunnerFailure], Optional[KeyboardInterrupt]]:
    """Every pending run, those sharing a machine and device one after the other, each stored the moment it
    completes (a repeatable failure too); returns the failures and the interrupt (Ctrl-C, or the CLI's
    SIGTERM) that stopped the sweep, if one did."""
    stop = threading.Event()
    with _progress() as progress:
        sweep = _Sweep(pending, transport, startup, results_store, endpoints, progress)
        # A run on several devices or runners shares devices with the others: then a machine runs one at a time.
        whole_machines = any(c.devices or "," in endpoints.get(c.runner, "") for _, c in pending)

        def group(c: Configuration) -> tuple[str, str]:
            address = jobs.addresses_of(endpoints[c.runner])[0]
            facts = sweep.facts[c.runner]
            machine, device = device_group(address, c.device or facts.default_device, facts.options)
            return (machine, "") if whole_machines else (machine, device)

        grouped = [(group(c), (key, c)) for key, c in pending if c.runner in endpoints]
        try:
            run_grouped(grouped, lambda job: sweep.run(*job, endpoints[job[1].runner], stop=stop), stop,
                        between=lambda: time.sleep(cooldown_s))
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
    pending: Sequence[tuple[str, Configuration]], pool: Pool, transport: Transport, startup: StartupSettings,
    results_store: store_mod.ResultStore, cooldown_s: float,
) -> tuple[list[RunnerFailure], list[tuple[str, Configuration]], Optional[KeyboardInterrupt]]:
    """A sweep over a cluster's machines: each unit (one point's runs, every runner and repetition) on one machine,
    the units spread over the machines, a machine's devices at once as on one; then the runs that span several
    machines, one at a time across the first live ones. A run that fails because its machine is gone is a failure
    naming the machine (not stored: a resume runs it again), and the rest goes on without that machine. Returns
    the failures, the runs left undone (no machine left for them) and the interrupt, if any."""
    stop = threading.Event()
    gone: dict[str, str] = {}
    gone_lock = threading.Lock()
    slots = {slot.name: slot for slot in pool.slots}

    def node_gone(node: str) -> Optional[str]:
        with gone_lock:
            if node not in gone:
                why = pool.lost(node)
                if why is None:
                    return None
                gone[node] = why
                err_console.print(f"[bold red]node {node} is gone[/] ({why}): the study goes on without it")
            return gone[node]

    def lost_run(failure: RunnerFailure, c: Configuration, nodes: Sequence[str]) -> bool:
        """Whether the failure is a machine's loss; if so, it is restated naming the machine."""
        lost = [(node, why) for node in nodes if (why := node_gone(node))]
        if not lost:
            return False
        node, why = lost[0]
        sweep.failures.remove(failure)
        sweep.failures.append(RunnerFailure(
            c.runner, failure.code,
            f"node {node} lost during {c.model} {c.mode.value} b{c.batch_size} #{c.repetition + 1} ({why}); "
            f"the run is not stored, and a resume (--resume) runs it: {failure.message}", failure.reason))
        return True

    with _progress() as progress:
        sweep = _Sweep(pending, transport, startup, results_store, pool.slots[0].endpoints, progress)
        whole_machines = any(c.devices or c.nodes > 1 for _, c in pending)

        def lane(c: Configuration) -> str:
            return "" if whole_machines else indexed_device(c.device or sweep.facts[c.runner].default_device)

        def run_on_slot(slot_name: str, job: tuple[str, Configuration]) -> bool:
            slot = slots[slot_name]
            failure = sweep.run(*job, slot.endpoints[job[1].runner], context={**pool.context, "run_nodes": [slot.node]}, stop=stop)
            return failure is None or not lost_run(failure, job[1], [slot.node])

        single = [unit for unit in units_of(pending) if unit[0][1].nodes == 1]
        spanning = [run for unit in units_of(pending) if unit[0][1].nodes > 1 for run in unit]
        workers = [(slot.name, lane_name) for slot in pool.slots for lane_name in {lane(u[0][1]) for u in single}]
        try:
            left = run_pooled([(lane(u[0][1]), u) for u in single], workers, run_on_slot, stop,
                              between=lambda: time.sleep(cooldown_s), available=lambda name: slots[name].node not in gone)
            for key, c in spanning:
                if stop.is_set():
                    left.append((key, c))
                    continue
                live = [slot for slot in pool.slots if not node_gone(slot.node)]
                if len(live) < c.nodes:
                    left.append((key, c))
                    continue
                chosen = live[:c.nodes]
                address = ",".join(slot.endpoints[c.runner] for slot in chosen)
                nodes = [slot.node for slot in chosen]
                failure = sweep.run(key, c, address, pool.rendezvous_port, {**pool.context, "run_nodes": nodes}, stop)
                if failure is not None:
                    lost_run(failure, c, nodes)
        except KeyboardInterrupt as interrupt:
            sweep.cancel_in_flight()
            return sweep.failures, [], interrupt
    return sweep.failures, left, None
