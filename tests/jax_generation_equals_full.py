"""Run from the JAX environment by test_generation_jax.py: the JAX runner's generation workload for MODEL (gpt2_small,
or llama_small at size tiny) takes two requests as the core times them, jitted and eager, and full forward passes
without a cache choose the same number of greedy tokens from the same weights and prompts. Prints (as JSON) each
request's tokens, what the second compiled and the workload's notes per compilation, and the uncached tokens.

Usage: python jax_generation_equals_full.py MODEL"""

from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp

from fwbench_core.architectures import GPT2
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.choices import Compilation, Mode, Precision
from fwbench_core.devices import RunnerSettings
from fwbench_core.runs import RunConfig
from fwbench_core.sysinfo import cpu_device
from fwbench_jax.backend import JaxBackend

OPTIONS = {"gpt2_small": {}, "llama_small": {"size": "tiny"}}
BATCH, PROMPT, NEW_TOKENS = 2, 6, 6
# gpt2_small has no small size: its code path (learned positions, the tied decoder, the cache) checked at two
# narrow layers, a tenth of its full size's time here (35 s at full size in JAX on this 2-core CPU).
GPT2_CHECKED = dict(layers=2, hidden=128, heads=2, ffn=512)


def uncached_tokens(workload, new_tokens: int) -> list[list[int]]:
    """Greedy tokens from one forward pass over the whole sequence so far for every token: no cache at all."""
    forward = jax.jit(lambda variables, ids: workload.module.apply(variables, ids, train=False))
    sequence = workload.inputs
    for _ in range(new_tokens):
        logits = forward(workload.variables, sequence)
        chosen = jnp.argmax(logits[:, -1], axis=-1).astype(sequence.dtype)
        sequence = jnp.concatenate([sequence, chosen[:, None]], axis=1)
    return sequence[:, -new_tokens:].tolist()


def workload_tokens(workload, new_tokens: int) -> list[list[int]]:
    """One request as the core times it."""
    workload.prefill()
    workload.synchronize()
    for _ in range(new_tokens - 1):
        workload.decode_step()
        workload.synchronize()
    return workload.generated_tokens()


# XLA compiles a program: what a compiled request after the first must not do.
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def check(model: str) -> dict:
    GPT2.update(GPT2_CHECKED)
    compiles: list[str] = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration_s, **_: compiles.append(event) if event == COMPILE_EVENT else None
    )
    cores = os.cpu_count() or 1
    backend = JaxBackend(RunnerSettings(cores, cores))  # XLA's CPU runtime takes every core; it refuses fewer
    result: dict = {}
    for compilation in (Compilation.XLA, Compilation.EAGER):
        config = RunConfig(
            model=MODEL_SPECS[model],
            mode=Mode.GENERATE,
            batch_size=BATCH,
            input_shape=(PROMPT,),
            precision=Precision.FP32,
            device=cpu_device(),
            warmup_steps=0,
            measured_steps=1,
            seed=3,
            model_options=OPTIONS[model],
            compilation=compilation,
            new_tokens=NEW_TOKENS,
        )
        workload = backend.build(config)
        first = workload_tokens(workload, NEW_TOKENS)
        compiled_before = len(compiles)
        # The second request finds the first one's keys and values in the cache: they must not change its tokens.
        second = workload_tokens(workload, NEW_TOKENS)
        result[compilation.value] = {
            "requests": [first, second],
            "second_request_compiles": len(compiles) - compiled_before,
            "notes": list(workload.notes),
        }
        # Both builds draw the same weights and prompts from the seed: one uncached generation serves both.
        if compilation is Compilation.XLA:
            result["uncached"] = uncached_tokens(workload, NEW_TOKENS)
        workload.close()
    return result


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1])))
