"""The TensorFlow runner's generation: its cached greedy decoding chooses the tokens that full forward passes without
a cache choose, eager, as a tf.function and under XLA, request after request; and it generates the torch runner's
tokens from the torch runner's weights, as fwbench parity compares them."""

from __future__ import annotations

import inspect
import json
import subprocess
import textwrap

import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.runners import SERVED_SPECS

from fwbench_aggregator.base import frameworks
from fwbench_aggregator.run import launch
from fwbench_aggregator.run.client import RunnerClient
from fwbench_core.references import PARITY_NEW_TOKENS

pytestmark = pytest.mark.frameworks

TINY_OPTIONS = {"gpt2_small": {}, "llama_small": {"size": "tiny"}}
# TensorFlow's start, a decoder's build, and its tokens generated four ways.
CHECK_TIMEOUT_S = 600


def cached_and_full_tokens(model_name: str, options: dict[str, str]) -> dict[str, list]:
    """Run in TensorFlow's environment (self-contained: the test sends its source). Greedy tokens from one set of
    weights: by full forward passes over the whole sequence, recomputed for every token, and by the runner's cached
    generation, eager, graph and XLA, each twice from the same cache (the second request overwrites the first's)."""
    from functools import partial

    import keras
    import numpy as np
    import tensorflow as tf

    from fwbench_core.architectures import GPT2
    from fwbench_core.builtin import MODEL_SPECS
    from fwbench_core.choices import Compilation
    from fwbench_tensorflow.generation import Generation, decoder_for
    from fwbench_tensorflow.models import MODELS
    from fwbench_tensorflow.workload import compiled

    batch, prompt, new_tokens = 2, 8, 6
    # gpt2_small has no small size: its code path checked at two narrow layers, a fraction of its full size's time.
    GPT2.update(layers=2, hidden=128, heads=2, ffn=512)
    spec = MODEL_SPECS[model_name]
    keras.utils.set_random_seed(0)
    model = MODELS.builder(spec).build(spec, (prompt + new_tokens,), options)
    # Matrices three times the initialisation's: attention then looks at some positions more than others, so that a
    # token written or read at the wrong position changes the tokens chosen (at the initialisation it hardly does).
    model.set_weights([w * 3 if w.ndim > 1 else w for w in model.get_weights()])
    prompts = np.random.default_rng(0).integers(0, spec.vocab_size, (batch, prompt), dtype=np.int32)
    # Without a cache: the whole sequence each time; causal, so the positions not chosen yet change nothing before.
    sequence = np.zeros((batch, prompt + new_tokens), np.int32)
    sequence[:, :prompt] = prompts
    for position in range(prompt, prompt + new_tokens):
        logits = model(sequence, training=False).numpy()
        sequence[:, position] = logits[:, position - 1].argmax(axis=-1)
    tokens = {"full": sequence[:, prompt:].tolist()}
    for compilation in (Compilation.EAGER, Compilation.GRAPH, Compilation.XLA):
        generation = Generation(
            decoder_for(spec, model), tf.constant(prompts), new_tokens, partial(compiled, compilation=compilation)
        )
        for request in range(2):
            generation.prefill()
            for _ in range(new_tokens - 1):
                generation.decode_step()
            tokens[f"{compilation.value} request {request}"] = generation.tokens().tolist()
    return tokens


@pytest.mark.parametrize("model", sorted(TINY_OPTIONS))
def test_cached_generation_chooses_the_tokens_of_full_passes(model):
    environment = next(f.environment for f in frameworks.shipped() if f.name == "tensorflow")
    python = launch.default_venvs() / environment / "bin" / "python"
    source = textwrap.dedent(inspect.getsource(cached_and_full_tokens))
    call = f"import json\nprint(json.dumps(cached_and_full_tokens({model!r}, {TINY_OPTIONS[model]!r})))"
    done = subprocess.run(
        [str(python), "-c", f"from __future__ import annotations\n{source}\n{call}"],
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tokens = json.loads(done.stdout.splitlines()[-1])
    full = tokens.pop("full")
    assert len(full) == 2 and all(len(row) == 6 for row in full)
    assert tokens and all(chosen == full for chosen in tokens.values()), (full, tokens)


@pytest.fixture(scope="module")
def clients(runner_pool):
    with (
        RunnerClient("torch", runner_pool.get("torch").address) as torch_client,
        RunnerClient("tensorflow", runner_pool.get("tensorflow").address) as tensorflow_client,
    ):
        yield torch_client, tensorflow_client


# The decoders at their tiny sizes; gpt2_small, which has none, is compared at its full size by test_parity.py, whose
# numeric match includes its greedy tokens.
@pytest.mark.parametrize(
    "model", sorted(name for name, spec in SERVED_SPECS.items() if spec.generates and name != "gpt2_small")
)
def test_tensorflow_generates_the_torch_runners_tokens(model, clients):
    """The torch runner exports its weights and greedy tokens; TensorFlow loads the weights and generates the same."""
    torch_client, tensorflow_client = clients
    request = pb.ReferenceRequest(
        model=model,
        model_options=TINY_OPTIONS.get(model, {}),
        input_shape=[12],
        batch_size=2,
        name=f"generation-{model}.npz",
    )
    torch_client.export_reference(request)
    compared = tensorflow_client.compare_reference(request)
    assert compared.tokens_compared == 2 * PARITY_NEW_TOKENS, compared
    assert compared.first_token_divergence == -1 and compared.matched, compared
