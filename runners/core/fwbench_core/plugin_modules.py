"""A plug-in's builder module (build_<framework>.py): its file name, how it is imported, and the error a plug-in that
cannot be served raises. The lowest of the plug-in modules: plugins reads folders and declarations with it, and
plugin_checks imports builders with it in a process apart."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from .errors import FailedPrecondition


class PluginError(FailedPrecondition):
    """A plug-in that cannot be served; the message says which file and why. Over the wire (a run's worker that
    finds the plug-in changed): FAILED_PRECONDITION, the runner's configuration being what must change."""


def builder_file(framework: str) -> str:
    return f"build_{framework}.py"


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
    if module_spec is None or module_spec.loader is None:
        raise PluginError(f"{path} cannot be imported: Python has no loader for it")
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


def builder_attribute(module: ModuleType, folder: Path, framework: str, name: str, signature: str) -> Callable:
    """`module.name`, which must be callable: for the frameworks' builder adapters."""
    value = getattr(module, name, None)
    if not callable(value):
        raise PluginError(f"{folder / builder_file(framework)} defines no function {name}({signature})")
    return value
