"""Run from the torch environment by test_generation_torch.py: a torch runner's generation workload (built as a run
builds it, static key-value cache, eager or torch.compile'd) generates from its prompts exactly the greedy tokens of
generating without a cache (a full forward pass over the whole sequence for every token). Two requests in a row (the
second reuses the first's cache), then, eager, the workload reused at another batch size; and the reference
export's generated tokens from its input. Prints (as JSON) each comparison's result.

Usage: python torch_generation_equals_uncached.py MODEL COMPILATION [PRECISION]"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import torch

from fwbench_core.architectures import GPT2
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.choices import Compilation, Mode, Precision
from fwbench_core.devices import RunnerSettings
from fwbench_core.models import ModelConfig
from fwbench_core.references import GENERATED_TOKENS, PARITY_NEW_TOKENS
from fwbench_core.runs import RunConfig
from fwbench_core.sysinfo import cpu_device
from fwbench_torch.backend import TorchBackend
from fwbench_torch.models import MODELS

TINY_OPTIONS = {"llama_small": {"size": "tiny"}}
BATCH, PROMPT, NEW_TOKENS = 2, 8, 6
REUSED_BATCH = 3
# gpt2_small has no small size: its code path (learned positions, the tied decoder, the cache) checked at two
# narrow layers, a tenth of its full size's time here (35 s at full size in JAX on this 2-core CPU).
GPT2_CHECKED = dict(layers=2, hidden=128, heads=2, ffn=512)


def uncached_tokens(model: torch.nn.Module, prompts: torch.Tensor, new_tokens: int) -> list[list[int]]:
    """Greedy tokens, each from the logits of a forward pass over the prompt and every token chosen before it."""
    sequence = prompts
    with torch.no_grad():
        for _ in range(new_tokens):
            chosen = model(sequence)[:, -1].argmax(dim=-1, keepdim=True)
            sequence = torch.cat((sequence, chosen), dim=1)
    return sequence[:, prompts.shape[1] :].tolist()


def request(workload) -> list[list[int]]:
    workload.prefill()
    for _ in range(NEW_TOKENS - 1):
        workload.decode_step()
    workload.synchronize()
    return workload.generated_tokens()


def main() -> None:
    name, compilation = sys.argv[1], Compilation(sys.argv[2])
    GPT2.update(GPT2_CHECKED)
    precision = Precision(sys.argv[3]) if len(sys.argv) > 3 else Precision.FP32
    # llama_small does not declare that it generates (yet): its builder can all the same.
    spec = replace(MODEL_SPECS[name], generates=True)
    options = TINY_OPTIONS.get(name, {})
    backend = TorchBackend(RunnerSettings(torch.get_num_threads(), 1))
    config = RunConfig(
        model=spec,
        mode=Mode.GENERATE,
        batch_size=BATCH,
        input_shape=(PROMPT,),
        precision=precision,
        device=cpu_device(),
        warmup_steps=0,
        measured_steps=1,
        seed=3,
        model_options=options,
        compilation=compilation,
        intra_op_threads=torch.get_num_threads(),
        reuse_key="generation" if compilation is Compilation.EAGER else "",
        new_tokens=NEW_TOKENS,
    )
    workload = backend.build(config)
    result = {
        "new_tokens": NEW_TOKENS,
        "cache_dtype": str(workload.generation.caches[0].keys.dtype),
        "cache_shape": list(workload.generation.caches[0].keys.shape),
    }
    first, second = request(workload), request(workload)
    if precision is not Precision.FP32:  # what autocast rounds differently, a pass without the cache may choose apart
        result.update(tokens=first, same_twice=first == second)
        print(json.dumps(result))
        return
    expected = uncached_tokens(workload.module, workload.inputs, NEW_TOKENS)
    result.update(first_request=first == expected, second_request=second == expected, tokens=first)
    if compilation is Compilation.EAGER:
        assert workload.reuse(replace(config, batch_size=REUSED_BATCH))
        reused = request(workload)
        result["reused"] = len(reused) == REUSED_BATCH and reused == uncached_tokens(
            workload.module, workload.inputs, NEW_TOKENS
        )
    workload.close()
    arrays, _ = backend.export_reference(ModelConfig(spec, (PROMPT,), options, BATCH))
    exported = arrays[GENERATED_TOKENS]
    result["exported"] = exported.dtype == "int64" and exported.tolist() == uncached_tokens(
        reference_model(spec, options, arrays), torch.from_numpy(arrays["input"]), PARITY_NEW_TOKENS
    )
    print(json.dumps(result))


def reference_model(spec, options, arrays) -> torch.nn.Module:
    """The model with a reference's weights, as the runners that compare with it load them."""
    model = MODELS.builder(spec)(spec, (PROMPT,), options).eval()
    model.load_state_dict(
        {key.removeprefix("weights/"): torch.from_numpy(value) for key, value in arrays.items() if "/" in key}
    )
    return model


if __name__ == "__main__":
    main()
