"""A plug-in can be a decoder: examples/models/tiny_decoder (model.toml's `generates = true`, and in each builder the
cache interface the built-in decoders have) generates in every runner through its plug-in worker, and from
PyTorch's weights every runner chooses PyTorch's greedy tokens, as `fwbench parity` reports them. A plug-in that
declares it generates but whose builder lacks the interface is refused when the runner loads it, naming what is
missing, so that `fwbench models` lists the error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.plugins import GOOD_BUILDER, write_plugin
from support.requests import run
from support.runners import EXAMPLE_MODELS, REAL_RUNNERS, SERVED_SPECS

from fwbench_aggregator.run import launch
from fwbench_aggregator.run.client import RunnerClient
from fwbench_aggregator.run.parity import tokens_text
from fwbench_core.catalog import load_catalog
from fwbench_core.choices import Precision
from fwbench_core.errors import FailedPrecondition
from fwbench_core.plugin_modules import PluginError, builder_attribute
from fwbench_core.plugins import MODELS_DIR_FLAG, PluginLocation
from fwbench_core.references import PARITY_NEW_TOKENS, tokens_key
from fwbench_core.registry import ModelRegistry

MODEL = "tiny_decoder"
PROMPT, NEW_TOKENS = 8, 4
# A framework's import and a plug-in's check, on a loaded 2-core CPU.
CHECK_TIMEOUT_S = 300

# A decoder's declaration whose builders give networks without the cache interface: no empty_caches on the torch
# module or the Flax module, no decoder(model) in build_tensorflow.py.
NO_CACHE_BUILDERS = {
    "torch": "from torch import nn\n\n\ndef build(spec, input_shape, options):\n    return nn.Embedding(8, 8)\n",
    "tensorflow": "import keras\n\n\ndef build(spec, input_shape, options):\n    return keras.Sequential()\n",
    "jax": "import flax.linen as nn\n\n\ndef build(spec, options, dtype):\n    return nn.Embed(8, 8)\n",
}
# What each runner says the builder lacks.
MISSING = {
    "torch": "build_torch.py: model.toml declares generates = true, but build()'s model (Embedding) has no "
    "empty_caches(batch_size, length, dtype) beside forward(ids, caches, offset)",
    "tensorflow": "build_tensorflow.py: model.toml declares generates = true, but it defines no decoder(model)",
    "jax": "build_jax.py: model.toml declares generates = true, but build()'s module (Embed) has no "
    "empty_caches(batch_size, length, dtype) beside __call__(ids, train, caches, offset)",
}
# Checks each plug-in of a models folder as the runner's process checking plug-ins does (plugin_checks): the
# framework's make_plugin_builder, then its check_plugin_decoder where the declaration generates. In one process per
# framework, which imports it once: a runner's start imports it twice (its own process, then the checking one).
CHECK_PLUGINS = """
import json, sys
from pathlib import Path
from fwbench_core.declaration import read_declaration
from fwbench_core.models import ModelSource
from fwbench_core.plugin_modules import PluginError, import_builder
from fwbench_{framework}.models import MODELS
errors = {{}}
for folder in sorted(Path(sys.argv[1]).iterdir()):
    spec = read_declaration(folder, ModelSource("--models-dir", str(folder)))
    try:
        builder = MODELS.make_plugin_builder(import_builder(folder, "{framework}", spec.name), folder)
        if spec.generates:
            MODELS.check_plugin_decoder(builder, spec)
        errors[spec.name] = ""
    except PluginError as error:
        errors[spec.name] = str(error)
print(json.dumps(errors))
"""


def declaration(name: str, generates: bool) -> str:
    """tiny_decoder's declaration under `name`, saying whether it generates."""
    text = (EXAMPLE_MODELS / MODEL / "model.toml").read_text().replace(f'"{MODEL}"', f'"{name}"')
    return text.replace("generates = true", f"generates = {str(generates).lower()}")


@pytest.fixture(scope="module")
def plugin_checks(tmp_path_factory):
    """Each framework's check (CHECK_PLUGINS) of a models folder: a decoder without the cache interface, and the same
    builders declared as a model that does not generate. Started by the module's first runner test, so that the
    frameworks' imports run beside the runners' starts, which keep one core of two busy; the last test reads them."""
    models, outputs = tmp_path_factory.mktemp("models"), tmp_path_factory.mktemp("checks")
    write_plugin(models, "plain_decoder", NO_CACHE_BUILDERS, declaration("plain_decoder", True))
    write_plugin(models, "plain_lm", NO_CACHE_BUILDERS, declaration("plain_lm", False))
    checks = {}
    for framework in REAL_RUNNERS:
        with (outputs / f"{framework}.out").open("w") as out, (outputs / f"{framework}.err").open("w") as err:
            python = launch.default_venvs() / framework / "bin" / "python"
            command = [str(python), "-c", CHECK_PLUGINS.format(framework=framework), str(models)]
            checks[framework] = subprocess.Popen(command, stdout=out, stderr=err)
    yield models, outputs, checks
    for check in checks.values():
        if check.poll() is None:  # a test before the last failed
            check.kill()
            check.wait()


@pytest.mark.frameworks
@pytest.mark.parametrize("framework", REAL_RUNNERS)
def test_each_runner_generates_with_the_plugin_decoder(runner_pool, plugin_checks, framework):
    with grpc.insecure_channel(runner_pool.get(framework).address) as channel:
        config, summary = run(
            pb_grpc.RunnerStub(channel), model=MODEL, mode=pb.MODE_GENERATE, input_shape=[PROMPT], new_tokens=NEW_TOKENS
        )
    assert (config.mode, config.new_tokens) == (pb.MODE_GENERATE, NEW_TOKENS)
    generation = summary.generation
    assert (generation.new_tokens, generation.prompt_tokens) == (NEW_TOKENS, PROMPT)
    assert len(generation.first_prompt_tokens) == NEW_TOKENS, generation
    assert all(0 <= token < SERVED_SPECS[MODEL].vocab_size for token in generation.first_prompt_tokens), generation
    assert generation.decode_tokens_per_s > 0 and generation.median_time_to_first_token_s > 0, generation


@pytest.mark.frameworks
def test_from_pytorchs_weights_every_runner_chooses_pytorchs_greedy_tokens(runner_pool):
    """fwbench parity's exchange, at a short prompt: the torch runner exports its weights, logits and greedy tokens;
    each other runner loads the weights, generates from the same prompts and matches every token."""
    request = pb.ReferenceRequest(model=MODEL, input_shape=[PROMPT], batch_size=2, name=f"{MODEL}-tokens.npz")
    with RunnerClient("torch", runner_pool.get("torch").address) as torch_client:
        torch_client.export_reference(request)
    for other in REAL_RUNNERS:
        if other != "torch":
            with RunnerClient(other, runner_pool.get(other).address) as client:
                compared = client.compare_reference(request)
            assert compared.matched, (other, compared)
            tokens = tokens_text(compared.tokens_compared, compared.first_token_divergence)
            assert tokens == f"identical ({2 * PARITY_NEW_TOKENS})", (other, compared)


@pytest.mark.frameworks
def test_in_bf16_every_runner_generates_from_pytorchs_weights_and_reports_where_its_tokens_diverge(runner_pool):
    """fwbench parity --precision amp_bf16's exchange: the torch runner's tokens generated under autocast, each other
    runner's in its own bf16 (Keras' mixed_bfloat16 policy, Flax's bfloat16 dtype) from the same weights; the outputs
    still compared in fp32 decide, and the tokens say where they first diverge, if anywhere."""
    request = pb.ReferenceRequest(
        model=MODEL, input_shape=[PROMPT], batch_size=2, name=f"{MODEL}-bf16.npz", precision=pb.PRECISION_AMP_BF16
    )
    with RunnerClient("torch", runner_pool.get("torch").address) as torch_client:
        torch_client.export_reference(request)
    with np.load(runner_pool.reference_dir / request.name) as stored:
        tokens = stored[tokens_key(Precision.AMP_BF16)]
    assert tokens.shape == (2, PARITY_NEW_TOKENS) and ((0 <= tokens) & (tokens < SERVED_SPECS[MODEL].vocab_size)).all()
    for other in REAL_RUNNERS:
        if other != "torch":
            with RunnerClient(other, runner_pool.get(other).address) as client:
                compared = client.compare_reference(request)
            assert compared.matched and compared.tokens_compared == 2 * PARITY_NEW_TOKENS, (other, compared)
            assert -1 <= compared.first_token_divergence < PARITY_NEW_TOKENS, (other, compared)


@pytest.mark.frameworks
def test_each_runner_refuses_a_plugin_that_declares_it_generates_without_the_cache_interface(plugin_checks):
    models, outputs, checks = plugin_checks
    for framework, check in checks.items():
        assert check.wait(CHECK_TIMEOUT_S) == 0, (outputs / f"{framework}.err").read_text()[-3000:]
        errors = json.loads((outputs / f"{framework}.out").read_text().splitlines()[-1])
        # The refusal is the declaration's: the same builders serve a model that does not generate.
        assert errors["plain_lm"] == "", (framework, errors)
        error = errors["plain_decoder"]
        assert f"{models.resolve()}/plain_decoder/{MISSING[framework]}" in error, error
        assert "docs/your-model.md" in error, error


# --- the core's part, with no framework: a check of decoders that the runner's start makes at load ----------------


def build_function(module, folder):
    """The test framework's builder: its module's build function."""
    return builder_attribute(module, folder, "test", "build", "spec, input_shape, options")


def check_decoder(build, spec) -> None:
    """The test framework's cache interface: what its build() returns has empty_caches."""
    if not hasattr(build(spec, spec.default_input_shape, {}), "empty_caches"):
        raise PluginError(f"{spec.name}: no empty_caches")


def test_a_runners_start_refuses_a_decoder_its_check_refuses_and_lists_why(tmp_path):
    decoder = "class Decoder:\n    def empty_caches(self):\n        pass\n\n\ndef build(spec, input_shape, options):\n"
    decoder += "    return Decoder()\n"
    for name, generates, builder in [
        ("decoder", True, decoder),
        ("no_cache", True, GOOD_BUILDER),
        ("no_decoder", False, GOOD_BUILDER),  # checked for nothing it does not declare
    ]:
        write_plugin(tmp_path, name, {"test": builder}, declaration(name, generates))
    catalog = load_catalog(
        ModelRegistry("test", build_function, check_decoder), [PluginLocation(tmp_path, MODELS_DIR_FLAG)]
    )
    assert catalog.names() == ["decoder", "no_decoder"]
    assert {Path(r.folder).name: r.error for r in catalog.plugins}["no_cache"] == "no_cache: no empty_caches"
    with pytest.raises(FailedPrecondition, match="failed to load: no_cache: no empty_caches"):
        catalog.spec("no_cache")
