"""Both real runners build the same networks: shown by the runners themselves, at each model's default shape."""

from __future__ import annotations

import pytest
from fwbench_aggregator.client import RunnerClient
from fwbench_aggregator.parity import FLOPS_TOLERANCE, PARAMETER_TOLERANCE, Variant, check_variant
from fwbench_core.catalog import MODEL_SPECS
from fwbench_core.spec import HEAD_OPTION

# Models whose TensorFlow definition loads PyTorch's weights: their outputs must agree numerically.
NUMERIC_PARITY = {"resnet18", "mobilenet_v2", "vgg16", "bert_base", "lstm_lm", "deepspeech2", "wav2vec2_base"}


def all_variants() -> list[Variant]:
    out = []
    for name, spec in sorted(MODEL_SPECS.items()):
        heads = [head for head, _ in spec.heads]
        out += [Variant(name, {HEAD_OPTION: head} if len(heads) > 1 else {}) for head in heads]
    return out


@pytest.fixture(scope="module")
def clients(runner_pool):
    torch = RunnerClient("torch", runner_pool.get("torch").address)
    tensorflow = RunnerClient("tensorflow", runner_pool.get("tensorflow").address)
    yield torch, tensorflow
    torch.close()
    tensorflow.close()


@pytest.mark.parametrize("variant", all_variants(), ids=lambda v: v.label.replace(" ", "-"))
def test_same_network_in_both_runners(variant, clients):
    row = check_variant(variant, *clients)
    assert row["params_gap"] <= PARAMETER_TOLERANCE, row
    assert row["flops_gap"] <= FLOPS_TOLERANCE, row
    assert row["flops_torch"] > 0 and row["params_torch"] > 0, row
    assert row["outputs_equal"], row
    spec = MODEL_SPECS[variant.model]
    assert row["input_shape"] == "x".join(map(str, spec.default_input_shape))
    if variant.model in NUMERIC_PARITY:
        assert row["numeric"] == "match", row
    assert row["verdict"] == "same", row
