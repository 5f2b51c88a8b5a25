"""Greedy generation (Mode.GENERATE) for the JAX runner's decoders, with a preallocated static key-value cache.

A decoder module (gpt2_small, llama_small, a plug-in's that declares it generates) takes, beside its tokens, the position of the first one and its caches,
and returns the caches with the new keys and values written (lax.dynamic_update_slice). The state of a request is
plain arrays: the caches, sized prompt + new tokens once and reused by every request, the tokens chosen so far and
how many. Prefill and decode step are pure functions of (weights, state) -> state; jitted, the state is donated, so
XLA writes the cache in place and every decode step, whatever its position (a traced scalar), is one compiled
program. Eager, each operation is dispatched on its own and every write makes a new cache array.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fwbench_core.errors import FailedPrecondition
from fwbench_core.models import ModelSpec
from fwbench_core.references import PARITY_NEW_TOKENS, parity_prompt_length

# What a decoder's module provides, a built-in's or a plug-in's.
CACHE_INTERFACE = "empty_caches(batch_size, length, dtype) beside __call__(ids, train, caches, offset)"
# What an eager generation does that a compiled one does not (the run's flags show it).
EAGER_CACHE_NOTE = "eager generation: each decode step copies the key-value cache (jax.jit alone updates it in place)"


def can_generate(module: nn.Module) -> bool:
    return callable(getattr(module, "empty_caches", None))


def greedy(logits: jax.Array) -> jax.Array:
    """Each prompt's next token: the largest logit at the last position (the first of equal ones, as torch.argmax)."""
    return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)


def make_steps(module: nn.Module, prompt_length: int):
    """prefill(variables, prompts, state) and decode(variables, state), each returning the new state."""

    def prefill(variables, prompts: jax.Array, state: dict) -> dict:
        logits, caches = module.apply(variables, prompts, False, state["caches"], 0)
        tokens = jnp.zeros_like(state["tokens"]).at[:, 0].set(greedy(logits))
        return dict(caches=caches, tokens=tokens, chosen=jnp.ones_like(state["chosen"]))

    def decode(variables, state: dict) -> dict:
        chosen = state["chosen"]
        last = jax.lax.dynamic_slice_in_dim(state["tokens"], chosen - 1, 1, axis=1)
        # The last chosen token sits at the position after the prompt and the tokens before it.
        logits, caches = module.apply(variables, last, False, state["caches"], prompt_length + chosen - 1)
        tokens = jax.lax.dynamic_update_slice_in_dim(state["tokens"], greedy(logits)[:, None], chosen, axis=1)
        return dict(caches=caches, tokens=tokens, chosen=chosen + 1)

    return prefill, decode


class Generation:
    """One batch of prompts and its cache on a device: prefill() starts a request, decode_step() adds a token to
    every prompt, tokens() reads the request's tokens to the host. Steps return before the device finishes."""

    def __init__(
        self, module: nn.Module, variables, prompts: jax.Array, new_tokens: int, jit: bool, placement: Any
    ) -> None:
        """`placement`: where the state lives, a device or the sharding the weights have; the steps return it so, and
        a state placed otherwise at first would compile the prefill again for the second request."""
        if not can_generate(module):
            raise FailedPrecondition(
                f"{type(module).__name__} cannot generate in the JAX runner: it has no {CACHE_INTERFACE}"
            )
        batch, prompt_length = prompts.shape
        self.variables, self.prompts = variables, prompts
        state = dict(
            caches=module.empty_caches(batch, prompt_length + new_tokens),
            tokens=jnp.zeros((batch, new_tokens), jnp.int32),
            chosen=jnp.int32(0),
        )
        self.state = jax.device_put(state, placement)
        prefill, decode = make_steps(module, prompt_length)
        # The state's buffers are given to the state returned: the cache is written where it is.
        self._prefill = jax.jit(prefill, donate_argnums=2) if jit else prefill
        self._decode = jax.jit(decode, donate_argnums=1) if jit else decode

    def prefill(self) -> None:
        self.state = self._prefill(self.variables, self.prompts, self.state)

    def decode_step(self) -> None:
        self.state = self._decode(self.variables, self.state)

    def tokens(self) -> np.ndarray:
        return np.asarray(self.state["tokens"])


def generate(module: nn.Module, variables, prompts: jax.Array, new_tokens: int, jit: bool, device: Any) -> np.ndarray:
    """A whole request: `new_tokens` greedy tokens per prompt, (batch, new_tokens) int32 on the host."""
    generation = Generation(module, variables, prompts, new_tokens, jit, device)
    generation.prefill()
    for _ in range(new_tokens - 1):
        generation.decode_step()
    return generation.tokens()


def parity_tokens(module: nn.Module, variables, inputs: np.ndarray, spec: ModelSpec, device: Any) -> np.ndarray:
    """The tokens a parity reference of `spec` holds, as the torch runner exports them: PARITY_NEW_TOKENS greedy per
    prompt (in the module's dtype), the prompts the reference's input cut where they would pass the model's longest
    sequence."""
    prompts = jnp.asarray(inputs[:, : parity_prompt_length(spec, inputs.shape[1])], jnp.int32)
    return generate(module, variables, prompts, PARITY_NEW_TOKENS, True, device)
