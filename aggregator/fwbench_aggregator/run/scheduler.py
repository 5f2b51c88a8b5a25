"""Scheduling a sweep's runs: runs that share a device one after the other, different devices at once.

NVML and wall clocks describe a whole device, so two runs on one GPU (or one CPU)
would spoil each other's figures; runners on different GPUs or hosts do not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

from ..base.vocabulary import indexed_device

Job = TypeVar("Job")
JOIN_POLL_S = 0.2


def device_group(address: str, device: str, runner_options: Mapping[str, str] = {}) -> tuple[str, str]:
    """Runs are serialised per machine and device. The machine is the runner's `host_id` (its kernel's
    boot id: containers `torch:50051` and `tensorflow:50051` on one host share it), else its address's
    host; a GPU is its UUID where the runner reports one, since containers may number GPUs differently."""
    machine = runner_options.get("host_id") or address.rsplit(":", 1)[0]
    device = indexed_device(device)
    return machine, runner_options.get(f"{device}.uuid", device)


def run_grouped(
    jobs: Sequence[tuple[Hashable, Job]],
    run_one: Callable[[Job], None],
    stop: threading.Event,
    between: Callable[[], None] = lambda: None,
) -> None:
    """Run each group's jobs in order on a thread of its own, the groups in parallel; no new job starts
    once `stop` is set. `between` runs between two jobs of a group (a cool-down). Returns when all are
    done; a KeyboardInterrupt in the caller's thread sets `stop` and is raised again once threads finish."""
    groups: dict[Hashable, list[Job]] = {}
    for group, job in jobs:
        groups.setdefault(group, []).append(job)
    errors: list[BaseException] = []

    def work(group_jobs: list[Job]) -> None:
        for number, job in enumerate(group_jobs):
            if stop.is_set():
                return
            if number:
                between()
            try:
                run_one(job)
            except BaseException as error:  # surfaced in the caller's thread below
                errors.append(error)
                stop.set()
                return

    _run_threads([threading.Thread(target=work, args=(jobs,), daemon=True) for jobs in groups.values()], stop, errors)


def run_pooled(
    units: Sequence[tuple[Hashable, list[Job]]],
    workers: Sequence[tuple[Hashable, Hashable]],
    run_one: Callable[[Hashable, Job], bool],
    stop: threading.Event,
    between: Callable[[], None] = lambda: None,
    available: Callable[[Hashable], bool] = lambda worker: True,
) -> list[Job]:
    """Units of jobs spread over a pool of workers (one per machine and lane): each (lane, jobs) unit runs whole
    on one worker of its lane, its jobs in order, and a free worker takes the next unit waiting in its lane.
    `workers` are (worker, lane). `run_one(worker, job)` returns False when the worker is lost (its machine
    gone): the worker takes no more, and the unit's jobs after that one wait for another worker of the lane;
    so do the unit's jobs not yet started when `available(worker)` turns False (another lane found it gone).
    Returns the jobs no worker was left to run (and those not started once `stop` was set)."""
    queues: dict[Hashable, list[list[Job]]] = {}
    for lane, jobs in units:
        queues.setdefault(lane, []).append(list(jobs))
    busy = {lane: 0 for lane in queues}
    lock = threading.Condition()
    errors: list[BaseException] = []

    def work(worker: Hashable, lane: Hashable) -> None:
        ran_before = False
        while not stop.is_set():
            with lock:
                while not queues.get(lane) and busy.get(lane, 0) and not stop.is_set():
                    lock.wait(JOIN_POLL_S)  # a lost worker may yet hand back a unit
                if not queues.get(lane) or stop.is_set():
                    return
                jobs = queues[lane].pop(0)
                busy[lane] += 1
            try:
                for number, job in enumerate(jobs):
                    if stop.is_set() or not available(worker):
                        with lock:
                            queues[lane].insert(0, jobs[number:])
                        return
                    if ran_before:
                        between()
                    ran_before = True
                    if not run_one(worker, job):
                        with lock:
                            if jobs[number + 1 :]:
                                queues[lane].insert(0, jobs[number + 1 :])
                        return
            except BaseException as error:  # surfaced in the caller's thread below
                errors.append(error)
                stop.set()
                return
            finally:
                with lock:
                    busy[lane] -= 1
                    lock.notify_all()

    _run_threads(
        [threading.Thread(target=work, args=pair, daemon=True) for pair in workers if pair[1] in queues], stop, errors
    )
    return [job for lane_units in queues.values() for jobs in lane_units for job in jobs]


def _run_threads(threads: list[threading.Thread], stop: threading.Event, errors: list[BaseException]) -> None:
    """Start the threads and wait for them all, in short joins so that Ctrl-C reaches this thread (and sets
    `stop` for them); then raise the first error a thread met."""
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(JOIN_POLL_S)
    except KeyboardInterrupt:
        stop.set()
        raise
    if errors:
        raise errors[0]
