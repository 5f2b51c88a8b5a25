"""A runner pins glibc malloc's thresholds in its own process and in every worker process it starts
(fwbench_core.allocator): a block a step asks for comes from the heap in either, never from pages mapped afresh for
it by one process and not by another."""

from __future__ import annotations

import ctypes
import multiprocessing
import platform

import pytest

from fwbench_core.allocator import MMAP_THRESHOLD_BYTES, pin_malloc
from fwbench_core.devices import RunnerSettings
from fwbench_core.fake import FakeBackend
from fwbench_core.isolation import RunIsolation
from fwbench_core.service import RunnerService
from fwbench_core.worker_process import WorkerProcess

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")

# Above glibc's starting mmap threshold (128 KiB), below the pinned one.
BLOCK_BYTES = 1 << 20
IS_MMAPPED = 0x2  # a chunk's size field (the word before the block) says it was mapped on its own


def block_is_mapped_on_its_own() -> bool:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block = libc.malloc(BLOCK_BYTES)
    try:
        return bool(ctypes.c_size_t.from_address(block - ctypes.sizeof(ctypes.c_size_t)).value & IS_MMAPPED)
    finally:
        libc.free(block)


def report_mapping(stop):
    yield block_is_mapped_on_its_own()


def _report_to(queue) -> None:
    queue.put(block_is_mapped_on_its_own())


def _start_runner_and_report_to(queue) -> None:
    service = RunnerService(FakeBackend(RunnerSettings(1, 1)), isolation=RunIsolation.THREAD)
    queue.put((block_is_mapped_on_its_own(), service.info.options["malloc"], pin_malloc()))


def in_fresh_process(target):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(queue,))
    process.start()
    try:
        return queue.get(timeout=60)
    finally:
        process.join()


def test_a_process_left_alone_maps_a_large_block_on_its_own():
    """The control: without the pin a fresh process's first 1 MiB block gets pages of its own, which fault in anew
    every time a step asks for one."""
    assert in_fresh_process(_report_to) is True


def test_a_worker_process_takes_a_large_block_from_the_heap():
    worker = WorkerProcess()
    try:
        assert list(worker.stream(report_mapping, (), lambda: False)) == [False]
    finally:
        worker.close()


def test_a_runner_pins_its_own_process_and_says_how():
    mapped, reported, again = in_fresh_process(_start_runner_and_report_to)
    assert not mapped
    assert (
        reported.startswith(f"glibc {platform.libc_ver()[1]} ") and f"mmap_threshold={MMAP_THRESHOLD_BYTES}" in reported
    )
    assert again == reported  # pinning again changes nothing


def _peak_to(queue) -> None:
    from fwbench_core.sysinfo import process_peak_rss_bytes

    queue.put(process_peak_rss_bytes())


def test_a_spawned_process_reads_its_own_peak_not_its_parents():
    """Linux carries ru_maxrss across the exec that spawns a worker; the worker's own peak is its address space's."""
    from fwbench_core.sysinfo import process_peak_rss_bytes

    ballast = bytearray(400 << 20)  # this process's peak, far above a bare interpreter's
    try:
        assert process_peak_rss_bytes() >= len(ballast)
        assert in_fresh_process(_peak_to) < len(ballast) / 2
    finally:
        del ballast
