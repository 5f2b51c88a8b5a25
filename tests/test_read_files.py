"""Every file the aggregator reads is bounded before it is parsed (base.read_files): regular files only, opened without
waiting (a FIFO never blocks a reader), at most so many bytes, and JSON nested at most MAX_JSON_DEPTH deep, each
refusal naming the file (and the line, for nesting). A store's JSON that fails these is a named damaged file; a
bundle's index, a refused bundle (exit 2)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
from pathlib import Path

import pytest
from support.cli import fwbench_in_process
from support.store_runs import run_frames

from fwbench_aggregator.base.read_files import MAX_JSON_DEPTH, UnreadableFile, parse_json, read_json, read_regular_text
from fwbench_aggregator.store import lock
from fwbench_aggregator.store.results_store import ResultStore

QUICK_S = 5.0
DEEP = "[" * 5000 + "]" * 5000  # past Python's recursion limit: a RecursionError where it is parsed unbounded


def finishes(call) -> list:
    """What `call` returned, having asserted it ended within QUICK_S (a read that blocks on a FIFO would not)."""
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(call()), daemon=True)
    reader.start()
    reader.join(QUICK_S)
    assert not reader.is_alive(), "the read blocked"
    return outcome


def test_only_a_regular_file_is_read_within_its_size(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 101)
    (tmp_path / "latin").write_bytes(b"ok\n\xe9\n")

    def refusal(path: Path) -> str:
        with pytest.raises(UnreadableFile) as caught:
            read_regular_text(path, 100, "a test file")
        return str(caught.value)

    assert "fifo (a test file) is not a regular file" in finishes(lambda: refusal(tmp_path / "fifo"))[0]
    assert "is not a regular file" in refusal(tmp_path)
    assert "larger than 100 bytes" in refusal(tmp_path / "big")
    assert "latin, line 2 (a test file): not UTF-8 (byte 0xe9)" in refusal(tmp_path / "latin")
    (tmp_path / "link").symlink_to(tmp_path / "big")
    with pytest.raises(UnreadableFile, match="a symbolic link"):
        read_regular_text(tmp_path / "link", 1000, "a test file", follow_links=False)


def test_json_nesting_is_bounded_naming_the_line(tmp_path):
    assert parse_json('{"a": "[[[[", "b": [[1]]}', "w") == {"a": "[[[[", "b": [[1]]}  # brackets in strings are text
    with pytest.raises(UnreadableFile, match=rf"deep.json \(a test file\), line 3: nested more than {MAX_JSON_DEPTH}"):
        (tmp_path / "deep.json").write_text('{\n"a":\n' + DEEP + "}")
        read_json(tmp_path / "deep.json", 1 << 20, "a test file")
    with pytest.raises(UnreadableFile, match="not JSON"):
        parse_json("{", "w")


def a_store(root: Path) -> ResultStore:
    store = ResultStore(root)
    store.append("aaaa", {"runner": "torch"}, run_frames("torch", 0.010), {})
    store.append("bbbb", {"runner": "tensorflow"}, run_frames("tensorflow", 0.012), {})
    return ResultStore(root)


def checked(store: Path) -> str:
    """`fwbench store check`'s output, having asserted it named damage (exit 1), once reading had not blocked."""
    finishes(lambda: ResultStore(store).damaged())
    done = fwbench_in_process("store", "check", "--store", str(store), columns=400)
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output
    return " ".join(done.output.split())


def test_a_fifo_or_a_deep_json_in_a_run_is_a_named_damaged_file(tmp_path):
    a_store(tmp_path / "store")
    runs = tmp_path / "store" / "runs"
    (runs / "aaaa" / "manifest.json").unlink()
    os.mkfifo(runs / "aaaa" / "manifest.json")
    (runs / "bbbb" / "config.json").write_text("{\n" + '"a": ' + DEEP + "}")
    said = checked(tmp_path / "store")
    assert "aaaa/manifest.json: a FIFO, not a regular file" in said
    assert f"bbbb/config.json (a results store's JSON), line 2: nested more than {MAX_JSON_DEPTH} levels deep" in said
    assert ResultStore(tmp_path / "store").keys() == set()


def test_a_deep_store_json_is_damage_not_a_crash(tmp_path):
    a_store(tmp_path / "store")
    (tmp_path / "store" / "store.json").write_text(DEEP)
    said = checked(tmp_path / "store")
    assert "store.json (a results store's JSON), line 1: nested more than" in said
    assert ResultStore(tmp_path / "store").keys() == {"aaaa", "bbbb"}


def test_a_bundle_whose_index_nests_too_deep_is_refused_by_name(tmp_path):
    bundle = tmp_path / "deep.fwbench.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        data = DEEP.encode()
        info = tarfile.TarInfo("fwbench-bundle.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    done = fwbench_in_process("store", "add", str(bundle), "--store", str(tmp_path / "store"), columns=400)
    said = " ".join(done.output.split())
    assert done.exit_code == 2 and "Traceback" not in said, said
    assert f"{bundle}: fwbench-bundle.json, line 1: nested more than {MAX_JSON_DEPTH} levels deep" in said


def test_a_writer_lock_holding_deep_json_says_an_unnamed_writer(tmp_path):
    (tmp_path / "writer.lock").write_text(DEEP)
    assert lock._holder_text(tmp_path / "writer.lock") == "another writer (that has not said who yet)"
    (tmp_path / "writer.lock").write_text(json.dumps({"pid": 1, "host": "h", "command": "c", "since": "s"}))
    assert lock._holder_text(tmp_path / "writer.lock") == "pid 1 on h (c), since s"
