"""Power and energy of the run's device, sampled on a thread of its own beside the training loop.

GPUs are read through NVML (nvidia-ml-py, imported lazily: it may be absent), CPUs through
Linux RAPL counters under /sys/class/powercap. What cannot be read is None with a reason,
never zero and never made up.
"""

from __future__ import annotations

import abc
import enum
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .spec import DeviceKind, DeviceRef

DEFAULT_RATE_HZ = 20.0
MIN_RATE_HZ = 1.0
MAX_RATE_HZ = 100.0

# NVML field ids (nvml.h); read as numbers so that an nvidia-ml-py too old to name them still works.
NVML_FI_DEV_POWER_INSTANT = 186

# NVML return codes that mean "this device or driver never has it", as opposed to a failed read:
# INVALID_ARGUMENT is what a driver older than a field id answers for it.
_NVML_ERROR_INVALID_ARGUMENT = 2
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_NVML_NEVER = {_NVML_ERROR_INVALID_ARGUMENT, _NVML_ERROR_NOT_SUPPORTED, _NVML_ERROR_FUNCTION_NOT_FOUND}

POWER_SOURCE_NVML_INSTANT = "nvml_instant"
POWER_SOURCE_NVML_AVERAGE = "nvml_average"
POWER_SOURCE_RAPL = "rapl"

DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")

# How long stop() waits for a read in progress; NVML calls can hang when a GPU falls off the bus.
STOP_TIMEOUT_S = 5.0

# Counter and integrated energy disagreeing by more than this is worth a note in the summary.
DISAGREEMENT_NOTE_LIMIT = 0.10


class PowerPhase(str, enum.Enum):
    """What the run was doing when a sample was taken; the run loop tells the sampler."""

    IDLE = "idle"
    WARMUP = "warmup"
    MEASURE = "measure"
    AFTER = "after"


@dataclass(frozen=True)
class PowerSample:
    time_s: float
    phase: PowerPhase
    device: str
    power_w: Optional[float] = None
    power_source: Optional[str] = None
    energy_j: Optional[float] = None  # a cumulative counter: only differences mean anything
    gpu_util_pct: Optional[float] = None
    memory_util_pct: Optional[float] = None
    memory_used_bytes: Optional[int] = None
    sm_clock_mhz: Optional[float] = None
    temperature_c: Optional[float] = None


class Telemetry(abc.ABC):
    """One device's power source. open() says whether it can read anything (else unavailable_reason);
    read() never raises for a field it cannot read this time: that field is None and reasons says why."""

    device: str

    def __init__(self) -> None:
        self.unavailable_reason: str | None = None
        self._never: dict[str, str] = {}  # field -> why this device never has it
        self._first_error: dict[str, str] = {}  # field -> the first failed read, recorded once
        self._error_counts: Counter[str] = Counter()

    @abc.abstractmethod
    def open(self) -> bool:
        """Prepare to read; False (with unavailable_reason) where nothing can be read."""

    @abc.abstractmethod
    def read(self, time_s: float, phase: PowerPhase) -> PowerSample:
        """One reading of every field, taken now and stamped with time_s and phase."""

    def close(self) -> None:
        """Release what open() took."""

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None

    @property
    def reasons(self) -> dict[str, str]:
        """Why each field is missing: always (unsupported) or in some samples (failed reads)."""
        reasons = dict(self._never)
        for name, message in self._first_error.items():
            count = self._error_counts[name]
            reasons.setdefault(name, f"{message} ({count} failed read{'s' if count != 1 else ''})")
        if self.unavailable_reason is not None:
            reasons["source"] = self.unavailable_reason
        return reasons

    def _unsupported(self, name: str, reason: str) -> None:
        self._never.setdefault(name, reason)

    def _failed(self, name: str, message: str) -> None:
        self._first_error.setdefault(name, message)
        self._error_counts[name] += 1


def _load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py; imported here so that the core works where it is absent

    return pynvml


class NvmlGpuSource(Telemetry):
    """A GPU through NVML: instantaneous power where the driver has NVML_FI_DEV_POWER_INSTANT, else
    nvmlDeviceGetPowerUsage (a 1 s average on Ampere and newer except GA100), and the energy counter."""

    def __init__(self, index: int = 0, nvml_module: Any = None) -> None:
        super().__init__()
        self.index = index
        self.device = str(DeviceRef(DeviceKind.GPU, index))
        self._nvml = nvml_module
        self._handle: Any = None
        self._initialized = False
        self.power_source: str | None = None

    def open(self) -> bool:
        if self._nvml is None:
            try:
                self._nvml = _load_pynvml()
            except ImportError:
                self.unavailable_reason = "nvidia-ml-py not installed"
                return False
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            self._initialized = True
            self._handle = nvml.nvmlDeviceGetHandleByIndex(self.index)
        except nvml.NVMLError as error:
            self.unavailable_reason = f"NVML: {error} ({self.device})"
            self.close()
            return False
        self.power_source = self._probe_power_source()
        return True

    def close(self) -> None:
        if self._initialized:
            self._initialized = False
            self._handle = None
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass  # shutting down is best effort; NVML counts inits and shutdowns per process

    def _probe_power_source(self) -> str:
        """Instantaneous power if the field reads now; an unsupported field means the averaged call."""
        _, code, message = self._read_instant_power()
        if code is not None and code in _NVML_NEVER:
            self._unsupported(
                "power_instant",
                f"NVML_FI_DEV_POWER_INSTANT: {message}; power is nvmlDeviceGetPowerUsage, "
                "a 1 s average on Ampere and newer (except GA100)",
            )
            return POWER_SOURCE_NVML_AVERAGE
        return POWER_SOURCE_NVML_INSTANT

    def _read_instant_power(self) -> tuple[float | None, int | None, str]:
        """(watts, None, "") or (None, NVML return code, message)."""
        nvml = self._nvml
        try:
            value = nvml.nvmlDeviceGetFieldValues(self._handle, [NVML_FI_DEV_POWER_INSTANT])[0]
        except AttributeError:
            return None, _NVML_ERROR_FUNCTION_NOT_FOUND, "nvidia-ml-py has no nvmlDeviceGetFieldValues"
        except nvml.NVMLError as error:
            return None, getattr(error, "value", None), str(error)
        if value.nvmlReturn != 0:
            return None, value.nvmlReturn, self._error_text(value.nvmlReturn)
        return _field_value(value) / 1000.0, None, ""  # milliwatts

    def _error_text(self, code: int) -> str:
        try:
            return str(self._nvml.NVMLError(code))
        except Exception:  # the text is for people; a code without one still says which
            return f"NVML error {code}"

    def _call(self, name: str, read: Callable[[], Any]) -> Any:
        """One NVML reading, or None: unsupported fields are not asked again, failed ones are."""
        if name in self._never:
            return None
        nvml = self._nvml
        try:
            return read()
        except AttributeError as error:  # an nvidia-ml-py too old for the call
            self._unsupported(name, f"nvidia-ml-py lacks it: {error}")
        except nvml.NVMLError as error:
            if getattr(error, "value", None) in _NVML_NEVER:
                self._unsupported(name, f"NVML: {error}")
            else:
                self._failed(name, f"NVML: {error}")
        return None

    def read(self, time_s: float, phase: PowerPhase) -> PowerSample:
        if self._handle is None:
            return PowerSample(time_s, phase, self.device)
        nvml, handle = self._nvml, self._handle
        # Power and energy first: they are what the timestamp is for.
        power_w: float | None = None
        if self.power_source == POWER_SOURCE_NVML_INSTANT:
            power_w, code, message = self._read_instant_power()
            if power_w is None:
                self._failed("power_w", f"NVML: {message}")
        else:
            power_mw = self._call("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
            power_w = None if power_mw is None else power_mw / 1000.0
        energy_mj = self._call("energy_j", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        utilization = self._call("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = self._call("memory_used_bytes", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        sm_clock = self._call("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        temperature = self._call(
            "temperature_c", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
        )
        return PowerSample(
            time_s=time_s,
            phase=phase,
            device=self.device,
            power_w=power_w,
            power_source=self.power_source if power_w is not None else None,
            energy_j=None if energy_mj is None else energy_mj / 1000.0,
            gpu_util_pct=None if utilization is None else float(utilization.gpu),
            memory_util_pct=None if utilization is None else float(utilization.memory),
            memory_used_bytes=None if memory is None else int(memory.used),
            sm_clock_mhz=None if sm_clock is None else float(sm_clock),
            temperature_c=None if temperature is None else float(temperature),
        )


def _field_value(value: Any) -> float:
    """The number in an nvmlFieldValue_t, by its valueType (nvml.h's nvmlValueType_t)."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(value.value, member.get(value.valueType, "uiVal")))


@dataclass
class _RaplDomain:
    path: Path
    max_range_uj: int | None
    last_uj: int
    total_uj: int  # unwrapped: the first reading plus every difference since


class RaplCpuSource(Telemetry):
    """The CPU packages' energy through RAPL (intel-rapl:N/energy_uj, summed over packages).
    Power is the energy difference over the time since the previous reading: the first sample has none.
    Since Linux 5.10 energy_uj is readable by root only, so in most containers this is unavailable."""

    def __init__(self, root: Path = DEFAULT_POWERCAP_ROOT, index: int = 0) -> None:
        super().__init__()
        self.root = Path(root)
        self.device = str(DeviceRef(DeviceKind.CPU, index))
        self._domains: list[_RaplDomain] = []
        self._previous_s: float | None = None  # when every domain last read well
        self._counter_broken = False

    def open(self) -> bool:
        self._domains = []
        self._previous_s = None
        self._counter_broken = False
        denied = False
        # Packages only: intel-rapl:N:M are their core/uncore/dram subdomains (counted in the package),
        # and a "psys" domain is the whole platform, which would count the packages twice.
        candidates = sorted(self.root.glob("intel-rapl:*")) if self.root.is_dir() else []
        for path in candidates:
            if path.name.count(":") != 1 or not _is_package(path):
                continue
            try:
                energy_uj = int((path / "energy_uj").read_text())
            except PermissionError:
                denied = True
                continue
            except (OSError, ValueError):
                continue
            self._domains.append(_RaplDomain(path, _read_int(path / "max_energy_range_uj"), energy_uj, energy_uj))
        if not self._domains:
            why = "permission denied" if denied else "no package domain" if self.root.is_dir() else "no such directory"
            self.unavailable_reason = f"no RAPL domain readable under {self.root} ({why})"
            return False
        if any(d.max_range_uj is None for d in self._domains):
            self._unsupported(
                "energy_wraparound", "max_energy_range_uj unreadable: after a wraparound the counter gives no energy"
            )
        return True

    def _advance(self, domain: _RaplDomain) -> int | None:
        """The domain's energy since its last good reading, in uJ; None where it cannot be known."""
        try:
            energy_uj = int((domain.path / "energy_uj").read_text())
        except (OSError, ValueError) as error:
            self._failed("energy_j", f"RAPL: {domain.path.name}/energy_uj: {error}")
            return None  # last_uj stays: the next difference spans the gap, and the total stays right
        delta_uj = energy_uj - domain.last_uj
        domain.last_uj = energy_uj
        if delta_uj < 0:  # the counter wrapped around its range
            if domain.max_range_uj is None:
                # What was lost is unknown: the running total would be wrong from here on.
                self._counter_broken = True
                self._failed("energy_j", f"RAPL: {domain.path.name} wrapped and its range is unknown")
                return None
            delta_uj += domain.max_range_uj
        domain.total_uj += delta_uj
        return delta_uj

    def read(self, time_s: float, phase: PowerPhase) -> PowerSample:
        if not self._domains:
            return PowerSample(time_s, phase, self.device)
        deltas_uj = [self._advance(d) for d in self._domains]  # every domain, even after a failure
        complete = all(delta is not None for delta in deltas_uj)
        power_w = None
        if complete and self._previous_s is not None and time_s > self._previous_s:
            power_w = sum(deltas_uj) / 1e6 / (time_s - self._previous_s)
        # After a failed read a difference would span more than the interval since the previous sample.
        self._previous_s = time_s if complete else None
        energy_j = None
        if complete and not self._counter_broken:
            energy_j = sum(d.total_uj for d in self._domains) / 1e6
        return PowerSample(
            time_s,
            phase,
            self.device,
            power_w=power_w,
            power_source=POWER_SOURCE_RAPL if power_w is not None else None,
            energy_j=energy_j,
        )


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _is_package(domain: Path) -> bool:
    try:
        return (domain / "name").read_text().strip().startswith("package")
    except OSError:
        return True  # no name to go by: a top-level domain is a package on every machine seen


def source_for(ref: DeviceRef, nvml_module: Any = None, powercap_root: Path = DEFAULT_POWERCAP_ROOT) -> Telemetry:
    if ref.kind is DeviceKind.GPU:
        return NvmlGpuSource(ref.index, nvml_module)
    return RaplCpuSource(powercap_root, ref.index)


def validate_rate_hz(rate_hz: float) -> float:
    if isinstance(rate_hz, bool) or not (isinstance(rate_hz, (int, float)) and MIN_RATE_HZ <= rate_hz <= MAX_RATE_HZ):
        raise ValueError(
            f"power_sample_rate_hz must be between {MIN_RATE_HZ:g} and {MAX_RATE_HZ:g} Hz, got {rate_hz!r}"
        )
    return float(rate_hz)


class PowerSampler:
    """Reads a source at rate_hz on its own thread, tagging each sample with the phase the run loop set.

    The schedule is a fixed grid (start + k / rate_hz) waited on with Event.wait, so slow reads do not
    push later samples back; slots a read overran are skipped (missed_slots), not made up. set_phase
    also wakes the thread for one sample at once, so each phase's window starts at its boundary.
    """

    def __init__(
        self,
        source: Telemetry,
        rate_hz: float = DEFAULT_RATE_HZ,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.source = source
        self.rate_hz = validate_rate_hz(rate_hz)
        self._clock = clock
        self._phase = PowerPhase.IDLE
        self._lock = threading.Lock()
        self._samples: list[PowerSample] = []
        self._drained = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._open = False
        self._started = False
        self.missed_slots = 0
        self._errors: dict[str, str] = {}
        self._error_counts: Counter[str] = Counter()

    @property
    def unavailable_reason(self) -> str | None:
        return self.source.unavailable_reason

    @property
    def reasons(self) -> dict[str, str]:
        reasons = self.source.reasons
        for name, message in self._errors.items():
            reasons[name] = f"{message} ({self._error_counts[name]} times)"
        return reasons

    @property
    def phase(self) -> PowerPhase:
        return self._phase

    def start(self) -> None:
        if self._started:
            raise RuntimeError("a PowerSampler starts once")
        self._started = True
        self._open = self.source.open()
        if not self._open:
            return  # nothing to read: no thread, no samples; unavailable_reason says why
        self._wake.clear()  # a phase set before start is the first sample's, not a boundary
        self._thread = threading.Thread(target=self._run, name=f"fwbench-power-{self.source.device}", daemon=True)
        self._thread.start()

    def set_phase(self, phase: PowerPhase | str) -> None:
        self._phase = PowerPhase(phase)
        self._wake.set()

    def drain(self) -> list[PowerSample]:
        """Samples taken since the last drain, for streaming in batches."""
        with self._lock:
            fresh = self._samples[self._drained :]
            self._drained = len(self._samples)
        return fresh

    def samples(self) -> list[PowerSample]:
        with self._lock:
            return list(self._samples)

    def stop(self) -> list[PowerSample]:
        """Stop sampling, take one closing sample (it ends the last phase's window), release the source;
        every sample of the run. Samples not yet drained stay there for drain()."""
        if self._thread is not None:
            self._stopping = True
            self._wake.set()
            self._thread.join(STOP_TIMEOUT_S)
            if self._thread.is_alive():  # a read hangs (a lost GPU): leave it, and the source, alone
                self._errors.setdefault("sampler", f"the sampler thread did not stop within {STOP_TIMEOUT_S:g} s")
                self._error_counts["sampler"] += 1
                self._open = False
            self._thread = None
        if self._open:
            self._sample_now()
            self.source.close()
            self._open = False
        return self.samples()

    def _sample_now(self) -> PowerSample | None:
        """One sample on the caller's thread (stop's closing sample); None where it cannot be read."""
        if not self._open:
            return None
        try:
            sample = self.source.read(self._clock(), self._phase)
        except Exception as error:  # a source bug must not end the run; it is reported instead
            key = "sampler"
            self._errors.setdefault(key, f"reading {self.source.device} failed: {type(error).__name__}: {error}")
            self._error_counts[key] += 1
            return None
        with self._lock:
            self._samples.append(sample)
        return sample

    @property
    def achieved_rate_hz(self) -> float | None:
        with self._lock:
            return _rate_hz(self._samples)

    def _run(self) -> None:
        period_s = 1.0 / self.rate_hz
        next_s = time.monotonic()
        while True:
            timeout_s = next_s - time.monotonic()
            woken = self._wake.wait(timeout_s) if timeout_s > 0 else self._wake.is_set()
            if self._stopping:
                return
            if woken:  # a phase changed: sample the boundary; the grid stays where it was
                self._wake.clear()
                self._sample_now()
                continue
            self._sample_now()
            next_s += period_s
            behind_s = time.monotonic() - next_s
            if behind_s > 0:
                skipped = int(behind_s // period_s) + 1
                self.missed_slots += skipped
                next_s += skipped * period_s


def _rate_hz(samples: Sequence[PowerSample]) -> float | None:
    if len(samples) < 2 or samples[-1].time_s <= samples[0].time_s:
        return None
    return (len(samples) - 1) / (samples[-1].time_s - samples[0].time_s)


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
    achieved_rate_hz = _rate_hz(tagged)
    if achieved_rate_hz is None:
        missing("achieved_rate_hz", no_samples if not tagged else f"fewer than two {phase.value} samples")

    # Energy from the cumulative counter.
    counted = [s for s in window if s.energy_j is not None]
    counter_energy_j = None
    counter_span_s = None
    if len(counted) < 2:
        why = source_reasons.get("energy_j") or source_why
        missing(
            "counter_energy_j",
            f"no energy counter: {why}" if why else f"fewer than two energy counter readings in the {phase.value} window",
        )
    else:
        delta_j = counted[-1].energy_j - counted[0].energy_j
        counter_span_s = counted[-1].time_s - counted[0].time_s
        if delta_j == 0:
            missing("counter_energy_j", f"counter did not advance within {counter_span_s:.2f} s")
        elif delta_j < 0:
            missing("counter_energy_j", f"counter went backwards by {-delta_j:.3f} J (driver reloaded?)")
        else:
            counter_energy_j = delta_j
            if window_s and counter_span_s < window_s * 0.99:
                notes.append(
                    f"the energy counter covers {counter_span_s:.2f} s of the {window_s:.2f} s window "
                    "(readings missing at its ends)"
                )

    # Energy from integrating power over time (trapezoid; a missing reading is bridged by its neighbours).
    powered = [(s.time_s, s.power_w) for s in window if s.power_w is not None]
    integrated_energy_j = None
    integrated_span_s = None
    mean_power_w = None
    if len(powered) < 2 or powered[-1][0] <= powered[0][0]:
        why = source_reasons.get("power_w") or source_why
        text = f"fewer than two power readings in the {phase.value} window"
        missing("integrated_energy_j", f"{text}: {why}" if why else text)
        missing("mean_power_w", reasons["integrated_energy_j"])
    else:
        integrated_energy_j = _trapezoid(powered)
        integrated_span_s = powered[-1][0] - powered[0][0]
        mean_power_w = integrated_energy_j / integrated_span_s
    tagged_powers = [s.power_w for s in tagged if s.power_w is not None]
    peak_power_w = max(tagged_powers) if tagged_powers else None
    if peak_power_w is None:
        missing("peak_power_w", f"no power reading among the {phase.value} samples")
    power_sources = tuple(sorted({s.power_source for s in window if s.power_source}))
    if POWER_SOURCE_NVML_AVERAGE in power_sources:
        notes.append(
            "power is nvmlDeviceGetPowerUsage, a 1 s average on Ampere and newer: the integral lags and "
            "smooths the load; the energy counter is the better figure"
        )

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
        missing("energy_j", f"{reasons['counter_energy_j']}; {reasons['integrated_energy_j']}")
        missing("energy_source", reasons["energy_j"])

    idle_power_w = None
    if not idle_baseline:
        missing("idle_power_w", "idle baseline not requested")
    else:
        idle = [s.power_w for s in samples if s.phase == PowerPhase.IDLE and s.power_w is not None]
        if idle:
            idle_power_w = statistics.fmean(idle)
        else:
            missing("idle_power_w", "no idle sample with a power reading")
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
