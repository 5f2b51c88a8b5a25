"""Where a run executes, through its one interface (venue.Venue), on the fake backend: the same small run in each of
the five venues ends with its summary, run where that venue runs it; release() ends what the venue kept, leaving no
worker process running; Venues chooses each kind of run's venue, and ends what the others keep before it runs, in
the order the service always has."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from support.core import RecordingBackend, small
from support.distributed import spawned_children
from support.processes import assert_all_end

from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.catalog import Catalog
from fwbench_core.choices import DeviceKind, Mode, Strategy
from fwbench_core.devices import DeviceRef
from fwbench_core.isolation import RunIsolation
from fwbench_core.models import ModelSource
from fwbench_core.registry import ModelRegistry
from fwbench_core.run_path import RunPath
from fwbench_core.runs import RunConfig, RunRequest
from fwbench_core.timing import Summary
from fwbench_core.validation import resolve
from fwbench_core.venues import (
    DistributedVenue,
    IsolatedWorkerVenue,
    PluginWorkerVenue,
    ProcessBlockVenue,
    ThreadVenue,
    Venues,
)

NOT_CANCELLED = lambda: False
PLUGIN = "tiny"
CATALOG = Catalog(
    {
        **MODEL_SPECS,
        PLUGIN: replace(
            MODEL_SPECS["resnet18"], name=PLUGIN, source=ModelSource("--models-dir", f"/models/{PLUGIN}", "sha256:0")
        ),
    },
    {},
)


class PluginFake(RecordingBackend):
    """The fake backend, serving plug-ins too: it builds every model as the fake workload, so a plug-in's run is a
    built-in's, in a worker process of its own."""

    models = ModelRegistry("fake", make_plugin_builder=lambda module, folder: module)


def cpus(count: int) -> tuple[DeviceRef, ...]:
    return tuple(DeviceRef(DeviceKind.CPU, i) for i in range(count))


def ddp(**overrides) -> RunRequest:
    """A distributed run on two CPU workers, as tests/test_distributed_core.py's."""
    return small(mode=Mode.TRAIN, devices=cpus(2), strategy=Strategy.DDP, distributed_timeout_s=10.0, **overrides)


# Each kind of run: the run isolation its runner has, its request, its venue.
KINDS = {
    "thread": (RunIsolation.THREAD, small(reuse_key="r0"), ThreadVenue),
    "isolated": (RunIsolation.PROCESS_PER_2_RUNS, small(), IsolatedWorkerVenue),
    "plugin": (RunIsolation.THREAD, small(model=PLUGIN), PluginWorkerVenue),
    "block": (RunIsolation.THREAD, small(process_block="k0"), ProcessBlockVenue),
    "distributed": (RunIsolation.THREAD, ddp(), DistributedVenue),
}


def venues_of(isolation: RunIsolation, starts_workers: bool = True) -> tuple[Venues, PluginFake]:
    backend = PluginFake()
    return Venues(backend, RunPath(backend), isolation, PluginFake if starts_workers else None, 60.0), backend


def config_of(request: RunRequest, backend: PluginFake) -> RunConfig:
    return resolve(request, backend.runner_info().devices, backend.capabilities, CATALOG, backend.framework)


@pytest.mark.parametrize("kind", KINDS)
def test_the_chooser_picks_each_kinds_venue(kind):
    isolation, request, venue_type = KINDS[kind]
    venues, backend = venues_of(isolation)
    venue = venues.venue_for(config_of(request, backend))
    assert type(venue) is venue_type and venue is getattr(venues, kind)


@pytest.mark.parametrize(
    "isolation, request_, kind",
    [
        (RunIsolation.PROCESS_ON_GPU, small(), "thread"),  # a CPU run stays in the runner's process
        (RunIsolation.PROCESS, small(model=PLUGIN), "plugin"),  # a plug-in's worker, not the isolation's
        (RunIsolation.THREAD, small(model=PLUGIN, process_block="k0"), "block"),  # the block's worker runs plug-ins too
        (RunIsolation.THREAD, ddp(model=PLUGIN), "distributed"),
    ],
)
def test_the_first_of_distributed_block_plugin_and_isolation_that_applies_chooses(isolation, request_, kind):
    venues, backend = venues_of(isolation)
    assert venues.venue_for(config_of(request_, backend)) is getattr(venues, kind)


def test_a_runner_that_starts_no_workers_runs_a_plugin_on_its_framework_thread():
    venues, backend = venues_of(RunIsolation.THREAD, starts_workers=False)
    assert venues.venue_for(config_of(small(model=PLUGIN), backend)) is venues.thread


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_in_each_venue_ends_with_its_summary_and_release_leaves_nothing_running(kind):
    isolation, request, _ = KINDS[kind]
    venues, backend = venues_of(isolation)
    config = config_of(request, backend)
    venue = venues.venue_for(config)
    before = set(spawned_children(os.getpid()))
    events = list(venue.stream(config, config.progress_total, NOT_CANCELLED))
    assert isinstance(events[-1], Summary) and events[-1].measured_steps == config.measured_steps
    kept = sorted(set(spawned_children(os.getpid())) - before)
    if kind == "thread":
        assert events[-1].process_id == os.getpid() and backend.workloads[0].closed == 0  # kept for reuse key r0
    elif kind == "distributed":
        assert kept == []  # its ranks stopped with the run
    else:
        assert events[-1].process_id != os.getpid() and len(kept) == 1, "the venue keeps its worker for a next run"
    venue.release()
    assert_all_end(kept, f"the {kind} venue's worker after release()", within_s=1.0)
    assert sorted(set(spawned_children(os.getpid())) - before) == []
    if kind == "thread":
        assert backend.workloads[0].closed == 1


@pytest.mark.parametrize(
    "kind, request_, released",
    [
        ("thread", small(), ["plugin", "block"]),
        ("isolated", small(), ["plugin", "block"]),
        ("plugin", small(model=PLUGIN), ["block", "thread"]),
        ("block", small(process_block="k0"), ["plugin", "thread"]),
        ("distributed", ddp(), ["plugin", "block"]),
        ("distributed", ddp(model=PLUGIN), ["block"]),
    ],
)
def test_a_run_ends_what_the_other_venues_keep_in_the_services_order(kind, request_, released, monkeypatch):
    venues, backend = venues_of(KINDS[kind][0])
    ended: list[str] = []
    for name in KINDS:
        monkeypatch.setattr(getattr(venues, name), "release", lambda name=name: ended.append(name))
    config = config_of(request_, backend)
    venues.release_beside(venues.venue_for(config), config)
    assert ended == released
