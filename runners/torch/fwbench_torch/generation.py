"""Greedy generation (Mode.GENERATE) for the torch runner's decoders (gpt2_small, llama_small, a plug-in's that
declares it generates), from a static key-value cache.

A decoder's forward takes, beside its tokens, its caches and the position of its first token, and writes the
tokens' keys and values into the caches in place (models/key_value_cache.py). The caches hold prompt + new tokens
positions, allocated once and reused by every request: a prefill writes the prompt's from position 0, each decode
step one more, and attention runs over the whole cache with the positions not yet written masked, so that every
decode step has the same shapes. Compiled, the prefill and the decode step are each torch.compile'd with static
shapes, the decode step's position a tensor: each compiles once, whatever the position. The chosen tokens stay on
the device until tokens() reads them.
"""

from __future__ import annotations

import torch

from fwbench_core.errors import FailedPrecondition

# What a decoder's module provides, a built-in's or a plug-in's.
CACHE_INTERFACE = "empty_caches(batch_size, length, dtype) beside forward(ids, caches, offset)"


def can_generate(model: torch.nn.Module) -> bool:
    return callable(getattr(model, "empty_caches", None))


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Each prompt's next token (B,): the largest logit at the last position (the first of equal ones)."""
    return logits[:, -1].argmax(dim=-1)


class Generation:
    """One batch of prompts (B, P) and its caches on their device: prefill() starts a request, decode_step() adds a
    token to every prompt, tokens() copies the request's tokens to the host. Steps return before the device is done.
    `cache_dtype`: autocast's, where the projections that fill the cache run in it; None: the weights'."""

    def __init__(
        self,
        model: torch.nn.Module,
        prompts: torch.Tensor,
        new_tokens: int,
        cache_dtype: torch.dtype | None = None,
        compiled: bool = False,
    ) -> None:
        if not can_generate(model):
            raise FailedPrecondition(
                f"{type(model).__name__} cannot generate in the torch runner: it has no {CACHE_INTERFACE}"
            )
        batch, self.prompt_length = prompts.shape
        self.prompts = prompts
        self.caches = model.empty_caches(batch, self.prompt_length + new_tokens, cache_dtype)
        self.chosen_tokens = torch.zeros((batch, new_tokens), dtype=torch.long, device=prompts.device)
        self.chosen = 0  # tokens chosen for each prompt in this request
        self.last = torch.zeros((batch, 1), dtype=torch.long, device=prompts.device)
        # Where the last chosen token goes in: a device scalar, so that neither the host waits nor a compiled step
        # specializes on it.
        self.position = torch.zeros((), dtype=torch.long, device=prompts.device)

        def prefill(prompts: torch.Tensor, caches: list) -> torch.Tensor:
            return greedy(model(prompts, caches, 0))

        def decode(last: torch.Tensor, caches: list, position: torch.Tensor) -> torch.Tensor:
            return greedy(model(last, caches, position))

        self._prefill = torch.compile(prefill, dynamic=False) if compiled else prefill
        self._decode = torch.compile(decode, dynamic=False) if compiled else decode

    def prefill(self) -> None:
        self.chosen = 0
        self._keep(self._prefill(self.prompts, self.caches))
        self.position.fill_(self.prompt_length)

    def decode_step(self) -> None:
        if self.chosen == self.chosen_tokens.shape[1]:
            raise FailedPrecondition(f"this request has all its {self.chosen} tokens: a prefill starts the next")
        self._keep(self._decode(self.last, self.caches, self.position))
        self.position += 1

    def _keep(self, token: torch.Tensor) -> None:
        self.chosen_tokens[:, self.chosen] = token
        self.last.copy_(token[:, None])
        self.chosen += 1

    def tokens(self) -> torch.Tensor:
        """The tokens chosen so far in this request, (B, chosen) int64 on the host."""
        return self.chosen_tokens[:, : self.chosen].cpu()


def generate(
    model: torch.nn.Module, prompts: torch.Tensor, new_tokens: int, autocast_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """A whole request, eager, in the weights' dtype or autocast to `autocast_dtype` (its cache in that dtype, as a
    run's): `new_tokens` greedy tokens per prompt, (B, new_tokens) int64 on the host."""
    generation = Generation(model, prompts, new_tokens, autocast_dtype)
    autocast = torch.autocast(prompts.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None)
    with torch.no_grad(), autocast:
        generation.prefill()
        for _ in range(new_tokens - 1):
            generation.decode_step()
    return generation.tokens()
