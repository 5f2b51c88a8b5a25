"""A worker process's stdout and stderr, capped: the worker writes them to a pipe, and the runner copies what arrives to
its own stderr (its log) up to MAX_WORKER_OUTPUT_BYTES, then drops the rest and says how much in one line once the
worker's output ends. A plug-in that prints gigabytes costs its worker's time, never the runner's disk; and a worker
never blocks on a full pipe that nobody reads (an embedded runner's stdout, read once for its address)."""

from __future__ import annotations

import os
import threading

from .limits import MAX_WORKER_OUTPUT_BYTES

STDOUT_FD, STDERR_FD = 1, 2
_CHUNK_BYTES = 1 << 16
# How long a closing worker's last output gets to reach the log.
_DRAIN_S = 2.0


def redirect_output(writer) -> None:
    """In the worker, first thing: its stdout and stderr (the file descriptors: C code's writes too) go to `writer`,
    the pipe's write end (a multiprocessing Connection)."""
    for fd in (STDOUT_FD, STDERR_FD):
        os.dup2(writer.fileno(), fd)
    writer.close()


class CappedCopy:
    """In the runner: a thread copying the pipe's read end (`reader`, a Connection) to this process's stderr, up to
    `cap_bytes` in all."""

    def __init__(self, reader, what: str, cap_bytes: int = MAX_WORKER_OUTPUT_BYTES) -> None:
        self._reader, self._what, self._cap_bytes = reader, what, cap_bytes
        self._thread = threading.Thread(target=self._copy, name="fwbench-worker-output", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        copied = dropped = 0
        fd = self._reader.fileno()
        while chunk := os.read(fd, _CHUNK_BYTES):
            kept = chunk[: max(0, self._cap_bytes - copied)]
            _write(kept)
            copied += len(kept)
            dropped += len(chunk) - len(kept)
        self._reader.close()
        if dropped:
            _write(
                f"\n[fwbench] {self._what}: {dropped} bytes of its output dropped past {self._cap_bytes} bytes "
                "(MAX_WORKER_OUTPUT_BYTES)\n".encode()
            )

    def finish(self) -> None:
        """Wait briefly for the last of the output: call once the worker and its tree have ended."""
        self._thread.join(_DRAIN_S)


def _write(data: bytes) -> None:
    """All of `data` to this process's stderr; a stderr that is gone drops it (the copy reads on, so that the worker
    never blocks)."""
    try:
        while data:
            data = data[os.write(STDERR_FD, data) :]
    except OSError:
        pass
