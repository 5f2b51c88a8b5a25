"""Model plug-in folders for tests: a declaration and builder modules, written where a test asks."""

from __future__ import annotations

from pathlib import Path

from fwbench_core import plugins

SHAPE = [3, 8, 8]
GOOD_BUILDER = "def build(spec, input_shape, options):\n    return ('built', spec.name, tuple(input_shape))\n"


def declaration(name: str, task: str = "vision") -> str:
    return f"""\
name = "{name}"
description = "A tiny test CNN"
task = "{task}"
input_kind = "image"
default_input_shape = [3, 8, 8]
min_input_shape = [3, 4, 4]
max_input_shape = [3, 32, 32]

[[heads]]
name = "classification"
objective = "classify"
outputs = 10
"""


def write_plugin(parent: Path, name: str, builders: dict[str, str] | None = None, text: str | None = None) -> Path:
    """A plug-in folder `parent/name`: its declaration (`text`, or a valid one named `name`) and a builder module
    per framework in `builders` (default: a good build_test.py)."""
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "model.toml").write_text(declaration(name) if text is None else text)
    for framework, source in ({"test": GOOD_BUILDER} if builders is None else builders).items():
        (folder / plugins.builder_file(framework)).write_text(source)
    return folder
