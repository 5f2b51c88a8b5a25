"""Facts about the host that every runner reports the same way."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from .spec import Device, DeviceKind, DeviceRef


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_device() -> Device:
    try:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory_bytes = 0
    return Device(DeviceRef(DeviceKind.CPU, 0), f"{cpu_model_name()} ({os.cpu_count()} logical cores)", memory_bytes)


def python_version() -> str:
    return platform.python_version()


def gpu_driver_version() -> str:
    """The NVIDIA driver version through NVML, or "" where NVML is not installed or finds no driver."""
    try:
        import pynvml
    except ImportError:
        return ""
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return ""
    return version.decode() if isinstance(version, bytes) else version


def process_peak_rss_bytes() -> int:
    """Peak resident memory of this process (Linux reports ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
