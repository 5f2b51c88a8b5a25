"""Facts about the host that every runner reports the same way."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from .choices import DeviceKind
from .devices import Device, DeviceRef


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


# Set in a runner's container: its own image (by compose.yaml) and the framework image it was built on (by its Dockerfile);
# the digests of both by `fwbench versions up`, which reads them with `docker image inspect` (docs/versions.md).
IMAGE_ENV = "FWBENCH_IMAGE"
BASE_IMAGE_ENV = "FWBENCH_BASE_IMAGE"
IMAGE_DIGEST_ENV = "FWBENCH_IMAGE_DIGEST"
BASE_IMAGE_DIGEST_ENV = "FWBENCH_BASE_IMAGE_DIGEST"


BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def host_id() -> str:
    """The running kernel's boot id: the same for every process and container on one machine, so the
    aggregator can tell which runners share hardware whatever their addresses; the host name elsewhere."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return platform.node()


# The sha256 of the lock an environment was installed from, so that a store can tell two environments of one
# framework version apart: scripts/env_lib.sh and an image's install.sh write it into the environment's prefix; the
# variable overrides it for a runner started by hand.
LOCK_FILE = "fwbench-lock.sha256"
LOCK_ENV = "FWBENCH_ENVIRONMENT_LOCK"


def environment_lock() -> str:
    if os.environ.get(LOCK_ENV):
        return os.environ[LOCK_ENV]
    try:
        return (Path(sys.prefix) / LOCK_FILE).read_text().strip()
    except OSError:
        return ""


def numeric_libraries() -> dict[str, str]:
    """The numpy version and the BLAS it was built with (name and version), which decide the speed of much CPU math;
    empty where numpy is missing or does not say."""
    try:
        import numpy

        blas = numpy.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    except Exception:  # no numpy, or one too old to report its build: say nothing rather than something wrong
        return {}
    return {
        "numpy_version": numpy.__version__,
        "blas": " ".join(str(blas[k]) for k in ("name", "version") if blas.get(k)),
    }


def manifest_options(gpu_count: int) -> dict[str, str]:
    """What the results' manifest needs beyond versions: the machine, the container image, the environment's lock
    and numeric libraries, GPU identities, clocks and power limits."""
    options = {
        "host_id": host_id(),
        "cpu_model": cpu_model_name(),
        "cpu_count": str(os.cpu_count()),
        "environment_lock": environment_lock(),
        **numeric_libraries(),
    }
    for option, env in (
        ("container_image", IMAGE_ENV),
        ("container_base_image", BASE_IMAGE_ENV),
        ("image_digest", IMAGE_DIGEST_ENV),
        ("base_image_digest", BASE_IMAGE_DIGEST_ENV),
    ):
        if os.environ.get(env):
            options[option] = os.environ[env]
    options.update(_nvml_details(gpu_count))
    return options


def _nvml_details(gpu_count: int) -> dict[str, str]:
    """Power limit and clocks of each GPU through NVML; nothing where NVML is missing or refuses."""
    if not gpu_count:
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no package, no driver: the manifest says nothing rather than something wrong
        return {}
    details = {}
    try:
        for index in range(gpu_count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            readings = {
                "uuid": lambda handle=handle: pynvml.nvmlDeviceGetUUID(handle),
                "power_limit_w": lambda handle=handle: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
                "sm_clock_mhz": lambda handle=handle: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "sm_clock_max_mhz": lambda handle=handle: pynvml.nvmlDeviceGetMaxClockInfo(
                    handle, pynvml.NVML_CLOCK_SM
                ),
                "memory_clock_max_mhz": lambda handle=handle: pynvml.nvmlDeviceGetMaxClockInfo(
                    handle, pynvml.NVML_CLOCK_MEM
                ),
            }
            for name, read in readings.items():
                try:
                    details[f"gpu:{index}.{name}"] = str(read())
                except pynvml.NVMLError as error:
                    details[f"gpu:{index}.{name}"] = f"unavailable: {error}"
    finally:
        pynvml.nvmlShutdown()
    return details


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
    """Peak resident memory of this process: Linux's VmHWM, the high-water mark of its own address space. Not
    ru_maxrss, which a spawned worker inherits from the runner it was forked from before its exec: every worker then
    read at least its runner's peak (a worker of a runner at 816 MiB read 816 MiB). ru_maxrss (KiB) where there is no
    /proc."""
    peak_bytes = _proc_kib_field("/proc/self/status", "VmHWM:")
    if peak_bytes is not None:
        return peak_bytes
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def host_available_memory_bytes() -> int | None:
    """Memory the host can give a process without swapping (Linux's MemAvailable); None where unreadable."""
    return _proc_kib_field("/proc/meminfo", "MemAvailable:")


def _proc_kib_field(path: str, field: str) -> int | None:
    """The bytes of a "FIELD: N kB" line of a /proc file; None where the file or the field cannot be read."""
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
