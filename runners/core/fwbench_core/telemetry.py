"""A run's telemetry around its steps: the device's state read before and after, its idle power sampled first, each
phase's power samples tagged and streamed, and the summary given its device state and energy. One object per run,
opened before the build and closed however the run ends."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from .choices import Phase
from .device_state import DeviceState, DeviceStateReader
from .devices import DeviceRef
from .power import PowerPhase, PowerSample, PowerSampler, energy_summary
from .runs import RunConfig
from .serving import QueryBatch
from .timing import Progress, StepBatch, Summary, samples_processed, with_device_state

# How often the idle baseline looks at cancellation.
IDLE_POLL_S = 0.1
# The run's phases as the power sampler tags its readings.
POWER_PHASES = {Phase.WARMUP: PowerPhase.WARMUP, Phase.MEASURE: PowerPhase.MEASURE, Phase.DONE: PowerPhase.AFTER}
# What the timed steps stream (timing.time_steps), which the telemetry passes on with its own.
StepEvent = Progress | StepBatch | QueryBatch | Summary


@dataclass(frozen=True)
class PowerBatch:
    samples: tuple[PowerSample, ...]


class RunTelemetry:
    """`with RunTelemetry(...) as telemetry:` reads the device's state, `idle_baseline` samples idle power, and
    `around(event)` yields each step event with the power events it brings; the sampler and the reader close at the
    end."""

    def __init__(
        self, sampler: PowerSampler | None, states: DeviceStateReader, device: DeviceRef, clock: Callable[[], float]
    ) -> None:
        self._sampler, self._states, self._device, self._clock = sampler, states, device, clock
        self._before: DeviceState | None = None  # read on entering

    def __enter__(self) -> RunTelemetry:
        self._states.open()
        self._before = self._states.read()
        return self

    def __exit__(self, *exc) -> None:
        self._states.close()
        if self._sampler is not None:
            self._sampler.stop()

    def idle_baseline(self, seconds: float, cancelled: Callable[[], bool]) -> None:
        """Idle power first, on the idle device: the baseline the run's power is compared with."""
        if self._sampler is None:
            return
        self._sampler.start()
        until_s = self._clock() + (seconds if self._sampler.unavailable_reason is None else 0.0)
        while self._clock() < until_s and not cancelled():
            time.sleep(min(IDLE_POLL_S, max(0.0, until_s - self._clock())))

    def around(self, event: StepEvent, config: RunConfig) -> Iterator[StepEvent | PowerBatch]:
        """`event` as the run streams it: the summary with the device state around the run and the energy over its
        measured window, each phase's start tagging the samples that follow, each step batch followed by the
        samples taken meanwhile."""
        if isinstance(event, Summary):
            assert self._before is not None  # a run streams its events inside the `with`, which read it
            event = with_device_state(event, self._device, self._before, self._states.read())
        sampler = self._sampler
        if sampler is None:
            yield event
            return
        if isinstance(event, Progress) and event.phase in POWER_PHASES:
            sampler.set_phase(POWER_PHASES[event.phase])
        if isinstance(event, Summary):
            samples = sampler.stop()
            yield PowerBatch(tuple(sampler.drain()))
            energy = energy_summary(
                samples, samples_processed=samples_processed(config, event), source_reasons=sampler.reasons
            )
            event = replace(event, energy=replace(energy, missed_slots=sampler.missed_slots))
        yield event
        if isinstance(event, StepBatch):
            yield PowerBatch(tuple(sampler.drain()))
