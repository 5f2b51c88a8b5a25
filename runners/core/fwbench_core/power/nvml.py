"""One GPU through NVML for one run: nvidia-ml-py loaded lazily (it may be absent), NVML initialised at the first open
and shut down at the last close, and the device's handle shared by whoever reads the GPU during the run (its power
source and its device-state reader), so that a run opens one NVML session, not one per reader."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# NVML return codes that mean "this device or driver never has it", as opposed to a failed read:
# INVALID_ARGUMENT is what a driver older than a field id answers for it.
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_NEVER = {NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND}


def load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py; imported here so that the core works where it is absent

    return pynvml


@dataclass(frozen=True)
class Missed:
    """Why one NVML reading gave nothing; `never` where the device, driver or package never has it."""

    message: str
    never: bool


class NvmlSession:
    """`open()` returns whether the GPU can be read (else `unavailable_reason`); every open is matched by one
    `close()`. `attempt(read)` calls one NVML reading with the device's handle."""

    def __init__(self, index: int, nvml_module: Any = None) -> None:
        self.index = index
        self.nvml = nvml_module
        self.handle: Any = None
        self.unavailable_reason: str | None = None
        self._opens = 0
        self._initialized = False
        self._lock = threading.Lock()  # the power sampler opens from its caller's thread, the reader from the run's

    def open(self) -> bool:
        with self._lock:
            self._opens += 1
            if self._opens == 1:
                self._initialize()
            return self.handle is not None

    def close(self) -> None:
        with self._lock:
            if self._opens == 0:
                return
            self._opens -= 1
            if self._opens == 0:
                self._shut_down()

    def attempt(self, read: Callable[[Any], Any]) -> tuple[Any, Missed | None]:
        """`read(handle)`'s value, or None and why: an nvidia-ml-py too old for the call, or NVML's error."""
        try:
            return read(self.handle), None
        except AttributeError as error:
            return None, Missed(f"nvidia-ml-py lacks it: {error}", never=True)
        except self.nvml.NVMLError as error:
            return None, Missed(f"NVML: {error}", never=getattr(error, "value", None) in NVML_NEVER)

    def _initialize(self) -> None:
        self.unavailable_reason = None
        if self.nvml is None:
            try:
                self.nvml = load_pynvml()
            except ImportError:
                self.unavailable_reason = "nvidia-ml-py not installed"
                return
        try:
            self.nvml.nvmlInit()
            self._initialized = True
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(self.index)
        except self.nvml.NVMLError as error:
            self.unavailable_reason = f"NVML: {error} (gpu:{self.index})"
            self._shut_down()

    def _shut_down(self) -> None:
        self.handle = None
        if self._initialized:
            self._initialized = False
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass  # best effort; NVML counts inits and shutdowns per process
