"""Sweep scheduling: one device's runs never overlap; different devices' runs do."""

import threading
import time

import pytest

from fwbench_aggregator.run.scheduler import device_group, run_grouped


@pytest.mark.quiet  # 0.4 s of sleeps against a 0.7 s bound
def test_same_device_serialised_different_devices_in_parallel():
    spans = {}

    def run_one(job):
        start = time.monotonic()
        time.sleep(0.2)
        spans[job] = (start, time.monotonic())

    jobs = [
        (device_group("127.0.0.1:5001", "gpu:0"), "a1"),
        (device_group("127.0.0.1:5002", "gpu:0"), "a2"),
        (device_group("127.0.0.2:5001", "gpu:0"), "b1"),
        (device_group("127.0.0.2:5001", "gpu:0"), "b2"),
    ]
    started = time.monotonic()
    run_grouped(jobs, run_one, threading.Event())
    assert time.monotonic() - started < 0.7  # two groups of two 0.2 s jobs, at once
    overlap = lambda x, y: spans[x][0] < spans[y][1] and spans[y][0] < spans[x][1]
    assert not overlap("a1", "a2") and not overlap("b1", "b2")  # one host and device: one after the other
    assert overlap("a1", "b1") or overlap("a2", "b2")  # different hosts: at the same time


def test_runners_on_one_machine_share_its_devices_whatever_their_addresses():
    # Two containers on one host: different host names, one kernel boot id, one GPU seen under two indices.
    torch = {"host_id": "boot-1", "gpu:0.uuid": "GPU-aaa", "gpu:1.uuid": "GPU-bbb"}
    tensorflow = {"host_id": "boot-1", "gpu:0.uuid": "GPU-bbb"}
    assert device_group("torch:50051", "gpu:1", torch) == device_group("tensorflow:50051", "gpu:0", tensorflow)
    assert device_group("torch:50051", "gpu:0", torch) != device_group("tensorflow:50051", "gpu:0", tensorflow)
    assert device_group("torch:50051", "cpu", torch) == device_group("tensorflow:50051", "cpu:0", tensorflow)
    assert device_group("a:1", "cpu:0", {"host_id": "boot-1"}) != device_group("b:1", "cpu:0", {"host_id": "boot-2"})


def test_no_new_job_starts_once_stopped():
    stop = threading.Event()
    ran = []

    def run_one(job):
        ran.append(job)
        stop.set()

    run_grouped([("g", 1), ("g", 2), ("g", 3)], run_one, stop)
    assert ran == [1]


def test_an_error_in_a_job_reaches_the_caller():
    def run_one(job):
        raise RuntimeError(f"job {job} broke")

    try:
        run_grouped([("g", 1)], run_one, threading.Event())
    except RuntimeError as error:
        assert "job 1 broke" in str(error)
    else:
        raise AssertionError("the error was lost")
