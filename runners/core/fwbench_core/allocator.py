"""glibc malloc's thresholds, pinned in a runner's process and in every worker process it starts, so that a step's time
does not depend on which process or thread allocated before it.

Left to itself glibc slides its mmap threshold up as large blocks are freed, and returns the top of the main heap to
the kernel once more than the trim threshold is free there: whether a step's tensors come from reused heap memory or
from fresh pages that fault in on every step then depends on the allocations before them. torch mobilenet_v2
inference b8 on a 2-core VM stepped 8.3 ms on a runner's framework thread, and 8.3 or 10.6-11.2 ms in spawned worker
processes of the same runner, by process, the slow ones faulting in pages on every step (a plain torchvision script:
13 ms and 1,700-2,300 faults a step). Pinned, every process steps 8.3-8.9 ms and faults none. TensorFlow's steps did
not move either way. docs/verdict.md, "A worker process's allocator"."""

from __future__ import annotations

import ctypes
import platform

# mallopt's parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's own ceiling for its sliding threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), and the largest mallopt takes:
# blocks up to it come from the heap wherever they are asked for.
MMAP_THRESHOLD_BYTES = 32 << 20
# Free memory kept at a heap's top before any goes back to the kernel: twice the mmap threshold, where glibc's own
# sliding pair ends. Every arena keeps up to this much (TensorFlow's threads use many): at 1 GiB, a TensorFlow runner
# checking parity was killed for memory in CI (8 GB resident), where at 64 MiB gpt2_small's check peaks as unpinned.
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES


def pin_malloc() -> str:
    """Pin the thresholds in this process (idempotent); what was done, as the runner reports it (option "malloc")."""
    name, version = platform.libc_ver()
    if name != "glibc":
        return f"{name or 'unknown C library'}: unchanged"
    libc = ctypes.CDLL(None)  # the process's own C library
    pinned = (
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    )
    if not pinned:
        return f"glibc {version}: unchanged (mallopt refused)"
    return f"glibc {version} mmap_threshold={MMAP_THRESHOLD_BYTES} trim_threshold={TRIM_THRESHOLD_BYTES}"
