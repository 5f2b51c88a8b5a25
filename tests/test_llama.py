"""llama_small, the Llama-style decoder: its sizes are its `size` option, each runner builds it with the parameters and
FLOPs the sizes give and takes training and inference steps, and each decodes with its key-value cache to the logits
of one pass over the whole sequence. Its parity across runners (logits from shared weights) is test_parity.py's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.requests import MEASURED, run
from support.runners import REAL_RUNNERS

from fwbench_aggregator.base import frameworks
from fwbench_aggregator.run import launch
from fwbench_aggregator.run.client import RunnerClient
from fwbench_core.architectures import LLAMA_SIZE_OPTION, LLAMA_SIZES
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.choices import Objective
from fwbench_core.fairness import REFERENCE_TOLERANCE
from fwbench_core.models import ModelOption

HERE = Path(__file__).resolve().parent
SPEC = MODEL_SPECS["llama_small"]
TINY = {LLAMA_SIZE_OPTION: "tiny"}
SEQ = 16
# A framework's start, the tiny model's build and a few compiled decoding steps.
CACHE_CHECK_TIMEOUT_S = 300


def parameter_count(size: dict[str, int], vocab: int) -> int:
    """Embedding, per layer the attention's four projections, the SwiGLU's three and two norms, the final norm and
    the untied LM head; no biases."""
    hidden, head_dim = size["hidden"], size["hidden"] // size["heads"]
    layer = hidden * head_dim * 2 * (size["heads"] + size["kv_heads"]) + 3 * hidden * size["mlp"] + 2 * hidden
    return vocab * hidden + size["layers"] * layer + hidden + hidden * vocab


def forward_flops(size: dict[str, int], vocab: int, seq: int) -> int:
    """2 x multiply-accumulates per sample: every token through every matrix, and the attention's two products
    over every query head and every pair of positions (the causal half is computed and masked, in every runner)."""
    hidden, head_dim = size["hidden"], size["hidden"] // size["heads"]
    per_token = (
        size["layers"] * (hidden * head_dim * 2 * (size["heads"] + size["kv_heads"]) + 3 * hidden * size["mlp"])
        + hidden * vocab
    )
    attention = size["layers"] * 2 * size["heads"] * seq * seq * head_dim
    return 2 * (seq * per_token + attention)


def test_the_sizes_are_the_size_option_and_fit_the_declaration():
    assert SPEC.options == (ModelOption(LLAMA_SIZE_OPTION, tuple(LLAMA_SIZES)),)
    assert [(head.objective, head.outputs) for _, head in SPEC.heads] == [(Objective.TOKEN_CE, SPEC.vocab_size)]
    for size in LLAMA_SIZES.values():
        assert size["hidden"] % size["heads"] == 0 and size["heads"] % size["kv_heads"] == 0
        assert (size["hidden"] // size["heads"]) % 2 == 0, "rotary embeddings turn a head's two halves together"
        assert size["max_positions"] == SPEC.max_input_shape[0]
    # The default is GPT-2 small's size, the other decoder; tiny is for a CPU.
    assert parameter_count(LLAMA_SIZES["small"], SPEC.vocab_size) == 124_668_672
    assert parameter_count(LLAMA_SIZES["tiny"], SPEC.vocab_size) < 5_000_000


@pytest.mark.frameworks
@pytest.mark.parametrize("size", sorted(LLAMA_SIZES))
@pytest.mark.parametrize("framework", REAL_RUNNERS)
def test_each_runner_counts_the_parameters_and_flops_the_sizes_give(runner_pool, framework, size):
    with RunnerClient(framework, runner_pool.get(framework).address) as client:
        report = client.inspect("llama_small", input_shape=(SEQ,), model_options={LLAMA_SIZE_OPTION: size})
    assert report.parameter_count == parameter_count(LLAMA_SIZES[size], SPEC.vocab_size)
    assert report.forward_flops == forward_flops(LLAMA_SIZES[size], SPEC.vocab_size, SEQ)
    assert tuple(report.output_shape) == (SEQ, SPEC.vocab_size)


@pytest.mark.frameworks
@pytest.mark.parametrize("mode", [pb.MODE_TRAIN, pb.MODE_INFER], ids=["train", "infer"])
@pytest.mark.parametrize("framework", REAL_RUNNERS)
def test_each_runner_steps_the_tiny_decoder(runner_pool, framework, mode):
    with grpc.insecure_channel(runner_pool.get(framework).address) as channel:
        config, summary = run(
            pb_grpc.RunnerStub(channel),
            model="llama_small",
            model_options=TINY,
            input_shape=[SEQ],
            batch_size=2,
            mode=mode,
        )
    assert dict(config.model_options) == TINY
    assert summary.measured_steps == MEASURED and summary.mean_step_time_s > 0


@pytest.mark.frameworks
@pytest.mark.parametrize("framework", REAL_RUNNERS)
def test_decoding_with_the_cache_gives_the_logits_of_the_whole_sequence(framework):
    """A prompt's prefill, then one token at a time (compiled, at a tensor offset, where the framework compiles),
    into a cache longer than the tokens: the logits of one pass over them all, within parity's tolerance."""
    environment = next(f.environment for f in frameworks.shipped() if f.name == framework)
    python = launch.default_venvs() / environment / "bin" / "python"
    done = subprocess.run(
        [str(python), str(HERE / "llama_cache_equals_full.py"), framework],
        capture_output=True,
        text=True,
        timeout=CACHE_CHECK_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["max_abs_logit"] > 0
    assert result["max_abs_diff"] <= REFERENCE_TOLERANCE * result["max_abs_logit"], result
