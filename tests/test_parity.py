"""Every real runner builds the same networks as the torch runner: shown by the runners themselves, at each
model's default shape, for the built-ins and the example plug-ins alike."""

from __future__ import annotations

import pytest
from support.runners import EXAMPLE_PLUGINS, KERAS_RUNNERS, REAL_RUNNERS
from support.runners import SERVED_SPECS as MODEL_SPECS

from fwbench_aggregator.analyse.parity import FLOPS_TOLERANCE, PARAMETER_TOLERANCE, judged
from fwbench_aggregator.run.client import RunnerClient
from fwbench_aggregator.run.parity import Variant, gather_variant

# Every test here runs a real framework runner.
pytestmark = pytest.mark.frameworks

# Per runner, the models whose definition loads PyTorch's weights: their outputs must agree numerically.
NUMERIC_PARITY = {
    "tensorflow": {
        "resnet18",
        "mobilenet_v2",
        "vgg16",
        "bert_base",
        "lstm_lm",
        "gpt2_small",
        "llama_small",
        "deepspeech2",
        "wav2vec2_base",
        "vit_b16",
        *EXAMPLE_PLUGINS,
    },
    "jax": set(MODEL_SPECS),
}
# The Keras runners build the TensorFlow runner's definitions, with its loaders: the same models agree numerically.
NUMERIC_PARITY.update(dict.fromkeys(KERAS_RUNNERS, NUMERIC_PARITY["tensorflow"]))


# What parity checks on a Keras runner: its models are the TensorFlow runner's definitions, checked here against
# torch model by model, and tests/test_keras_backends.py matches every built-in's outputs on each Keras backend to
# TensorFlow's; so here one built-in, to show the runner's own inspection, FLOP count and reference loading, and the
# example plug-ins written once in Keras (a Keras-only plug-in passes parity across the Keras runners).
KERAS_PARITY = ("resnet18", "tiny_cnn", "tiny_transformer")


def all_variants() -> list[Variant]:
    """Each choice of each option (a head, a size), the others at their defaults, as `fwbench parity` checks them."""
    out = []
    for name, spec in sorted(MODEL_SPECS.items()):
        out += [Variant(name, {o.name: choice}) for o in spec.options for choice in o.choices] or [Variant(name, {})]
    return out


@pytest.fixture(scope="module")
def torch_client(runner_pool):
    with RunnerClient("torch", runner_pool.get("torch").address) as client:
        yield client


@pytest.fixture(scope="module", params=[name for name in REAL_RUNNERS if name != "torch"])
def other_client(request, runner_pool):
    with RunnerClient(request.param, runner_pool.get(request.param).address) as client:
        yield client


@pytest.mark.parametrize("variant", all_variants(), ids=lambda v: v.label.replace(" ", "-"))
def test_same_network_in_both_runners(variant, torch_client, other_client):
    assert_same_network(variant, torch_client, other_client)


@pytest.mark.parametrize(
    "name, variant",
    [
        pytest.param(name, variant, id=f"{name}-{variant.label.replace(' ', '-')}")
        for name in KERAS_RUNNERS
        for variant in all_variants()
        if variant.model in KERAS_PARITY
    ],
)
def test_a_keras_runner_builds_the_same_network_as_torch(name, variant, torch_client, runner_pool):
    with RunnerClient(name, runner_pool.get(name).address) as client:
        assert_same_network(variant, torch_client, client)


def assert_same_network(variant: Variant, torch_client: RunnerClient, other_client: RunnerClient) -> None:
    row = judged([gather_variant(variant, torch_client, other_client)], "torch", other_client.name).iloc[0].to_dict()
    assert row["params_gap"] <= PARAMETER_TOLERANCE, row
    assert row["flops_gap"] <= FLOPS_TOLERANCE, row
    assert row["flops_torch"] > 0 and row["params_torch"] > 0, row
    assert row["outputs_equal"], row
    spec = MODEL_SPECS[variant.model]
    assert row["input_shape"] == "x".join(map(str, spec.default_input_shape))
    if variant.model in NUMERIC_PARITY[other_client.name]:
        assert row["numeric"] == "match", row
    assert row["verdict"] == "same", row
