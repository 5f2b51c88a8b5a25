"""vit_b16 (ViT-B/16): the patch grid its position embeddings are sized from, and every real runner running it at
3x32x32 and agreeing with torch at a tiny shape. test_conformance trains it in every runner, and test_parity checks
it at its default shape, 3x224x224, as every model."""

from __future__ import annotations

import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.runners import REAL_RUNNERS

from fwbench_aggregator.analyse.parity import judged
from fwbench_aggregator.base.vocabulary import shape_text
from fwbench_aggregator.run.client import RunnerClient, RunnerFailure
from fwbench_aggregator.run.parity import Variant
from fwbench_core.architectures import vit_patch_grid
from fwbench_core.errors import InvalidArgument

MODEL = "vit_b16"
SMALL = (3, 32, 32)
# Wider than high, so that a runner taking patches column by column, or sizing its position embeddings from one
# side, gives other outputs or another parameter count than torch's.
TINY_WIDE = (3, 32, 64)
# torchvision's vit_b_16 has 86,567,656 parameters at 224x224, 197 position embeddings of 768 among them (196
# patches and the class token); at 3x32x64 there are 8 patches and the class token.
TINY_WIDE_PARAMETERS = 86_567_656 - (197 - 9) * 768


def test_the_grid_is_the_image_in_whole_patches_row_by_row():
    assert vit_patch_grid(224, 224) == (14, 14)
    assert vit_patch_grid(32, 64) == (2, 4)


@pytest.mark.parametrize("height, width", [(40, 32), (32, 24), (225, 224)])
def test_a_side_that_is_not_whole_patches_is_refused_naming_both(height, width):
    with pytest.raises(InvalidArgument, match=f"multiples of 16, got {height}x{width}$"):
        vit_patch_grid(height, width)


@pytest.fixture(scope="module", params=REAL_RUNNERS)
def client(request, runner_pool):
    with RunnerClient(request.param, runner_pool.get(request.param).address) as client:
        yield client


@pytest.fixture(scope="module")
def torch_client(runner_pool):
    with RunnerClient("torch", runner_pool.get("torch").address) as client:
        yield client


@pytest.mark.frameworks
def test_each_runner_infers_at_3x32x32(client):
    """Training is test_conformance's: it trains every model in every runner at its minimum shape, 3x32x32 here, batch
    2; inference there runs one model per input convention."""
    request = pb.RunRequest(
        model=MODEL,
        mode=pb.MODE_INFER,
        batch_size=2,
        input_shape=SMALL,
        device=pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=0),
        warmup_steps=1,
        measured_steps=2,
        min_measure_s=0.0,
    )
    result = client.run(request)
    assert result.config.model == MODEL and tuple(result.config.input_shape) == SMALL
    assert result.summary.measured_steps == 2 and result.summary.median_step_time_s > 0


@pytest.mark.frameworks
def test_each_runner_refuses_an_image_that_is_not_whole_patches(client):
    with pytest.raises(RunnerFailure) as refused:
        client.inspect(MODEL, input_shape=(3, 40, 32))
    assert refused.value.code == "INVALID_ARGUMENT" and "multiples of 16, got 40x32" in refused.value.message


@pytest.mark.frameworks
@pytest.mark.parametrize("other", [name for name in REAL_RUNNERS if name != "torch"])
def test_same_network_as_torch_at_a_tiny_shape(other, torch_client, runner_pool):
    """run.parity.gather_variant's evidence, at TINY_WIDE rather than the default shape, judged as parity judges it."""
    variant = Variant(MODEL, {})
    row: dict = {"model": variant.label}
    with RunnerClient(other, runner_pool.get(other).address) as other_client:
        for client in (torch_client, other_client):
            report = client.inspect(MODEL, input_shape=TINY_WIDE)
            row[f"params_{client.name}"] = report.parameter_count
            row[f"flops_{client.name}"] = report.forward_flops
            row[f"output_{client.name}"] = shape_text(report.output_shape)
        reference = pb.ReferenceRequest(model=MODEL, name=variant.reference_name, input_shape=TINY_WIDE)
        torch_client.export_reference(reference)
        compared = other_client.compare_reference(reference)
    row["numeric"] = "match" if compared.matched else "MISMATCH"
    judgement = judged([row], "torch", other).iloc[0].to_dict()
    assert judgement["verdict"] == "same" and judgement["numeric"] == "match", (judgement, compared)
    assert row["params_torch"] == row[f"params_{other}"] == TINY_WIDE_PARAMETERS, row
    assert row["flops_torch"] == row[f"flops_{other}"] > 0, row
    assert compared.compared_values == 2 * 1000 and compared.max_rel_diff <= compared.tolerance, compared
