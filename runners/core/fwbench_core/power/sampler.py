"""The power sampler: a thread of its own beside the training loop, reading one source at a fixed rate."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from .sources import PowerPhase, PowerSample, Telemetry

DEFAULT_RATE_HZ = 20.0
MIN_RATE_HZ = 1.0
MAX_RATE_HZ = 100.0

# How long stop() waits for a read in progress; NVML calls can hang when a GPU falls off the bus.
STOP_TIMEOUT_S = 5.0


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
            return sample_rate_hz(self._samples)

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


def sample_rate_hz(samples: Sequence[PowerSample]) -> float | None:
    if len(samples) < 2 or samples[-1].time_s <= samples[0].time_s:
        return None
    return (len(samples) - 1) / (samples[-1].time_s - samples[0].time_s)
