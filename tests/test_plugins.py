"""Model plug-ins: where a runner finds them, what it serves from them (each with its folder, origin and content
hash), how a plug-in that fails to load is reported while the rest are served, and a run's worker process
importing a plug-in's builder; then the same over real gRPC, from the fake runner. tests/test_hostile_plugins.py
serves plug-ins, good and hostile, from the torch runner."""

from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.fakes import Fake
from support.plugins import GOOD_BUILDER, SHAPE, declaration, write_plugin
from support.requests import run

from fwbench_core import plugins
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.catalog import Catalog, load_catalog
from fwbench_core.errors import FailedPrecondition, RunnerError, status_for
from fwbench_core.fake import FAKE_MODELS
from fwbench_core.plugin_modules import PluginError, builder_attribute
from fwbench_core.plugins import (
    ENTRY_POINT_GROUP,
    MODELS_DIR_ENV,
    MODELS_DIR_FLAG,
    PluginLocation,
    PluginReport,
    content_hash,
    locations,
    plugin_builder,
)
from fwbench_core.registry import ModelRegistry

HASH = re.compile(r"sha256:[0-9a-f]{64}")
RPC_TIMEOUT_S = 60
FAILING_BUILDERS = {
    "raises-at-import": (
        "raise RuntimeError('broken on purpose')\n",
        "failed to import: RuntimeError: broken on purpose",
    ),
    "imports-a-missing-package": (
        "import fwbench_no_such_package\n",
        "failed to import: ModuleNotFoundError: No module named 'fwbench_no_such_package'",
    ),
    "syntax-error": ("def build(:\n", "failed to import: SyntaxError: "),
    "exits-at-import": ("import sys\nsys.exit(3)\n", "failed to import: it exits or interrupts at import"),
    "no-build-function": (
        "def make(spec):\n    return None\n",
        "defines no function build(spec, input_shape, options)",
    ),
}


def build_attribute(module, folder):
    """The test framework's adapter: a plug-in's builder is its module's build function."""
    return builder_attribute(module, folder, "test", "build", "spec, input_shape, options")


def make_registry() -> ModelRegistry:
    """A framework named "test" that builds one built-in, resnet18, and plug-ins through build_test.py."""
    registry = ModelRegistry("test", build_attribute)
    registry.register("resnet18")(lambda spec, input_shape, options: "resnet18 built")
    return registry


def models_dir(path: Path) -> PluginLocation:
    return PluginLocation(path, MODELS_DIR_FLAG)


def report_for(catalog: Catalog, folder: Path) -> PluginReport:
    (report,) = [r for r in catalog.plugins if r.folder == str(folder)]
    return report


def not_served_message(catalog: Catalog, name: str) -> str:
    with pytest.raises(FailedPrecondition) as info:
        catalog.spec(name)
    return str(info.value)


# --- loading plug-ins into a catalog -------------------------------------------------------------


def test_a_good_plugin_is_served_beside_the_built_ins_with_its_source(tmp_path):
    folder = write_plugin(tmp_path, "tiny")
    registry = make_registry()
    catalog = load_catalog(registry, [models_dir(tmp_path)])
    assert catalog.names() == ["resnet18", "tiny"] and "tiny" not in catalog.not_offered
    spec = catalog.spec("tiny")
    assert (spec.source.origin, spec.source.folder) == (MODELS_DIR_FLAG, str(folder.resolve()))
    assert HASH.fullmatch(spec.source.content_hash) and spec.source.content_hash == content_hash(folder)
    assert (spec.description, spec.default_input_shape) == ("A tiny test CNN", (3, 8, 8))
    assert catalog.plugins == (PluginReport(str(folder), MODELS_DIR_FLAG, ("tiny",), spec.source.content_hash),)
    assert registry.builder(spec)(spec, (3, 8, 8), {}) == ("built", "tiny", (3, 8, 8))
    assert catalog.spec("resnet18").source.built_in


def test_the_content_hash_follows_the_files_and_ignores_caches_and_hidden_files(tmp_path):
    folder = write_plugin(tmp_path, "tiny")
    first = content_hash(folder)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "build_test.cpython-311.pyc").write_bytes(b"compiled")
    (folder / ".editor-swap").write_text("unsaved")
    assert content_hash(folder) == first
    (folder / "build_test.py").write_text(GOOD_BUILDER + "# edited\n")
    edited = content_hash(folder)
    assert edited != first and HASH.fullmatch(edited)
    (folder / "layers.py").write_text("")
    assert content_hash(folder) != edited, "a file added beside the builder is part of the plug-in"


def test_a_plugin_without_this_frameworks_builder_is_declared_but_not_offered(tmp_path):
    folder = write_plugin(tmp_path, "tiny", builders={"other": GOOD_BUILDER})
    catalog = load_catalog(make_registry(), [models_dir(tmp_path)])
    assert catalog.names() == ["resnet18"]
    assert not_served_message(catalog, "tiny") == (
        f"model 'tiny' is not served by this runner: plug-in {folder} has no build_test.py, so the test runner does "
        "not build it"
    )
    # The fake runner builds nothing, so it serves every declared plug-in.
    fake_catalog = load_catalog(FAKE_MODELS, [models_dir(tmp_path)])
    assert fake_catalog.names() == sorted([*MODEL_SPECS, "tiny"])
    assert fake_catalog.spec("tiny").source.folder == str(folder.resolve())


def test_the_report_of_a_plugin_this_runner_does_not_build_names_its_model_and_why(tmp_path):
    folder = write_plugin(tmp_path, "tiny", builders={"other": GOOD_BUILDER})
    report = report_for(load_catalog(make_registry(), [models_dir(tmp_path)]), folder)
    # runner.proto: ModelPlugin.models is empty only "where its declaration could not be read", and error says
    # "why it is not served; empty where it is".
    assert report.models == ("tiny",) and "has no build_test.py" in report.error, (
        "plugins._load_one: a plug-in folder without this framework's builder is reported with no model and "
        f"no error, so Describe shows it as neither declaring a model nor failing: {report}"
    )


@pytest.mark.parametrize("source, error", FAILING_BUILDERS.values(), ids=FAILING_BUILDERS.keys())
def test_a_builder_module_that_fails_is_reported_and_the_other_models_still_served(tmp_path, source, error):
    write_plugin(tmp_path, "tiny")
    broken = write_plugin(tmp_path, "broken", builders={"test": source})
    catalog = load_catalog(make_registry(), [models_dir(tmp_path)])
    assert catalog.names() == ["resnet18", "tiny"]
    report = report_for(catalog, broken)
    assert report.models == ("broken",) and HASH.fullmatch(report.content_hash)
    assert report.error.startswith(f"{broken / 'build_test.py'} ") and error in report.error
    assert not_served_message(catalog, "broken") == (
        f"model 'broken' is not served by this runner: plug-in {broken} failed to load: {report.error}"
    )


def test_a_plugin_whose_declaration_is_refused_is_reported_with_the_refusal(tmp_path):
    write_plugin(tmp_path, "tiny")
    bad = write_plugin(tmp_path, "bad", text=declaration("bad", task="visoin"))
    undeclared = tmp_path / "undeclared"
    undeclared.mkdir()
    (undeclared / "build_test.py").write_text(GOOD_BUILDER)
    catalog = load_catalog(make_registry(), [models_dir(tmp_path)])
    assert catalog.names() == ["resnet18", "tiny"]
    assert report_for(catalog, bad).error == (
        f"{bad / 'model.toml'}: task: 'visoin' is not accepted (did you mean vision?); accepted values: vision, nlp, speech"
    )
    # A folder with a builder and no declaration is reported, not skipped in silence.
    assert report_for(catalog, undeclared).error.startswith(f"{undeclared / 'model.toml'}: cannot be read: ")
    assert all(report_for(catalog, f).models == () for f in (bad, undeclared))


def test_a_plugin_named_as_a_built_in_is_refused_naming_both(tmp_path):
    clash = write_plugin(tmp_path, "resnet18")
    # vgg16 is a built-in that this runner does not build: its name is taken all the same.
    not_built_here = write_plugin(tmp_path, "vgg16")
    catalog = load_catalog(make_registry(), [models_dir(tmp_path)])
    assert catalog.names() == ["resnet18"] and catalog.spec("resnet18").source.built_in
    for folder in (clash, not_built_here):
        name = folder.name
        assert report_for(catalog, folder).error == (
            f"model {name!r} in {folder} clashes with {name!r} from the built-in models; rename one of them (the name "
            "in model.toml and its folder)"
        )


def test_two_plugin_folders_declaring_one_name_serve_the_first_and_refuse_the_second_naming_both(tmp_path):
    first = write_plugin(tmp_path / "a", "tiny")
    second = write_plugin(tmp_path / "b", "tiny")
    catalog = load_catalog(make_registry(), [models_dir(tmp_path / "a"), models_dir(tmp_path / "b")])
    assert catalog.spec("tiny").source.folder == str(first.resolve())
    assert report_for(catalog, first).error == ""
    assert report_for(catalog, second).error == (
        f"model 'tiny' in {second} clashes with 'tiny' from {first.resolve()} ({MODELS_DIR_FLAG}); rename one of them "
        "(the name in model.toml and its folder)"
    )


def test_a_models_dir_that_does_not_exist_is_reported_and_the_rest_served(tmp_path):
    write_plugin(tmp_path / "models", "tiny")
    missing = tmp_path / "no-such-folder"
    catalog = load_catalog(make_registry(), [models_dir(missing), models_dir(tmp_path / "models")])
    assert catalog.names() == ["resnet18", "tiny"]
    assert report_for(catalog, missing) == PluginReport(
        str(missing), MODELS_DIR_FLAG, error=f"{missing} ({MODELS_DIR_FLAG}) is not a folder"
    )


def test_one_plugin_folder_given_directly_is_served(tmp_path):
    folder = write_plugin(tmp_path, "tiny")
    write_plugin(tmp_path, "beside_it")
    catalog = load_catalog(make_registry(), [models_dir(folder)])
    assert catalog.names() == ["resnet18", "tiny"]
    assert [report.folder for report in catalog.plugins] == [str(folder)]


def test_the_environment_variable_adds_folders_joined_by_the_path_separator_after_the_flags(tmp_path, monkeypatch):
    write_plugin(tmp_path / "a", "tiny")
    write_plugin(tmp_path / "b", "small")
    monkeypatch.setenv(MODELS_DIR_ENV, f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    found = locations(["/flagged"], entry_points=False)
    assert found == [
        PluginLocation(Path("/flagged"), MODELS_DIR_FLAG),
        PluginLocation(tmp_path / "a", MODELS_DIR_ENV),
        PluginLocation(tmp_path / "b", MODELS_DIR_ENV),
    ]
    catalog = load_catalog(make_registry(), found[1:])
    assert catalog.names() == ["resnet18", "small", "tiny"]
    assert {catalog.spec(name).source.origin for name in ("small", "tiny")} == {MODELS_DIR_ENV}


def test_an_installed_packages_entry_point_names_a_folder_of_plugins(tmp_path, monkeypatch):
    package = tmp_path / "fwbench_test_plugin_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    write_plugin(package, "tiny")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry_points = [
        metadata.EntryPoint("tinies", package.name, ENTRY_POINT_GROUP),
        metadata.EntryPoint("missing", "fwbench_no_such_package", ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(metadata, "entry_points", lambda group: entry_points if group == ENTRY_POINT_GROUP else [])
    found = locations((), environ={})
    assert found[0] == PluginLocation(package, "entry point tinies")
    catalog = load_catalog(make_registry(), found)
    assert catalog.names() == ["resnet18", "tiny"] and catalog.spec("tiny").source.origin == "entry point tinies"
    broken = catalog.plugins[-1]
    assert broken.origin == "entry point missing"
    assert broken.error == (
        "entry point missing (fwbench_no_such_package) failed to load: ModuleNotFoundError: "
        "No module named 'fwbench_no_such_package'"
    )


def test_a_link_out_of_the_folder_is_refused_and_one_inside_it_is_hashed(tmp_path):
    folder = write_plugin(tmp_path / "models", "tiny")
    outside = tmp_path / "layers.py"
    outside.write_text("WIDTH = 8\n")
    (folder / "layers.py").symlink_to(outside)
    with pytest.raises(PluginError) as info:
        content_hash(folder)
    assert str(info.value).startswith(
        f"{folder.resolve() / 'layers.py'} links to {outside}, outside the plug-in folder"
    )
    report = report_for(load_catalog(make_registry(), [models_dir(tmp_path / "models")]), folder)
    assert report.error == str(info.value), "a plug-in whose hash cannot cover what runs is not served"

    (folder / "layers.py").unlink()
    (folder / "real").mkdir()
    (folder / "real" / "layers.py").write_text("WIDTH = 8\n")
    (folder / "layers.py").symlink_to(folder / "real" / "layers.py")
    before = content_hash(folder)
    (folder / "real" / "layers.py").write_text("WIDTH = 16\n")
    assert content_hash(folder) != before


def test_the_size_cap_is_checked_before_any_file_is_read(tmp_path):
    folder = write_plugin(tmp_path, "tiny")
    with open(folder / "weights.bin", "wb") as sparse:
        sparse.truncate(30 << 30)  # 30 GiB that take no disk: read whole, they would exhaust memory
    with pytest.raises(PluginError) as info:
        content_hash(folder)
    assert str(info.value) == (
        f"{folder.resolve()} holds 30720 MiB (the largest file, weights.bin, 30720 MiB); a "
        "plug-in folder holds at most 64 MiB: code and its declaration"
    )


def test_a_built_in_this_runner_does_not_build_is_refused_as_not_served_not_as_unknown():
    catalog = load_catalog(make_registry())
    with pytest.raises(RunnerError) as info:
        catalog.spec("vgg16")
    assert isinstance(info.value, FailedPrecondition), (
        "catalog.load_catalog: a declared built-in that this runner has no builder for is refused as an "
        f"unknown model ({type(info.value).__name__}: {info.value}); before the plug-ins it was FailedPrecondition, "
        "'in the catalog but this runner has no builder for it', and Catalog.not_offered is meant for it"
    )


# --- a run's worker process, which did not load the plug-ins, importing a builder ----------------


def loaded_spec(folder: Path):
    return load_catalog(make_registry(), [models_dir(folder)]).spec(folder.name)


def test_a_worker_process_imports_the_builder_from_the_specs_folder(tmp_path, monkeypatch):
    spec = loaded_spec(write_plugin(tmp_path, "tiny"))
    monkeypatch.setattr(plugins, "_builders", {})  # a fresh worker process has loaded no builder
    build = plugin_builder("test", spec, build_attribute)
    assert build(spec, (3, 8, 8), {}) == ("built", "tiny", (3, 8, 8))
    assert plugin_builder("test", spec, build_attribute) is build, "imported once per process"


def changed_since_load(folder: Path, monkeypatch) -> PluginError:
    """The error a worker process meets building the plug-in at `folder` after its builder was edited."""
    spec = loaded_spec(folder)
    monkeypatch.setattr(plugins, "_builders", {})  # a fresh worker process has loaded no builder
    (folder / "build_test.py").write_text(GOOD_BUILDER + "# edited after the runner loaded it\n")
    with pytest.raises(PluginError) as info:
        plugin_builder("test", spec, build_attribute)
    return info.value


def test_a_worker_process_refuses_a_plugin_changed_since_the_runner_loaded_it(tmp_path, monkeypatch):
    folder = write_plugin(tmp_path, "tiny")
    loaded_hash = content_hash(folder)
    message = str(changed_since_load(folder, monkeypatch))
    assert message == (
        f"plug-in {folder.resolve()} changed since the runner loaded it ({loaded_hash[:19]} then, "
        f"{content_hash(folder)[:19]} now); restart the runner to serve the new version"
    )


def test_a_plugin_refused_in_a_worker_reaches_the_client_as_a_failed_precondition(tmp_path, monkeypatch):
    code, message = status_for(changed_since_load(write_plugin(tmp_path, "tiny"), monkeypatch))
    assert code == grpc.StatusCode.FAILED_PRECONDITION, (
        "plugins.PluginError is no RunnerError: a run's worker that refuses a changed plug-in (or fails to "
        f"import one) reaches the client as {code.name}, {message!r}; the runner's state, not the runner, is at fault"
    )


# --- over gRPC: the fake runner with a models folder ---------------------------------------------


@pytest.fixture(scope="module")
def fake_with_plugins(tmp_path_factory, module_fakes):
    """(models folder, stub) of a fake runner given one good and one broken plug-in, and no others."""
    models = tmp_path_factory.mktemp("models")
    write_plugin(models, "tiny", builders={})
    write_plugin(models, "broken", builders={}, text=declaration("broken", task="visoin"))
    plugins = Fake("fake-plugins", flags=(MODELS_DIR_FLAG, str(models)), env={MODELS_DIR_ENV: ""})
    with grpc.insecure_channel(module_fakes(plugins).addresses["fake-plugins"]) as channel:
        yield models, pb_grpc.RunnerStub(channel)


def wire_plugins(stub) -> dict[str, pb.ModelPlugin]:
    return {p.folder: p for p in stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S).plugins}


def wire_models(stub) -> dict[str, pb.ModelInfo]:
    return {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT_S).models}


def test_fake_runner_describes_each_plugin_folder_with_its_error(fake_with_plugins):
    models, stub = fake_with_plugins
    described = wire_plugins(stub)
    assert sorted(described) == [str(models / "broken"), str(models / "tiny")]
    good, broken = described[str(models / "tiny")], described[str(models / "broken")]
    assert (good.origin, list(good.models), good.content_hash, good.error) == (
        MODELS_DIR_FLAG,
        ["tiny"],
        content_hash(models / "tiny"),
        "",
    )
    assert broken.origin == MODELS_DIR_FLAG and list(broken.models) == []
    assert broken.error.startswith(f"{models / 'broken' / 'model.toml'}: task: 'visoin' is not accepted")


def test_fake_runner_lists_the_built_ins_and_the_good_plugin_with_its_source(fake_with_plugins):
    models, stub = fake_with_plugins
    listed = wire_models(stub)
    assert sorted(listed) == sorted([*MODEL_SPECS, "tiny"])
    tiny = listed["tiny"]
    assert (tiny.source_folder, tiny.source_origin, tiny.content_hash, tiny.description) == (
        str((models / "tiny").resolve()),
        MODELS_DIR_FLAG,
        content_hash(models / "tiny"),
        "A tiny test CNN",
    )
    assert list(tiny.default_input_shape) == SHAPE
    resnet = listed["resnet18"]
    assert (resnet.source_folder, resnet.source_origin, resnet.content_hash) == ("", "built-in", "")


def test_fake_runner_runs_the_plugin_model(fake_with_plugins):
    _, stub = fake_with_plugins
    config, summary = run(stub, model="tiny", input_shape=SHAPE)
    assert (config.model, list(config.input_shape), summary.measured_steps) == ("tiny", SHAPE, 2)
