"""Energy and power over one phase's window of power samples."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

from .sampler import sample_rate_hz
from .sources import POWER_SOURCE_NVML_AVERAGE, PowerPhase, PowerSample

# Counter and integrated energy disagreeing by more than this is worth a note in the summary.
DISAGREEMENT_NOTE_LIMIT = 0.10

# The shortest window an energy figure is given for. nvmlDeviceGetPowerUsage averages over the last 1 s on
# Ampere and newer, and energy counters (NVML's and RAPL's) update at a finite rate (NVML's every few tens
# of ms): over a shorter window a figure is mostly what the sensor saw before the window, or a counter step.
MIN_ENERGY_WINDOW_S = 1.0
# The fewest readings in a phase for an energy figure or any power statistic (mean, peak, idle): at the
# default 20 Hz a 1 s window holds 20; a handful of readings is a handful of sensor updates, and two
# identical runs' figures from 1-4 readings were seen to differ 1.9x.
MIN_POWER_SAMPLES = 10


@dataclass(frozen=True)
class EnergySummary:
    """Energy over one phase's window: from its first sample to the first sample after its last one
    (each interval between samples belongs to the phase of the sample that opens it)."""

    phase: PowerPhase
    device: Optional[str]
    sample_count: int
    window_s: Optional[float]
    achieved_rate_hz: Optional[float]
    counter_energy_j: Optional[float]
    integrated_energy_j: Optional[float]
    energy_disagreement: Optional[float]  # |counter - integrated| / counter
    energy_j: Optional[float]  # the counter where it advanced, else the integral
    energy_source: Optional[str]  # "counter" or "integrated"
    mean_power_w: Optional[float]
    peak_power_w: Optional[float]
    idle_power_w: Optional[float]
    energy_above_idle_j: Optional[float]
    energy_per_sample_j: Optional[float]
    energy_above_idle_per_sample_j: Optional[float]
    power_sources: tuple[str, ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)  # field -> why it is None
    notes: tuple[str, ...] = ()
    missed_slots: int = 0  # sampling slots skipped because a read overran its period


def _window(samples: Sequence[PowerSample], phase: PowerPhase) -> tuple[list[PowerSample], list[PowerSample]]:
    """(the phase's samples, the window: those and the sample that closes the last interval)."""
    indices = [i for i, s in enumerate(samples) if s.phase == phase]
    if not indices:
        return [], []
    return [samples[i] for i in indices], list(samples[indices[0] : indices[-1] + 2])


def _trapezoid(points: Sequence[tuple[float, float]]) -> float:
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))


def energy_window_s(rate_hz: float) -> float:
    """The shortest window that can give an energy figure when sampling at rate_hz."""
    return max(MIN_ENERGY_WINDOW_S, MIN_POWER_SAMPLES / rate_hz)


def _too_few_readings(count: int, figure: str) -> str:
    return f"{count} power sample{'s' if count != 1 else ''}, fewer than the {MIN_POWER_SAMPLES} {figure} needs"


def _energy_shortfalls(window_s: float | None, tagged: Sequence[PowerSample]) -> list[str]:
    """What the window lacks for an energy figure: length and readings (power or counter)."""
    shortfalls = []
    if window_s is not None and window_s < MIN_ENERGY_WINDOW_S:
        shortfalls.append(
            f"measured window {window_s:.2f} s is shorter than the {MIN_ENERGY_WINDOW_S:.1f} s an energy figure needs"
        )
    readings = sum(s.power_w is not None or s.energy_j is not None for s in tagged)
    if readings < MIN_POWER_SAMPLES:
        shortfalls.append(_too_few_readings(readings, "an energy figure"))
    return shortfalls


def energy_summary(
    samples: Sequence[PowerSample],
    phase: PowerPhase | str = PowerPhase.MEASURE,
    idle_baseline: bool = True,
    samples_processed: int | None = None,
    source_reasons: Mapping[str, str] | None = None,
) -> EnergySummary:
    """Energy, power and idle baseline over `phase`'s window. samples_processed (batch size x steps
    in the window) gives J/sample; source_reasons (PowerSampler.reasons) explain missing readings."""
    phase = PowerPhase(phase)
    source_reasons = dict(source_reasons or {})
    samples = sorted(samples, key=lambda s: s.time_s)
    tagged, window = _window(samples, phase)
    reasons: dict[str, str] = {}
    notes: list[str] = []
    source_why = source_reasons.get("source")

    def missing(name: str, why: str) -> None:
        reasons[name] = why

    no_samples = f"no {phase.value} samples" + (f": {source_why}" if source_why else "")
    window_s = window[-1].time_s - window[0].time_s if len(window) >= 2 else None
    if window_s is None:
        missing("window_s", no_samples if not window else f"a single {phase.value} sample spans no time")
    achieved_rate_hz = sample_rate_hz(tagged)
    if achieved_rate_hz is None:
        missing("achieved_rate_hz", no_samples if not tagged else f"fewer than two {phase.value} samples")

    # Energy from the cumulative counter.
    counted = [s for s in window if s.energy_j is not None]
    counter_energy_j = None
    counter_span_s = None
    counter_stalled = False  # the device has a counter, and it did not advance: no energy figure at all
    counter_why = power_why = None  # why the source had no counter, or no power readings
    if len(counted) < 2:
        why = counter_why = source_reasons.get("energy_j") or source_why
        missing(
            "counter_energy_j",
            f"no energy counter: {why}" if why else f"fewer than two energy counter readings in the {phase.value} window",
        )
    else:
        delta_j = counted[-1].energy_j - counted[0].energy_j
        counter_span_s = counted[-1].time_s - counted[0].time_s
        counter_stalled = delta_j <= 0
        if delta_j == 0:
            missing("counter_energy_j", f"the energy counter did not advance over the {counter_span_s:.2f} s window")
        elif delta_j < 0:
            missing("counter_energy_j", f"the energy counter went backwards by {-delta_j:.3f} J (driver reloaded?)")
        else:
            counter_energy_j = delta_j
            if window_s and counter_span_s < window_s * 0.99:
                notes.append(
                    f"the energy counter covers {counter_span_s:.2f} s of the {window_s:.2f} s window "
                    "(readings missing at its ends)"
                )

    # Energy from integrating power over time (trapezoid; a missing reading is bridged by its neighbours).
    powered = [(s.time_s, s.power_w) for s in window if s.power_w is not None]
    tagged_powers = [s.power_w for s in tagged if s.power_w is not None]
    integrated_energy_j = None
    integrated_span_s = None
    mean_power_w = None
    if len(powered) < 2 or powered[-1][0] <= powered[0][0]:
        why = power_why = source_reasons.get("power_w") or source_why
        text = f"fewer than two power readings in the {phase.value} window"
        missing("integrated_energy_j", f"{text}: {why}" if why else text)
        missing("mean_power_w", reasons["integrated_energy_j"])
    else:
        integrated_energy_j = _trapezoid(powered)
        integrated_span_s = powered[-1][0] - powered[0][0]
        if len(tagged_powers) < MIN_POWER_SAMPLES:
            missing("mean_power_w", _too_few_readings(len(tagged_powers), "a mean power"))
        else:
            mean_power_w = integrated_energy_j / integrated_span_s
    peak_power_w = None
    if not tagged_powers:
        missing("peak_power_w", f"no power reading among the {phase.value} samples")
    elif len(tagged_powers) < MIN_POWER_SAMPLES:
        missing("peak_power_w", _too_few_readings(len(tagged_powers), "a peak power"))
    else:
        peak_power_w = max(tagged_powers)
    power_sources = tuple(sorted({s.power_source for s in window if s.power_source}))
    if POWER_SOURCE_NVML_AVERAGE in power_sources:
        notes.append(
            "power is nvmlDeviceGetPowerUsage, a 1 s average on Ampere and newer: the integral lags and "
            "smooths the load; the energy counter is the better figure"
        )

    # Energy only where it was measured: a long enough window, enough readings, a counter that advanced.
    if counter_energy_j is not None or integrated_energy_j is not None:
        shortfalls = _energy_shortfalls(window_s, tagged)
        if counter_stalled:
            shortfalls.append(reasons["counter_energy_j"])
        if shortfalls:
            why = "; ".join(shortfalls)
            for name in ("counter_energy_j", "integrated_energy_j"):
                missing(name, reasons.get(name) or why)
            counter_energy_j = integrated_energy_j = None
            missing("energy_j", why)

    energy_disagreement = None
    if counter_energy_j is not None and integrated_energy_j is not None:
        energy_disagreement = abs(counter_energy_j - integrated_energy_j) / counter_energy_j
        if energy_disagreement > DISAGREEMENT_NOTE_LIMIT:
            notes.append(
                f"counter and integrated energy disagree by {energy_disagreement:.0%}: "
                f"{counter_energy_j:.1f} J vs {integrated_energy_j:.1f} J"
            )
    else:
        missing("energy_disagreement", "needs both the counter and the integrated energy")

    if counter_energy_j is not None:
        energy_j, energy_source, energy_span_s = counter_energy_j, "counter", counter_span_s
    elif integrated_energy_j is not None:
        energy_j, energy_source, energy_span_s = integrated_energy_j, "integrated", integrated_span_s
    else:
        energy_j = energy_source = energy_span_s = None
        both = (f"no energy counter and fewer than two power readings in the {phase.value} window: {counter_why}"
                if counter_why and counter_why == power_why  # one cause (no RAPL domain readable, say): said once
                else f"{reasons['counter_energy_j']}; {reasons['integrated_energy_j']}")
        reasons.setdefault("energy_j", both)
        missing("energy_source", reasons["energy_j"])

    idle_power_w = None
    if not idle_baseline:
        missing("idle_power_w", "idle baseline not requested")
    else:
        idle = [s.power_w for s in samples if s.phase == PowerPhase.IDLE and s.power_w is not None]
        if not idle:
            missing("idle_power_w", "no idle sample with a power reading")
        elif len(idle) < MIN_POWER_SAMPLES:
            missing("idle_power_w", _too_few_readings(len(idle), "an idle power"))
        else:
            idle_power_w = statistics.fmean(idle)
    energy_above_idle_j = None
    if energy_j is not None and idle_power_w is not None:
        energy_above_idle_j = energy_j - idle_power_w * energy_span_s
    else:
        missing("energy_above_idle_j", reasons.get("energy_j") or reasons["idle_power_w"])

    energy_per_sample_j = energy_above_idle_per_sample_j = None
    if not samples_processed or samples_processed <= 0:
        missing("energy_per_sample_j", "no count of samples processed in the window")
        missing("energy_above_idle_per_sample_j", reasons["energy_per_sample_j"])
    else:
        if energy_j is not None:
            energy_per_sample_j = energy_j / samples_processed
        else:
            missing("energy_per_sample_j", reasons["energy_j"])
        if energy_above_idle_j is not None:
            energy_above_idle_per_sample_j = energy_above_idle_j / samples_processed
        else:
            missing("energy_above_idle_per_sample_j", reasons["energy_above_idle_j"])

    device = window[0].device if window else (samples[0].device if samples else None)
    if device is None:
        missing("device", no_samples)
    return EnergySummary(
        phase=phase,
        device=device,
        sample_count=len(tagged),
        window_s=window_s,
        achieved_rate_hz=achieved_rate_hz,
        counter_energy_j=counter_energy_j,
        integrated_energy_j=integrated_energy_j,
        energy_disagreement=energy_disagreement,
        energy_j=energy_j,
        energy_source=energy_source,
        mean_power_w=mean_power_w,
        peak_power_w=peak_power_w,
        idle_power_w=idle_power_w,
        energy_above_idle_j=energy_above_idle_j,
        energy_per_sample_j=energy_per_sample_j,
        energy_above_idle_per_sample_j=energy_above_idle_per_sample_j,
        power_sources=power_sources,
        reasons=reasons,
        notes=tuple(notes),
    )
