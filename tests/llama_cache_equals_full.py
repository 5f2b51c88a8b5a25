"""Run from a framework's environment by test_llama.py: llama_small (tiny) decodes with its key-value cache as a
generation will (a prompt's prefill at offset 0, then one token at a time, each step compiled where the framework
compiles, its offset a tensor), and its logits at every position are compared with one forward pass over the whole
sequence. Prints (as JSON) the largest absolute difference and the logits' largest magnitude.

Usage: python llama_cache_equals_full.py torch|tensorflow|jax"""

from __future__ import annotations

import json
import sys

import numpy as np

from fwbench_core.builtin import MODEL_SPECS

SPEC = MODEL_SPECS["llama_small"]
OPTIONS = {"size": "tiny"}
BATCH, PROMPT, DECODED = 2, 8, 4
# Longer than the tokens: positions past the last one are in the cache, unwritten, and must stay unseen.
CACHE_LENGTH = 16


def tokens() -> np.ndarray:
    return np.random.default_rng(0).integers(0, SPEC.vocab_size, (BATCH, PROMPT + DECODED), dtype=np.int32)


def torch_logits(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import torch

    from fwbench_torch.models import MODELS

    torch.manual_seed(0)
    model = MODELS.builder(SPEC)(SPEC, ids.shape[1:], OPTIONS).eval()
    ids = torch.from_numpy(ids).long()
    with torch.no_grad():
        full = model(ids)
        caches = model.empty_caches(BATCH, CACHE_LENGTH)
        steps = [model(ids[:, :PROMPT], caches, 0)]
        steps += [model(ids[:, at : at + 1], caches, torch.tensor(at)) for at in range(PROMPT, PROMPT + DECODED)]
    return full.numpy(), torch.cat(steps, dim=1).numpy()


def tensorflow_logits(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import keras
    import tensorflow as tf

    from fwbench_tensorflow.models import MODELS

    keras.utils.set_random_seed(0)
    model = MODELS.builder(SPEC).build(SPEC, ids.shape[1:], OPTIONS)
    full = model(ids, training=False)
    logits, caches = model(ids[:, :PROMPT], caches=model.empty_caches(BATCH, CACHE_LENGTH), offset=0)
    steps = [logits]
    decode = tf.function(lambda token, caches, at: model(token, caches=caches, offset=at), jit_compile=True)
    for at in range(PROMPT, PROMPT + DECODED):
        logits, caches = decode(ids[:, at : at + 1], caches, tf.constant(at))
        steps.append(logits)
    return full.numpy(), tf.concat(steps, axis=1).numpy()


def jax_logits(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import jax
    import jax.numpy as jnp

    from fwbench_jax.models import MODELS

    module = MODELS.builder(SPEC).build(SPEC, OPTIONS, jnp.float32)
    variables = module.init(jax.random.key(0), ids, train=False)
    full = module.apply(variables, ids, train=False)
    logits, caches = module.apply(variables, ids[:, :PROMPT], False, module.empty_caches(BATCH, CACHE_LENGTH), 0)
    steps = [logits]
    decode = jax.jit(
        lambda variables, token, caches, at: module.apply(variables, token, False, caches, at), donate_argnums=2
    )
    for at in range(PROMPT, PROMPT + DECODED):
        logits, caches = decode(variables, ids[:, at : at + 1], caches, jnp.int32(at))
        steps.append(logits)
    return np.asarray(full), np.asarray(jnp.concatenate(steps, axis=1))


def main() -> None:
    full, cached = {"torch": torch_logits, "tensorflow": tensorflow_logits, "jax": jax_logits}[sys.argv[1]](tokens())
    print(json.dumps({"max_abs_diff": float(np.abs(full - cached).max()), "max_abs_logit": float(np.abs(full).max())}))


if __name__ == "__main__":
    main()
