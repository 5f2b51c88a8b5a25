"""Every file a runner reads from a plug-in folder at start-up, or names in its options, is read only where it is a
regular file, without blocking, within a bound, and a declaration only where its nesting is bounded: a FIFO, a folder
or 600 nested brackets in model.toml's place is refused naming the file (and the line), and the runner serves the
other plug-ins. safe_read is the one helper for it."""

from __future__ import annotations

import argparse
import os

import pytest
from support.plugins import declaration, write_plugin

from fwbench_core import access
from fwbench_core.declaration import MAX_NESTING, DeclarationError, read_declaration
from fwbench_core.models import ModelSource
from fwbench_core.plugins import PluginLocation, load_plugins
from fwbench_core.safe_read import FileRefused, FileTooLarge, open_regular_file, read_small_file

SOURCE = ModelSource("test", "folder", "sha256:0")


@pytest.fixture
def kinds(tmp_path):
    """A FIFO, a folder and a regular file of 10 bytes, by name."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_bytes(b"0123456789")
    return tmp_path


@pytest.mark.parametrize("name, kind", [("fifo", "a FIFO"), ("folder", "a folder")])
def test_anything_but_a_regular_file_is_refused_at_once_naming_its_kind(kinds, name, kind):
    with pytest.raises(FileRefused, match=f"^{kinds / name}: is {kind}, not a regular file$"):
        read_small_file(kinds / name, 100)


def test_a_regular_file_is_read_within_its_bound_and_refused_past_it(kinds):
    assert read_small_file(kinds / "file", 10) == b"0123456789"
    with pytest.raises(FileTooLarge, match=f"^{kinds / 'file'}: over 9 bytes") as refused:
        read_small_file(kinds / "file", 9)
    assert refused.value.limit_bytes == 9
    with pytest.raises(FileRefused, match="cannot be read: No such file or directory"):
        read_small_file(kinds / "missing", 9)
    with open_regular_file(kinds / "file") as stream:
        assert stream.read() == b"0123456789"


def test_a_declaration_nested_600_deep_is_refused_naming_its_file_and_line(tmp_path):
    folder = write_plugin(tmp_path, "deep", text=declaration("deep") + "\nextra = " + "[" * 600 + "]" * 600 + "\n")
    line = declaration("deep").count("\n") + 2
    with pytest.raises(DeclarationError) as refused:
        read_declaration(folder, SOURCE)
    assert str(refused.value) == (
        f"{folder / 'model.toml'}: line {line}: arrays and tables nest over {MAX_NESTING} "
        f"deep; a declaration nests at most {MAX_NESTING} (its shapes and [[heads]] need 2)"
    )


@pytest.mark.parametrize(
    "text",
    [
        'description = "' + "[" * 100 + '"',
        "description = '''\n" + "{" * 100 + "'''",
        "# " + "[" * 100,
        'description = """a\\"""' + "[" * 100 + '"""',
    ],
)
def test_brackets_in_strings_and_comments_are_no_nesting(tmp_path, text):
    folder = write_plugin(
        tmp_path, "quoted", text=declaration("quoted").replace('description = "A tiny test CNN"', text)
    )
    assert read_declaration(folder, SOURCE).name == "quoted"


def test_a_fifo_or_a_deep_declaration_is_reported_and_the_other_plugins_served(tmp_path):
    models = tmp_path / "models"
    write_plugin(models, "good")
    os.mkfifo(write_plugin(models, "piped") / "model.toml.fifo")
    (models / "piped" / "model.toml").unlink()
    os.rename(models / "piped" / "model.toml.fifo", models / "piped" / "model.toml")
    write_plugin(models, "deep", text="x = " + "[" * 600 + "]" * 600)
    loaded = load_plugins("test", [PluginLocation(models, "--models-dir")], {}, None)
    errors = {report.folder: report.error for report in loaded.reports}
    assert set(loaded.specs) == {"good"}
    assert errors[str(models / "piped")] == f"{models / 'piped' / 'model.toml'}: is a FIFO, not a regular file"
    assert errors[str(models / "deep")].startswith(f"{models / 'deep' / 'model.toml'}: line 1: arrays and tables nest")


def test_a_token_file_that_is_a_fifo_is_refused_at_start_naming_the_option(kinds):
    args = argparse.Namespace(
        tls_cert=None, tls_key=None, tls_client_ca=None, token_file=str(kinds / "fifo"), insecure=False
    )
    with pytest.raises(access.AccessError, match=f"^--token-file {kinds / 'fifo'}: is a FIFO, not a regular file$"):
        access.from_args(args, environ={})
