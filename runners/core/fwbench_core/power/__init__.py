"""Power and energy of the run's device: telemetry sources, the sampler thread, the energy summary."""

from .energy import EnergySummary, energy_summary, energy_window_s
from .nvml import NvmlSession
from .sampler import DEFAULT_RATE_HZ, MAX_RATE_HZ, MIN_RATE_HZ, PowerSampler, validate_rate_hz
from .sources import (
    NVML_FI_DEV_POWER_INSTANT,
    NvmlGpuSource,
    PowerPhase,
    PowerSample,
    RaplCpuSource,
    Telemetry,
    source_for,
)

__all__ = [
    "DEFAULT_RATE_HZ",
    "MAX_RATE_HZ",
    "MIN_RATE_HZ",
    "NVML_FI_DEV_POWER_INSTANT",
    "EnergySummary",
    "NvmlGpuSource",
    "NvmlSession",
    "PowerPhase",
    "PowerSample",
    "PowerSampler",
    "RaplCpuSource",
    "Telemetry",
    "energy_summary",
    "energy_window_s",
    "source_for",
    "validate_rate_hz",
]
