"""The JAX runner's generation: its workload's cached greedy decoding (a prefill, then a token at a time from the
static key-value cache, jitted or eager) chooses the tokens that recomputing the whole sequence's logits for every
token chooses, for both decoders; and from PyTorch's weights every decoder that declares it generates gives PyTorch's
greedy tokens (fwbench parity's check)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fwbench.runner.v1 import runner_pb2 as pb

from fwbench_aggregator.run import launch
from fwbench_aggregator.run.client import RunnerClient
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.references import PARITY_NEW_TOKENS

HERE = Path(__file__).resolve().parent
DECODERS = ["gpt2_small", "llama_small"]
OPTIONS = {"llama_small": {"size": "tiny"}}
# Parity exports and compares tokens for the models that declare they generate (validation refuses the others).
DECLARED_DECODERS = sorted(name for name, spec in MODEL_SPECS.items() if spec.generates)
# The worker's batch and new tokens (jax_generation_equals_full.py).
BATCH, NEW_TOKENS = 2, 6
# JAX's start, GPT-2 small's weights drawn twice, and each way of generating compiled or dispatched op by op.
CHECK_TIMEOUT_S = 600


@pytest.mark.frameworks
@pytest.mark.parametrize("model", DECODERS)
def test_cached_generation_chooses_the_tokens_of_full_passes(model):
    python = launch.default_venvs() / "jax" / "bin" / "python"
    done = subprocess.run(
        [str(python), str(HERE / "jax_generation_equals_full.py"), model],
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    uncached = result["uncached"]
    assert len(uncached) == BATCH and all(len(tokens) == NEW_TOKENS for tokens in uncached), uncached
    # Two requests each: the second runs over the first one's cache.
    assert result["xla"]["requests"] == [uncached, uncached], result
    assert result["eager"]["requests"] == [uncached, uncached], result
    # Compiled once, in the first request: the decode step whatever its position, the prefill whatever cache it finds.
    assert result["xla"]["second_request_compiles"] == 0, result
    assert result["xla"]["notes"] == [] and "copies the key-value cache" in result["eager"]["notes"][0]


@pytest.mark.frameworks
# gpt2_small, which has no tiny size, is compared at its full size by test_parity.py, whose numeric match includes
# its greedy tokens.
@pytest.mark.parametrize("model", sorted(set(DECLARED_DECODERS) - {"gpt2_small"}))
def test_from_pytorchs_weights_jax_generates_pytorchs_tokens(runner_pool, model):
    """fwbench parity's exchange at a short prompt: the torch runner exports its weights, input, logits and greedy
    tokens; the JAX runner loads the weights, generates from the same prompts and matches every token."""
    request = pb.ReferenceRequest(
        model=model, input_shape=[12], model_options=OPTIONS.get(model, {}), batch_size=2, name=f"gen-{model}.npz"
    )
    with RunnerClient("torch", runner_pool.get("torch").address) as torch_client:
        torch_client.export_reference(request)
    with RunnerClient("jax", runner_pool.get("jax").address) as jax_client:
        compared = jax_client.compare_reference(request)
    assert (compared.tokens_compared, compared.first_token_divergence) == (2 * PARITY_NEW_TOKENS, -1), compared
    assert compared.matched, compared
