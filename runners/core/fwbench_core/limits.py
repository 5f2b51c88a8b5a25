"""Every bound a request's numbers are checked against, in one place: validation reads them to refuse a request,
timing and serving to cap what they hold, and tests/test_input_limits.py holds the aggregator's own checks (it
installs no runner core) equal to them. A bound says how far a number may go, not what it is by default."""

from __future__ import annotations

from .errors import InvalidArgument

MAX_BATCH_SIZE = 65536
# A parity reference holds a batch's input and output: a few samples show the same network.
MAX_REFERENCE_BATCH_SIZE = 64
MAX_WARMUP_STEPS = 10_000
MAX_MEASURED_STEPS = 1_000_000
# The seeds both frameworks honour: keras.utils.set_random_seed seeds NumPy, which takes 0..2**32-1
# (torch.manual_seed takes more).
MAX_SEED = 2**32 - 1
MAX_THREADS = 1024
MAX_MEASURE_S = 86_400.0
MAX_IDLE_BASELINE_S = 60.0
MAX_DISTRIBUTED_TIMEOUT_S = 3600.0
MAX_NODES = 1024
MAX_REUSE_KEY_LENGTH = 128
# A serving load: measured queries of one run, queries per second, and how long a dynamic batch may wait to fill.
MAX_QUERY_COUNT = 1_000_000
MAX_TARGET_QPS = 1e6
MAX_BATCH_TIMEOUT_MS = 60_000.0
# Tokens a generation request adds to each prompt: the first comes from the prefill, so decoding needs two.
MIN_NEW_TOKENS = 2
MAX_NEW_TOKENS = 4096


def in_range(field: str, value: int, low: int, high: int) -> int:
    """`value`, or InvalidArgument naming `field` and its range."""
    if not low <= value <= high:
        raise InvalidArgument(f"{field} must be between {low} and {high}, got {value}")
    return value


# What one worker process (a run's, a plug-in's check) may write to its stdout and stderr, its log lines included: a
# user's prints past it are dropped, and one line in the runner's log says how much.
MAX_WORKER_OUTPUT_BYTES = 1 << 20
