"""Energy and power over one phase's window of power samples."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
    device: str | None
    sample_count: int
    window_s: float | None
    achieved_rate_hz: float | None
    counter_energy_j: float | None
    integrated_energy_j: float | None
    energy_disagreement: float | None  # |counter - integrated| / counter
    energy_j: float | None  # the counter where it advanced, else the integral
    energy_source: str | None  # "counter" or "integrated"
    mean_power_w: float | None
    peak_power_w: float | None
    idle_power_w: float | None
    energy_above_idle_j: float | None
    energy_per_sample_j: float | None
    energy_above_idle_per_sample_j: float | None
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


@dataclass(frozen=True)
class _Figure:
    """One figure of the summary and, where it is None, why; `cause` is the source's own reason for having no
    reading of this kind (one cause said once where both energies lack it)."""

    value: float | None = None
    why: str = ""
    span_s: float | None = None  # the time the figure covers, for energy figures
    cause: str | None = None
    stalled: bool = False  # an energy counter that did not advance: no energy figure at all
    note: str = ""


def _counter_energy(
    window: Sequence[PowerSample], window_s: float | None, phase: PowerPhase, source_reasons: Mapping[str, str]
) -> _Figure:
    """Energy from the cumulative counter: its last reading less its first in the window."""
    counted = [(s.time_s, s.energy_j) for s in window if s.energy_j is not None]
    if len(counted) < 2:
        cause = source_reasons.get("energy_j") or source_reasons.get("source")
        return _Figure(
            why=f"no energy counter: {cause}"
            if cause
            else f"fewer than two energy counter readings in the {phase.value} window",
            cause=cause,
        )
    (first_s, first_j), (last_s, last_j) = counted[0], counted[-1]
    delta_j, span_s = last_j - first_j, last_s - first_s
    if delta_j == 0:
        return _Figure(why=f"the energy counter did not advance over the {span_s:.2f} s window", stalled=True)
    if delta_j < 0:
        return _Figure(why=f"the energy counter went backwards by {-delta_j:.3f} J (driver reloaded?)", stalled=True)
    short = window_s and span_s < window_s * 0.99
    return _Figure(
        delta_j,
        span_s=span_s,
        note=f"the energy counter covers {span_s:.2f} s of the {window_s:.2f} s window (readings missing at its ends)"
        if short
        else "",
    )


def _integrated_energy(window: Sequence[PowerSample], phase: PowerPhase, source_reasons: Mapping[str, str]) -> _Figure:
    """Energy from integrating power over time (trapezoid; a missing reading is bridged by its neighbours)."""
    powered = [(s.time_s, s.power_w) for s in window if s.power_w is not None]
    if len(powered) < 2 or powered[-1][0] <= powered[0][0]:
        cause = source_reasons.get("power_w") or source_reasons.get("source")
        text = f"fewer than two power readings in the {phase.value} window"
        return _Figure(why=f"{text}: {cause}" if cause else text, cause=cause)
    return _Figure(_trapezoid(powered), span_s=powered[-1][0] - powered[0][0])


def _mean_power(integrated: _Figure, tagged_powers: Sequence[float]) -> _Figure:
    if integrated.value is None:
        return _Figure(why=integrated.why)
    if len(tagged_powers) < MIN_POWER_SAMPLES:
        return _Figure(why=_too_few_readings(len(tagged_powers), "a mean power"))
    assert integrated.span_s is not None  # an energy figure always says the time it covers
    return _Figure(integrated.value / integrated.span_s)


def _peak_power(tagged_powers: Sequence[float], phase: PowerPhase) -> _Figure:
    if not tagged_powers:
        return _Figure(why=f"no power reading among the {phase.value} samples")
    if len(tagged_powers) < MIN_POWER_SAMPLES:
        return _Figure(why=_too_few_readings(len(tagged_powers), "a peak power"))
    return _Figure(max(tagged_powers))


def _idle_power(samples: Sequence[PowerSample], idle_baseline: bool) -> _Figure:
    if not idle_baseline:
        return _Figure(why="idle baseline not requested")
    idle = [s.power_w for s in samples if s.phase == PowerPhase.IDLE and s.power_w is not None]
    if not idle:
        return _Figure(why="no idle sample with a power reading")
    if len(idle) < MIN_POWER_SAMPLES:
        return _Figure(why=_too_few_readings(len(idle), "an idle power"))
    return _Figure(statistics.fmean(idle))


def _above_idle(energy: _Figure, idle_power: _Figure) -> _Figure:
    if energy.value is None or idle_power.value is None:
        return _Figure(why=energy.why or idle_power.why)
    assert energy.span_s is not None  # an energy figure always says the time it covers
    return _Figure(energy.value - idle_power.value * energy.span_s)


def _measured_only(
    counter: _Figure, integrated: _Figure, window_s: float | None, tagged: Sequence[PowerSample]
) -> tuple[_Figure, _Figure, str]:
    """The two energies where they were measured (a long enough window, enough readings, a counter that advanced),
    else none of them, each with why; and why there is no energy at all, where that is decided here."""
    if counter.value is None and integrated.value is None:
        return counter, integrated, ""
    shortfalls = _energy_shortfalls(window_s, tagged) + ([counter.why] if counter.stalled else [])
    if not shortfalls:
        return counter, integrated, ""
    why = "; ".join(shortfalls)
    return (
        _Figure(why=counter.why or why, cause=counter.cause),
        _Figure(why=integrated.why or why, cause=integrated.cause),
        why,
    )


def _chosen_energy(counter: _Figure, integrated: _Figure, no_energy_why: str, phase: PowerPhase) -> tuple[_Figure, str]:
    """The energy figure (the counter where it advanced, else the integral) and its source."""
    if counter.value is not None:
        return counter, "counter"
    if integrated.value is not None:
        return integrated, "integrated"
    if no_energy_why:
        return _Figure(why=no_energy_why), ""
    if counter.cause and counter.cause == integrated.cause:  # one cause (no RAPL domain readable, say): said once
        return _Figure(
            why=f"no energy counter and fewer than two power readings in the {phase.value} window: {counter.cause}"
        ), ""
    return _Figure(why=f"{counter.why}; {integrated.why}"), ""


def _per_sample(energy: _Figure, samples_processed: int | None) -> _Figure:
    if not samples_processed or samples_processed <= 0:
        return _Figure(why="no count of samples processed in the window")
    return _Figure(energy.value / samples_processed) if energy.value is not None else _Figure(why=energy.why)


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
    source_why = source_reasons.get("source")
    no_samples = f"no {phase.value} samples" + (f": {source_why}" if source_why else "")
    window_s = window[-1].time_s - window[0].time_s if len(window) >= 2 else None
    achieved_rate_hz = sample_rate_hz(tagged)
    tagged_powers = [s.power_w for s in tagged if s.power_w is not None]

    counter = _counter_energy(window, window_s, phase, source_reasons)
    integrated = _integrated_energy(window, phase, source_reasons)
    mean_power = _mean_power(integrated, tagged_powers)
    notes = [counter.note] if counter.note else []  # said even where the energy is then left out
    counter, integrated, no_energy_why = _measured_only(counter, integrated, window_s, tagged)
    energy, energy_source = _chosen_energy(counter, integrated, no_energy_why, phase)
    disagreement = (
        _Figure(abs(counter.value - integrated.value) / counter.value)
        if counter.value is not None and integrated.value is not None
        else _Figure(why="needs both the counter and the integrated energy")
    )
    idle_power = _idle_power(samples, idle_baseline)
    above_idle = _above_idle(energy, idle_power)
    power_sources = tuple(sorted({s.power_source for s in window if s.power_source}))
    device = window[0].device if window else (samples[0].device if samples else None)

    peak_power = _peak_power(tagged_powers, phase)
    per_sample = _per_sample(energy, samples_processed)
    above_idle_per_sample = _per_sample(above_idle, samples_processed)
    figures = {
        "counter_energy_j": counter,
        "integrated_energy_j": integrated,
        "energy_disagreement": disagreement,
        "energy_j": energy,
        "mean_power_w": mean_power,
        "peak_power_w": peak_power,
        "idle_power_w": idle_power,
        "energy_above_idle_j": above_idle,
        "energy_per_sample_j": per_sample,
        "energy_above_idle_per_sample_j": above_idle_per_sample,
    }
    reasons = {name: figure.why for name, figure in figures.items() if figure.value is None}
    if window_s is None:
        reasons["window_s"] = no_samples if not window else f"a single {phase.value} sample spans no time"
    if achieved_rate_hz is None:
        reasons["achieved_rate_hz"] = no_samples if not tagged else f"fewer than two {phase.value} samples"
    if not energy_source:
        reasons["energy_source"] = energy.why
    if device is None:
        reasons["device"] = no_samples
    if POWER_SOURCE_NVML_AVERAGE in power_sources:
        notes.append(
            "power is nvmlDeviceGetPowerUsage, a 1 s average on Ampere and newer: the integral lags and "
            "smooths the load; the energy counter is the better figure"
        )
    if disagreement.value is not None and disagreement.value > DISAGREEMENT_NOTE_LIMIT:
        notes.append(
            f"counter and integrated energy disagree by {disagreement.value:.0%}: "
            f"{counter.value:.1f} J vs {integrated.value:.1f} J"
        )
    return EnergySummary(
        phase=phase,
        device=device,
        sample_count=len(tagged),
        window_s=window_s,
        achieved_rate_hz=achieved_rate_hz,
        counter_energy_j=counter.value,
        integrated_energy_j=integrated.value,
        energy_disagreement=disagreement.value,
        energy_j=energy.value,
        energy_source=energy_source or None,
        mean_power_w=mean_power.value,
        peak_power_w=peak_power.value,
        idle_power_w=idle_power.value,
        energy_above_idle_j=above_idle.value,
        energy_per_sample_j=per_sample.value,
        energy_above_idle_per_sample_j=above_idle_per_sample.value,
        power_sources=power_sources,
        reasons=reasons,
        notes=tuple(notes),
    )
