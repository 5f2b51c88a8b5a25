"""A results bundle carries a store's runs to another store as one file: every run arrives with the same figures,
a run the store holds already is skipped and counted, a run whose files were changed on the way is refused by name
while the rest are added, and a file that holds anything but runs is refused whole before anything is written."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from support.cli import fwbench_in_process
from support.store_runs import run_frames

from fwbench_aggregator.app.bundle import add_to_store, bundle_store
from fwbench_aggregator.app.errors import UsageError
from fwbench_aggregator.store.bundle import INDEX_NAME, add_bundle, write_bundle
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.selection import Selection


def three_runs(root: Path) -> ResultStore:
    store = ResultStore(root)
    for key, runner, compare, median_s in (
        ("aaaa", "torch", "c1", 0.010),
        ("bbbb", "tensorflow", "c1", 0.012),
        ("cccc", "torch", "c2", 0.011),
    ):
        store.append(key, {"runner": runner, "compare": compare}, run_frames(runner, median_s), {"host": "gpu-box"})
    return ResultStore(root)


def figures(store: ResultStore) -> dict:
    return {
        key: (
            store.config(key),
            store.manifest(key),
            store.load("summary").query("run_key == @key").to_dict("records"),
            store.load("steps").query("run_key == @key").to_dict("records"),
        )
        for key in sorted(store.keys())
    }


def test_a_bundle_added_to_an_empty_store_carries_every_run_with_its_figures_and_twice_adds_nothing(tmp_path):
    source = three_runs(tmp_path / "gpu-store")
    written = write_bundle(source, source.keys(), tmp_path / "runs.fwbench.tar.gz")
    assert written.runs == 3 and written.size_bytes > 0
    home = ResultStore(tmp_path / "home")
    added = add_bundle(home, written.path)
    assert sorted(added.added) == ["aaaa", "bbbb", "cccc"] and not added.identical and not added.refused
    assert figures(ResultStore(tmp_path / "home")) == figures(source)
    assert not ResultStore(tmp_path / "home").damaged()

    again = add_bundle(ResultStore(tmp_path / "home"), written.path)
    assert (again.added, sorted(again.identical), again.refused) == ([], ["aaaa", "bbbb", "cccc"], {})


def test_one_compares_runs_are_bundled_alone(tmp_path):
    three_runs(tmp_path / "store")
    written = bundle_store(tmp_path / "store", tmp_path / "c2.tar.gz", Selection(compare="c2"))
    assert written.runs == 1
    with tarfile.open(written.path) as tar:
        assert {Path(n).parts[1] for n in tar.getnames() if n != INDEX_NAME} == {"cccc"}


def tampered(bundle: Path, out: Path, change) -> Path:
    """A copy of `bundle` with each member's bytes passed through change(name, data)."""
    with tarfile.open(bundle) as source, tarfile.open(out, "w:gz") as target:
        for member in source:
            data = change(member.name, source.extractfile(member).read())
            member.size = len(data)
            target.addfile(member, io.BytesIO(data))
    return out


def test_a_run_changed_on_the_way_is_refused_by_name_and_the_others_added(tmp_path):
    source = three_runs(tmp_path / "store")
    bundle = write_bundle(source, source.keys(), tmp_path / "runs.tar.gz").path

    def flip(name: str, data: bytes) -> bytes:
        if name == "runs/bbbb/steps.parquet":
            middle = len(data) // 2
            return data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]
        return data

    added = add_bundle(ResultStore(tmp_path / "home"), tampered(bundle, tmp_path / "bad.tar.gz", flip))
    assert sorted(added.added) == ["aaaa", "cccc"]
    assert list(added.refused) == ["bbbb"] and "steps.parquet" in added.refused["bbbb"]
    home = ResultStore(tmp_path / "home")
    assert home.keys() == {"aaaa", "cccc"} and not home.damaged() and not home.partials()


@pytest.mark.parametrize("name", ["../outside", "runs/aaaa/../../outside.parquet", "runs/aaaa/notes.txt", "/etc/x"])
def test_a_bundle_holding_anything_but_runs_is_refused_whole_before_anything_is_written(tmp_path, name):
    source = three_runs(tmp_path / "store")
    bundle = write_bundle(source, source.keys(), tmp_path / "runs.tar.gz").path
    with tarfile.open(bundle) as original, tarfile.open(tmp_path / "bad.tar.gz", "w:gz") as bad:
        for member in original:
            bad.addfile(member, original.extractfile(member))
        extra = tarfile.TarInfo(name)
        extra.size = 2
        bad.addfile(extra, io.BytesIO(b"hi"))
    with pytest.raises(UsageError) as info:
        add_to_store(tmp_path / "home", tmp_path / "bad.tar.gz")
    assert f"holds {name!r}, which is no run file" in str(info.value)
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())
    assert not (tmp_path / "outside").exists() and not (tmp_path / "outside.parquet").exists()


def test_the_commands_bundle_and_add_and_say_what_they_did(tmp_path):
    three_runs(tmp_path / "store")
    bundle = tmp_path / "runs.tar.gz"
    made = fwbench_in_process("store", "bundle", str(bundle), "--store", str(tmp_path / "store"))
    assert made.exit_code == 0, made.output
    assert f"bundled 3 entries into {bundle}" in " ".join(made.output.split())
    added = fwbench_in_process("store", "add", str(bundle), "--store", str(tmp_path / "home"))
    assert added.exit_code == 0, added.output
    assert (
        f"added 3 entries to {tmp_path / 'home'}; 0 already there, identical, skipped; 0 kept apart under a new id; 0 refused"
        in " ".join(added.output.split())
    )
    not_a_bundle = tmp_path / "notes.txt"
    not_a_bundle.write_text("hello")
    refused = fwbench_in_process("store", "add", str(not_a_bundle), "--store", str(tmp_path / "home"))
    assert refused.exit_code == 2 and "not a bundle" in refused.output and "Traceback" not in refused.output


def unsealed(bundle: Path, out: Path) -> Path:
    """The bundle with its runs' checksums taken out of their manifests and every median step time made 1000 times
    longer: what a hand-edited bundle looks like."""
    import json

    import pandas as pd

    def change(name: str, data: bytes) -> bytes:
        if name.endswith("manifest.json"):
            manifest = json.loads(data)
            return json.dumps({k: v for k, v in manifest.items() if k not in ("files", "manifest_sha256")}).encode()
        if name.endswith("summary.parquet"):
            frame = pd.read_parquet(io.BytesIO(data))
            buffer = io.BytesIO()
            frame.assign(median_step_time_s=frame["median_step_time_s"] * 1000).to_parquet(buffer, index=False)
            return buffer.getvalue()
        return data

    return tampered(bundle, out, change)


def test_a_run_without_checksums_is_refused_and_counted_never_added(tmp_path):
    source = three_runs(tmp_path / "store")
    bundle = unsealed(write_bundle(source, source.keys(), tmp_path / "runs.tar.gz").path, tmp_path / "edited.tar.gz")
    added = fwbench_in_process("store", "add", str(bundle), "--store", str(tmp_path / "home"))
    said = " ".join(added.output.split())
    assert added.exit_code == 1 and "added 0 entries" in said and "3 refused" in said
    assert "aaaa: manifest.json: records no checksums (files, manifest_sha256)" in said
    assert ResultStore(tmp_path / "home").keys() == set()


def zeros_bundle(source: ResultStore, out: Path, size_bytes: int) -> Path:
    """A bundle of `source`'s runs with one more run file of `size_bytes` zeros: it packs a thousandfold."""
    bundle = write_bundle(source, source.keys(), out.with_suffix(".base.tar.gz")).path

    class Zeros:
        def __init__(self, left: int) -> None:
            self.left = left

        def read(self, size: int = -1) -> bytes:
            size = self.left if size < 0 else min(size, self.left)
            self.left -= size
            return bytes(size)

    with tarfile.open(bundle) as original, tarfile.open(out, "w:gz") as bomb:
        for member in original:
            bomb.addfile(member, original.extractfile(member))
        big = tarfile.TarInfo("runs/aaaa/big.parquet")
        big.size = size_bytes
        bomb.addfile(big, Zeros(size_bytes))
    return out


def test_a_bundle_that_unpacks_to_far_more_than_it_weighs_is_refused_before_anything_is_written(tmp_path):
    source = three_runs(tmp_path / "store")
    bomb = zeros_bundle(source, tmp_path / "bomb.tar.gz", 64 * 2**20)
    assert bomb.stat().st_size < 2**20
    added = fwbench_in_process("store", "add", str(bomb), "--store", str(tmp_path / "home"))
    said = " ".join(added.output.split())
    assert added.exit_code == 2 and "unpacks to more than 100 times its size" in said and "Traceback" not in said
    assert not (tmp_path / "home").exists(), "refused from its headers, before the store is made or locked"


def test_the_bytes_are_counted_as_they_are_unpacked_whatever_the_headers_say(tmp_path, monkeypatch):
    source = three_runs(tmp_path / "store")
    bundle = write_bundle(source, source.keys(), tmp_path / "runs.tar.gz").path
    lying = tarfile.TarFile.extractfile

    def longer(self, member):  # a member that unpacks to far more than its header says
        stream = lying(self, member)
        return (
            io.BufferedReader(io.BytesIO(stream.read() + bytes(200 * bundle.stat().st_size)))
            if (member.name.endswith("steps.parquet"))
            else stream
        )

    monkeypatch.setattr(tarfile.TarFile, "extractfile", longer)
    with pytest.raises(UsageError, match="unpacks to more than 100 times its size"):
        add_to_store(tmp_path / "home", bundle)
    home = ResultStore(tmp_path / "home")
    assert not home.keys() and not home.partials()
