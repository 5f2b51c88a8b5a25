"""Model plug-ins: a folder with a declaration (model.toml) and one builder module per framework.

A runner finds plug-ins from its own configuration only (--models-dir, $FWBENCH_MODELS_DIR, installed packages'
`fwbench.models` entry points), never from a request: loading code is the operator's decision. A plug-in that
fails to load is reported with its error and left out; the runner serves the rest.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType

from .declaration import DECLARATION_FILE, DeclarationError, read_declaration
from .errors import FailedPrecondition
from .spec import ModelSource, ModelSpec

MODELS_DIR_ENV = "FWBENCH_MODELS_DIR"
ENTRY_POINT_GROUP = "fwbench.models"
MODELS_DIR_FLAG = "--models-dir"
# What a plug-in folder may hold for its hash to be taken: more is not a model but a data set beside it.
MAX_PLUGIN_FILES = 1000
MAX_PLUGIN_BYTES = 64 << 20


class PluginError(FailedPrecondition):
    """A plug-in that cannot be served; the message says which file and why. Over the wire (a run's worker that
    finds the plug-in changed): FAILED_PRECONDITION, the runner's configuration being what must change."""


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


def builder_file(framework: str) -> str:
    return f"build_{framework}.py"


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
        except Exception as error:  # noqa: BLE001 - a broken package must not stop the runner
            found.append(PluginLocation(Path(entry.value), origin, f"entry point {entry.name} ({entry.value}) failed to "
                                        f"load: {type(error).__name__}: {error}"))
    return found


def plugin_folders(location: PluginLocation) -> list[Path]:
    """The plug-in folders at `location`: itself where it holds a declaration, else its subfolders that do
    (or that hold a builder without one: they are reported, not skipped in silence)."""
    path = location.path
    if (path / DECLARATION_FILE).is_file():
        return [path]
    if not path.is_dir():
        raise PluginError(f"{path} ({location.origin}) is not a folder")
    return sorted(
        child for child in path.iterdir()
        if child.is_dir() and not child.name.startswith((".", "_"))
        and ((child / DECLARATION_FILE).is_file() or any(child.glob("build_*.py")))
    )


def content_hash(folder: Path) -> str:
    """sha256 over the plug-in's files (relative path and bytes), caches and hidden files aside: which version
    of the user's model a result ran."""
    digest = hashlib.sha256()
    files = sorted(
        p for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(folder).parts)
    )
    if len(files) > MAX_PLUGIN_FILES:
        raise PluginError(f"{folder} holds {len(files)} files; a plug-in folder holds at most {MAX_PLUGIN_FILES}")
    total = 0
    for path in files:
        data = path.read_bytes()
        total += len(data)
        if total > MAX_PLUGIN_BYTES:
            raise PluginError(f"{folder} holds over {MAX_PLUGIN_BYTES >> 20} MiB; a plug-in folder holds code and its declaration")
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return f"sha256:{digest.hexdigest()}"


def import_builder(folder: Path, framework: str, model: str) -> ModuleType:
    """The plug-in's builder module for `framework`, imported as a module of a package of its own (the folder), so
    that two plug-ins' modules never share a name, none shadows a framework, and a builder imports the folder's
    other files relatively (`from . import layers`)."""
    path = folder / builder_file(framework)
    package = f"fwbench_plugin_{model}"
    if package not in sys.modules:
        holder = ModuleType(package)
        holder.__path__ = [str(folder)]
        sys.modules[package] = holder
    name = f"{package}.build_{framework}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as error:
        del sys.modules[name]
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise PluginError(f"{path} failed to import: it exits or interrupts at import") from None
        raise PluginError(f"{path} failed to import: {type(error).__name__}: {error}") from None
    return module


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
) -> LoadedPlugins:
    """Read every plug-in at `where` for `framework`. `taken` maps names already served to their source (the
    built-ins); a clash is refused, naming both. `make_builder` turns a builder module into the framework's
    builder (raising PluginError where the module lacks what it needs); None: a runner that needs no builder
    module (the fake runner) serves every declared model."""
    taken = dict(taken)
    loaded = LoadedPlugins({}, {}, ())
    reports = []
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
            reports.append(_load_one(framework, folder, location.origin, taken, make_builder, loaded))
    loaded.reports = tuple(reports)
    return loaded


def _load_one(framework, folder, origin, taken, make_builder, loaded: LoadedPlugins) -> PluginReport:
    try:
        source = ModelSource(origin, str(folder.resolve()), content_hash(folder))
        spec = read_declaration(folder, source)
    except (DeclarationError, PluginError, OSError) as error:
        return PluginReport(str(folder), origin, error=str(error))
    name = spec.name
    if name in taken:
        return PluginReport(
            str(folder), origin, (name,), source.content_hash,
            error=f"model {name!r} in {folder} clashes with {name!r} from {taken[name]}; rename one of them "
            "(the name in model.toml and its folder)",
        )
    taken[name] = str(source)
    if make_builder is not None:
        if not (folder / builder_file(framework)).is_file():
            why = f"plug-in {folder} has no {builder_file(framework)}, so the {framework} runner does not build it"
            loaded.not_offered[name] = why
            return PluginReport(str(folder), origin, (name,), source.content_hash, error=why)
        key = (source.folder, framework, source.content_hash)
        try:
            if key not in _builders:  # imported once a process, where one location repeats another's folder
                _builders[key] = make_builder(import_builder(folder, framework, name), folder)
        except PluginError as error:
            loaded.not_offered[name] = f"plug-in {folder} failed to load: {error}"
            return PluginReport(str(folder), origin, (name,), source.content_hash, error=str(error))
    loaded.specs[name] = spec
    return PluginReport(str(folder), origin, (name,), source.content_hash)


# Builders by (folder, framework, content hash), for the process: the runner's own, loaded at start-up, and
# those a run's worker process imports when it first builds the plug-in.
_builders: dict[tuple[str, str, str], object] = {}
_worker_lock = threading.Lock()


def plugin_builder(framework: str, spec: ModelSpec, make_builder: Callable[[ModuleType, Path], object]) -> object:
    """A plug-in's builder: the one loaded at start-up, or in a process that did not load it (a run's worker
    process) imported once from the spec's folder, which must still hold what the runner loaded."""
    key = (spec.source.folder, framework, spec.source.content_hash)
    with _worker_lock:
        if key not in _builders:
            folder = Path(spec.source.folder)
            now = content_hash(folder)
            if now != spec.source.content_hash:
                raise PluginError(
                    f"plug-in {folder} changed since the runner loaded it ({spec.source.content_hash[:19]} then, "
                    f"{now[:19]} now); restart the runner to serve the new version"
                )
            _builders[key] = make_builder(import_builder(folder, framework, spec.name), folder)
        return _builders[key]


def builder_attribute(module: ModuleType, folder: Path, framework: str, name: str, signature: str) -> Callable:
    """`module.name`, which must be callable: for the frameworks' builder adapters."""
    value = getattr(module, name, None)
    if not callable(value):
        raise PluginError(f"{folder / builder_file(framework)} defines no function {name}({signature})")
    return value
