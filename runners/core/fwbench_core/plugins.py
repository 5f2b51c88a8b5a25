"""Model plug-ins: a folder with a declaration (model.toml) and one builder module per framework.

A runner finds plug-ins from its own configuration only (--models-dir, $FWBENCH_MODELS_DIR, installed packages'
`fwbench.models` entry points), never from a request: loading code is the operator's decision. A plug-in that
fails to load is reported with its error and left out; the runner serves the rest.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType

from .declaration import DECLARATION_FILE, DeclarationError, read_declaration
from .models import ModelSource, ModelSpec
from .plugin_checks import check_builders
from .plugin_modules import PluginError, builder_file, import_builder
from .safe_read import FileRefused, open_regular_file

MODELS_DIR_ENV = "FWBENCH_MODELS_DIR"
ENTRY_POINT_GROUP = "fwbench.models"
MODELS_DIR_FLAG = "--models-dir"
# What a plug-in folder may hold for its hash to be taken: more is not a model but a data set beside it.
MAX_PLUGIN_FILES = 1000
MAX_PLUGIN_BYTES = 64 << 20
HASH_CHUNK_BYTES = 1 << 20
# How long a plug-in's code may take in each phase the runner waits on (import at start-up, build(), inspection,
# parity): past it, the process running it is stopped and the request fails, naming the plug-in and the phase.
PLUGIN_LIMIT_S = 60.0
MAX_PLUGIN_LIMIT_S = 3600.0


@dataclass(frozen=True)
class PluginLocation:
    """A folder the runner was pointed at, and how: a models folder (one plug-in per subfolder) or one plug-in."""

    path: Path
    origin: str
    error: str = ""  # why it could not even be found (an entry point that fails to load)


@dataclass(frozen=True)
class PluginReport:
    """One plug-in folder as the runner found it: its model, or why it is not served."""

    folder: str
    origin: str
    models: tuple[str, ...] = ()
    content_hash: str = ""
    error: str = ""


def locations(models_dirs: Sequence[str] = (), environ=os.environ, entry_points: bool = True) -> list[PluginLocation]:
    """Where this runner looks for plug-ins: its --models-dir flags, then $FWBENCH_MODELS_DIR (paths joined by
    the OS path separator), then installed packages' entry points (each names a package: its folder)."""
    found = [PluginLocation(Path(d), MODELS_DIR_FLAG) for d in models_dirs]
    found += [PluginLocation(Path(d), MODELS_DIR_ENV) for d in environ.get(MODELS_DIR_ENV, "").split(os.pathsep) if d]
    if entry_points:
        found += _entry_point_locations()
    # One folder named twice (a flag and the variable) is read once: else it would clash with itself.
    seen: set[Path] = set()
    unique = []
    for location in found:
        key = location.path.resolve() if not location.error else location.path
        if key not in seen:
            seen.add(key)
            unique.append(location)
    return unique


def _entry_point_locations() -> list[PluginLocation]:
    found = []
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {entry.name}"
        try:
            module = entry.load()
            found.append(PluginLocation(Path(module.__file__).parent, origin))
        except Exception as error:  # a broken package must not stop the runner: it is named, the others load
            found.append(
                PluginLocation(
                    Path(entry.value),
                    origin,
                    f"entry point {entry.name} ({entry.value}) failed to load: {type(error).__name__}: {error}",
                )
            )
    return found


def plugin_folders(location: PluginLocation) -> list[Path]:
    """The plug-in folders at `location`: itself where it holds a declaration, else its subfolders that do
    (or that hold a builder without one: they are reported, not skipped in silence)."""
    path = location.path
    if (path / DECLARATION_FILE).exists():  # of any kind: the read names one that is no file
        return [path]
    if not path.is_dir():
        raise PluginError(f"{path} ({location.origin}) is not a folder")
    return sorted(
        child
        for child in path.iterdir()
        if child.is_dir()
        and not child.name.startswith((".", "_"))
        and ((child / DECLARATION_FILE).exists() or any(child.glob("build_*.py")))
    )


def content_hash(folder: Path) -> str:
    """sha256 over the plug-in's files (relative path and bytes), caches and hidden files aside: which version
    of the user's model a result ran. A link is followed only where it stays inside the folder (what it reaches is
    hashed under the link's name); one that leads out is refused, since the hash must cover every file that runs.
    Sizes are checked before any file is read, and files are read in chunks."""
    folder = folder.resolve()
    files: list[tuple[Path, Path]] = []  # (as named in the folder, what it reads)
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(folder):
                raise PluginError(
                    f"{path} links to {target}, outside the plug-in folder {folder}; copy what it "
                    "holds into the folder, so that the model's hash covers every file that runs"
                )
            if target.is_dir():
                continue  # its files are hashed where they are
        if path.is_file():
            files.append((relative, path))
        if len(files) > MAX_PLUGIN_FILES:
            raise PluginError(
                f"{folder} holds over {MAX_PLUGIN_FILES} files; a plug-in folder holds code and its declaration"
            )
    sizes = [path.stat().st_size for _, path in files]
    if sum(sizes) > MAX_PLUGIN_BYTES:
        largest = max(zip(sizes, (str(name) for name, _ in files)))
        raise PluginError(
            f"{folder} holds {sum(sizes) >> 20} MiB (the largest file, {largest[1]}, {largest[0] >> 20} "
            f"MiB); a plug-in folder holds at most {MAX_PLUGIN_BYTES >> 20} MiB: code and its declaration"
        )
    digest = hashlib.sha256()
    for (name, path), size in zip(files, sizes):
        digest.update(str(name).encode() + b"\0" + size.to_bytes(8, "big"))
        try:
            stream = open_regular_file(path)  # a file swapped for a FIFO since it was listed never blocks the start
        except FileRefused as error:
            raise PluginError(f"{error}; a plug-in folder holds code and its declaration") from None
        with stream:
            read = 0
            while chunk := stream.read(min(HASH_CHUNK_BYTES, size - read)):
                digest.update(chunk)
                read += len(chunk)
        if read != size:
            raise PluginError(f"{folder / name} changed while it was read; load the plug-in again once it is written")
    return f"sha256:{digest.hexdigest()}"


@dataclass
class LoadedPlugins:
    """What a runner serves from its plug-ins."""

    specs: dict[str, ModelSpec]
    not_offered: dict[str, str]  # declared models this runner does not build, and why
    reports: tuple[PluginReport, ...]


def load_plugins(
    framework: str,
    where: Iterable[PluginLocation],
    taken: dict[str, str],
    make_builder: Callable[[ModuleType, Path], object] | None,
    limit_s: float = PLUGIN_LIMIT_S,
    check_decoder: Callable[[object, ModelSpec], None] | None = None,
) -> LoadedPlugins:
    """Read every plug-in at `where` for `framework`. `taken` maps names already served to their source (the
    built-ins); a clash is refused, naming both. `make_builder` turns a builder module into the framework's
    builder (raising PluginError where the module lacks what it needs), and `check_decoder` refuses the builder of
    a plug-in that declares it generates without what generation needs, both in a process apart within `limit_s`
    (plugin_checks); None: a runner that needs no builder module (the fake runner) serves every declared model."""
    found: list[tuple[Path, str, ModelSpec | None, str]] = []  # (folder, origin, spec, why it cannot be read)
    reports: list[PluginReport | int] = []  # a report, or the index in `found` of the plug-in it will be
    for location in where:
        if location.error:
            reports.append(PluginReport(str(location.path), location.origin, error=location.error))
            continue
        try:
            folders = plugin_folders(location)
        except PluginError as error:
            reports.append(PluginReport(str(location.path), location.origin, error=str(error)))
            continue
        for folder in folders:
            reports.append(len(found))
            found.append((folder, location.origin, *_read(folder, location.origin)))
    checks = _checks(framework, found, make_builder, limit_s, check_decoder)
    taken = dict(taken)
    loaded = LoadedPlugins({}, {}, ())
    loaded.reports = tuple(
        r if isinstance(r, PluginReport) else _load_one(framework, *found[r], taken, make_builder, loaded, checks)
        for r in reports
    )
    return loaded


def _read(folder: Path, origin: str) -> tuple[ModelSpec | None, str]:
    try:
        return read_declaration(folder, ModelSource(origin, str(folder.resolve()), content_hash(folder))), ""
    except (DeclarationError, PluginError, OSError) as error:
        return None, str(error)


def _key(framework: str, spec: ModelSpec) -> tuple[str, str, str]:
    return spec.source.folder, framework, spec.source.content_hash


def _checks(framework, found, make_builder, limit_s: float, check_decoder) -> dict[tuple[str, str, str], str]:
    """Every readable plug-in's builder checked apart (plugin_checks), each folder and version once a process."""
    if make_builder is None:
        return {}
    wanted = {
        _key(framework, spec): (folder, spec)
        for folder, _, spec, _ in found
        if spec is not None and (folder / builder_file(framework)).is_file() and _key(framework, spec) not in _checked
    }
    _checked.update(zip(wanted, check_builders(framework, list(wanted.values()), make_builder, limit_s, check_decoder)))
    return _checked


def _load_one(
    framework, folder, origin, spec, unreadable, taken, make_builder, loaded: LoadedPlugins, checks
) -> PluginReport:
    if spec is None:
        return PluginReport(str(folder), origin, error=unreadable)
    name, source = spec.name, spec.source
    if name in taken:
        return PluginReport(
            str(folder),
            origin,
            (name,),
            source.content_hash,
            error=f"model {name!r} in {folder} clashes with {name!r} from {taken[name]}; rename one of them "
            "(the name in model.toml and its folder)",
        )
    taken[name] = str(source)
    if make_builder is not None:
        if not (folder / builder_file(framework)).is_file():
            why = f"plug-in {folder} has no {builder_file(framework)}, so the {framework} runner does not build it"
            loaded.not_offered[name] = why
            return PluginReport(str(folder), origin, (name,), source.content_hash, error=why)
        if why := checks[_key(framework, spec)]:
            loaded.not_offered[name] = f"plug-in {folder} failed to load: {why}"
            return PluginReport(str(folder), origin, (name,), source.content_hash, error=why)
    loaded.specs[name] = spec
    return PluginReport(str(folder), origin, (name,), source.content_hash)


# Each plug-in's check (plugin_checks: "" or why it failed) by (folder, framework, content hash), for the process.
_checked: dict[tuple[str, str, str], str] = {}
# Builders by (folder, framework, content hash), for the process: those a worker process imports when it first
# builds the plug-in.
_builders: dict[tuple[str, str, str], object] = {}
_worker_lock = threading.Lock()


def plugin_builder(framework: str, spec: ModelSpec, make_builder: Callable[[ModuleType, Path], object]) -> object:
    """A plug-in's builder: the one loaded at start-up, or in a process that did not load it (a run's worker
    process) imported once from the spec's folder, which must still hold what the runner loaded at every build (a
    worker kept for the plug-in builds it again and again, and a builder may read its folder's other files then)."""
    key = (spec.source.folder, framework, spec.source.content_hash)
    with _worker_lock:
        folder = Path(spec.source.folder)
        now = content_hash(folder)
        if now != spec.source.content_hash:
            raise PluginError(
                f"plug-in {folder} changed since the runner loaded it ({spec.source.content_hash[:19]} then, "
                f"{now[:19]} now); restart the runner to serve the new version"
            )
        if key not in _builders:
            _builders[key] = make_builder(import_builder(folder, framework, spec.name), folder)
        return _builders[key]
