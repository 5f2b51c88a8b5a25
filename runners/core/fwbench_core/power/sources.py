"""Telemetry sources: one device's power, energy counter and load, read on demand.

GPUs are read through NVML (nvidia-ml-py, imported lazily: it may be absent), CPUs through
Linux RAPL counters under /sys/class/powercap. What cannot be read is None with a reason,
never zero and never made up.
"""

from __future__ import annotations

import abc
import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..choices import DeviceKind
from ..devices import DeviceRef
from .nvml import NVML_ERROR_FUNCTION_NOT_FOUND, NVML_NEVER, NvmlSession

# NVML field ids (nvml.h); read as numbers so that an nvidia-ml-py too old to name them still works.
NVML_FI_DEV_POWER_INSTANT = 186

POWER_SOURCE_NVML_INSTANT = "nvml_instant"
POWER_SOURCE_NVML_AVERAGE = "nvml_average"
POWER_SOURCE_RAPL = "rapl"

DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")


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
    power_w: float | None = None
    power_source: str | None = None
    energy_j: float | None = None  # a cumulative counter: only differences mean anything
    gpu_util_pct: float | None = None
    memory_util_pct: float | None = None
    memory_used_bytes: int | None = None
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None


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


class NvmlGpuSource(Telemetry):
    """A GPU through NVML: instantaneous power where the driver has NVML_FI_DEV_POWER_INSTANT, else
    nvmlDeviceGetPowerUsage (a 1 s average on Ampere and newer except GA100), and the energy counter. `nvml` is the
    run's session on the GPU, shared with its device-state reader; without one the source opens its own."""

    def __init__(self, index: int = 0, nvml: NvmlSession | None = None) -> None:
        super().__init__()
        self.index = index
        self.device = str(DeviceRef(DeviceKind.GPU, index))
        self._session = nvml or NvmlSession(index)
        self._open = False
        self.power_source: str | None = None

    def open(self) -> bool:
        self._open = True
        if not self._session.open():
            self.unavailable_reason = self._session.unavailable_reason
            return False
        self.power_source = self._probe_power_source()
        return True

    def close(self) -> None:
        if self._open:
            self._open = False
            self._session.close()

    def _probe_power_source(self) -> str:
        """Instantaneous power if the field reads now; an unsupported field means the averaged call."""
        _, code, message = self._read_instant_power()
        if code is not None and code in NVML_NEVER:
            self._unsupported(
                "power_instant",
                f"NVML_FI_DEV_POWER_INSTANT: {message}; power is nvmlDeviceGetPowerUsage, "
                "a 1 s average on Ampere and newer (except GA100)",
            )
            return POWER_SOURCE_NVML_AVERAGE
        return POWER_SOURCE_NVML_INSTANT

    def _read_instant_power(self) -> tuple[float | None, int | None, str]:
        """(watts, None, "") or (None, NVML return code, message)."""
        nvml = self._session.nvml
        try:
            value = nvml.nvmlDeviceGetFieldValues(self._session.handle, [NVML_FI_DEV_POWER_INSTANT])[0]
        except AttributeError:
            return None, NVML_ERROR_FUNCTION_NOT_FOUND, "nvidia-ml-py has no nvmlDeviceGetFieldValues"
        except nvml.NVMLError as error:
            return None, getattr(error, "value", None), str(error)
        if value.nvmlReturn != 0:
            return None, value.nvmlReturn, self._error_text(value.nvmlReturn)
        return _field_value(value) / 1000.0, None, ""  # milliwatts

    def _error_text(self, code: int) -> str:
        try:
            return str(self._session.nvml.NVMLError(code))
        except Exception:  # the text is for people; a code without one still says which
            return f"NVML error {code}"

    def _call(self, name: str, read: Callable[[Any], Any]) -> Any:
        """One NVML reading of the handle, or None: unsupported fields are not asked again, failed ones are."""
        if name in self._never:
            return None
        value, missed = self._session.attempt(read)
        if missed is not None:
            (self._unsupported if missed.never else self._failed)(name, missed.message)
        return value

    def read(self, time_s: float, phase: PowerPhase) -> PowerSample:
        if self._session.handle is None:
            return PowerSample(time_s, phase, self.device)
        nvml = self._session.nvml
        # Power and energy first: they are what the timestamp is for.
        power_w: float | None = None
        if self.power_source == POWER_SOURCE_NVML_INSTANT:
            power_w, code, message = self._read_instant_power()
            if power_w is None:
                self._failed("power_w", f"NVML: {message}")
        else:
            power_mw = self._call("power_w", lambda handle: nvml.nvmlDeviceGetPowerUsage(handle))
            power_w = None if power_mw is None else power_mw / 1000.0
        energy_mj = self._call("energy_j", lambda handle: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        utilization = self._call("utilization", lambda handle: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = self._call("memory_used_bytes", lambda handle: nvml.nvmlDeviceGetMemoryInfo(handle))
        sm_clock = self._call("sm_clock_mhz", lambda handle: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        temperature = self._call(
            "temperature_c", lambda handle: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
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
        read_uj = [delta for delta in deltas_uj if delta is not None]
        complete = len(read_uj) == len(deltas_uj)
        power_w = None
        if complete and self._previous_s is not None and time_s > self._previous_s:
            power_w = sum(read_uj) / 1e6 / (time_s - self._previous_s)
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


def source_for(
    ref: DeviceRef, nvml: NvmlSession | None = None, powercap_root: Path = DEFAULT_POWERCAP_ROOT
) -> Telemetry:
    """The device's power source: a GPU's through `nvml` (the run's session on it), a CPU's through RAPL."""
    if ref.kind is DeviceKind.GPU:
        return NvmlGpuSource(ref.index, nvml)
    return RaplCpuSource(powercap_root, ref.index)
