"""Fuzzing what a store reads: its store.json, a run's manifest and configuration, its Parquet frames, and a bundle's
archive (odd member names, links, folders, FIFOs, sizes, a cut-short file). Reading a store, or adding a bundle to
one, gives a result or the store's own refusal (a damaged run, a StoreFormatError, a UsageError naming the bundle),
never a traceback, and writes nothing outside the scratch folder."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.store_runs import run_frames

from fwbench_aggregator.app.bundle import add_to_store
from fwbench_aggregator.app.errors import UsageError
from fwbench_aggregator.store.bundle import INDEX_NAME, write_bundle
from fwbench_aggregator.store.config_keys import runs_by_config, unread_runs_of
from fwbench_aggregator.store.migrations import StoreFormatError
from fwbench_aggregator.store.results_store import ResultStore

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# A store's JSON as a fuzzer writes it: any JSON, objects with the keys the store reads, or any bytes.
STORE_KEYS = ("store_format", "config_key", "files", "manifest_sha256", "status", "code", "kept_apart_from")
JSON_BYTES = st.one_of(
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(STORE_KEYS), JSON_VALUES, max_size=5).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.integers(1, 3000).map(lambda n: b"[" * n),
)


def read_everything(root: Path) -> None:
    """Every read a report, a resume and store check make."""
    try:
        store = ResultStore(root)
    except StoreFormatError:
        return
    store.damaged()
    for name in ("summary", "steps", "power"):
        store.load(name)
    store.configs()
    runs_by_config(store)
    unread_runs_of(store, ["5eed5eed5eed5eed"])
    for key in store.keys():
        store.manifest(key)
        store.config(key)


def a_run(root: Path, key: str = "5eed5eed5eed5eed") -> Path:
    ResultStore(root).append(key, {"runner": "torch"}, run_frames("torch", 0.01), {"host": "x"})
    return root / "runs" / key


def written_outside(scratch: Path, before: set[Path]) -> set[Path]:
    return {p for p in scratch.parent.iterdir()} - before


@FUZZ
@given(data=JSON_BYTES)
def test_any_store_json_reads_or_is_refused_by_name(data):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        a_run(root)
        (root / "store.json").write_bytes(data)
        read_everything(root)


@FUZZ
@given(name=st.sampled_from(["manifest.json", "config.json"]), data=JSON_BYTES, unsealed=st.booleans())
def test_any_run_json_reads_or_leaves_its_run_out(name, data, unsealed):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        folder_of_run = a_run(root)
        if unsealed:  # a run from before checksums: its JSON is taken as it is
            (folder_of_run / "manifest.json").write_text("{}")
        (folder_of_run / name).write_bytes(data)
        read_everything(root)


_CELLS = st.none() | st.booleans() | st.integers(-(2**62), 2**62) | st.floats() | st.text(max_size=6)
FRAMES = st.dictionaries(
    st.sampled_from(["run_key", "runner", "status", "median_step_time_s", "step_time_s", "warmup", "model", "x"]),
    st.sampled_from(["int", "float", "text", "bool", "mixed"]),
    max_size=6,
)


def _column(kind: str, rows: int, draw_cells) -> list:
    if kind == "mixed":
        return [str(c) for c in draw_cells]
    return {
        "int": [i for i in range(rows)],
        "float": [i / 3 for i in range(rows)],
        "bool": [i % 2 == 0 for i in range(rows)],
        "text": [f"t{i}" for i in range(rows)],
    }[kind]


@FUZZ
@given(
    frame=FRAMES,
    rows=st.integers(0, 3),
    cells=st.lists(_CELLS, min_size=3, max_size=3),
    name=st.sampled_from(["summary", "steps", "power", "model_facts"]),
    cut=st.integers(0, 400),
)
def test_any_parquet_frame_reads_or_leaves_its_run_out(frame, rows, cells, name, cut):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        folder_of_run = a_run(root)
        (folder_of_run / "manifest.json").write_text("{}")  # unsealed, so the frame itself is parsed
        table = pd.DataFrame({column: _column(kind, rows, cells[:rows]) for column, kind in frame.items()})
        buffer = io.BytesIO()
        table.to_parquet(buffer, index=False)
        data = buffer.getvalue()
        (folder_of_run / f"{name}.parquet").write_bytes(data[:cut] if cut < len(data) and cut % 2 else data)
        read_everything(root)


MEMBER_NAMES = st.one_of(
    st.sampled_from(
        [
            "runs/aaaa/summary.parquet",
            "runs/aaaa/config.json",
            "runs/aaaa/manifest.json",
            INDEX_NAME,
            "runs/aaaa",
            "runs",
            "../x",
            "/tmp/x",
            "runs/aaaa/../../x",
            "runs/a a/config.json",
            "runs/aaaa/x.txt",
            "runs/aaaa/./summary.parquet",
            "runs//aaaa/config.json",
            ".",
            "runs/aaaa/steps.parquet/x",
        ]
    ),
    st.text(min_size=1, max_size=20),
)
KINDS = st.sampled_from(
    [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE]
)
MEMBERS = st.lists(
    st.tuples(MEMBER_NAMES, KINDS, st.binary(max_size=40), st.sampled_from(["", "/etc/passwd", "../x"])), max_size=5
)


def fuzzed_bundle(good: Path, out: Path, members, keep_good: bool, cut: int) -> Path:
    with tarfile.open(good) as original, tarfile.open(out, "w:gz") as bundle:
        if keep_good:
            for member in original:
                bundle.addfile(member, original.extractfile(member))
        for name, kind, data, target in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            bundle.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    if cut:
        out.write_bytes(out.read_bytes()[:-cut])
    return out


@FUZZ
@given(members=MEMBERS, keep_good=st.booleans(), cut=st.sampled_from([0, 0, 1, 20, 200]))
def test_any_bundle_is_added_or_refused_and_writes_nothing_outside_the_store(members, keep_good, cut):
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder) / "scratch"
        scratch.mkdir()
        source = ResultStore(scratch / "source")
        source.append("aaaa", {"runner": "torch"}, run_frames("torch", 0.01), {})
        good = write_bundle(source, source.keys(), scratch / "good.tar.gz").path
        bundle = fuzzed_bundle(good, scratch / "fuzzed.tar.gz", members, keep_good, cut)
        before = set(Path(folder).iterdir())
        try:
            added = add_to_store(scratch / "home", bundle)
        except UsageError:
            added = None
        assert set(Path(folder).iterdir()) == before, "nothing written beside the scratch folder"
        assert not [p for p in scratch.rglob("*") if p.is_symlink()], "no link unpacked"
        home = ResultStore(scratch / "home")
        assert not home.damaged() and not home.partials()
        if added is not None:
            assert home.keys() == set(added.added) | set(added.identical) | set(added.kept_apart.values())
        read_everything(scratch / "home")
