"""Section 9 of the GPU acceptance run (benchmarks/gpu_acceptance.py): generation.

Both decoders generate from the same prompts on runners a and b, which are the same torch runner: every point is an
A/A comparison, so a difference called in time to first token or in decode time is a wrong verdict, and both runners
must generate the same tokens (the same framework, weights from the same seed). Each point's figures (time to first
token, decode tokens per second, p99 per-token latency) are the section's evidence.
"""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass

import pandas as pd

# The generation report's figures (aggregator analyse/generation.py), each judged in every point.
FIGURES = ("time to first token", "decode, per token")


@dataclass(frozen=True)
class GenerationScale:
    models: dict[str, tuple[str, ...]]  # model -> its --option arguments
    batches: tuple[int, ...]
    prompt_tokens: int
    new_tokens: int
    precision: str
    # Requests: a generation request is long (one prefill and new_tokens synchronized decode steps), and each of its
    # tokens is a sample of the per-token figures, so a few requests measure it; warm-up is a fixed count.
    windows: tuple[str, ...] = ("--warmup", "3", "--warmup-until-cv", "0", "--steps", "5", "--min-measure-s", "0")
    repetitions: str = "3"


GPU = GenerationScale(
    models={"gpt2_small": (), "llama_small": ()},
    batches=(1, 16),
    prompt_tokens=128,
    new_tokens=128,
    precision="amp_bf16",
)
# The CPU dry run checks the section's logic: gpt2_small has no tiny size, and its full size cost 100 s here.
CPU = GenerationScale(
    models={"llama_small": ("--option", "size=tiny")},
    batches=(1,),
    prompt_tokens=8,
    new_tokens=4,
    precision="fp32",
    windows=("--warmup", "1", "--warmup-until-cv", "0", "--steps", "2", "--min-measure-s", "0"),
)


def point_label(model: str, batch: int, scale: GenerationScale) -> str:
    return f"{model} b{batch}, prompt {scale.prompt_tokens}, {scale.new_tokens} new tokens, {scale.precision}"


def run_section(acceptance, section: str) -> None:
    """Every (model, batch) point: a compare of runners a and b in mode generate, judged from its report's
    generation.csv."""
    scale = GPU if acceptance.scale.device == "gpu" else CPU
    folder = acceptance.section_dir("generation")
    for model, options in scale.models.items():
        for batch in scale.batches:
            label = point_label(model, batch, scale)
            if acceptance.left_s() < 20:
                acceptance.add(section, label, "not run", detail=f"{acceptance.left_s():.0f} s left of the budget")
                continue
            store = folder / f"store-{model}-b{batch}"
            done = acceptance.fwbench(
                f"generation-{model}-b{batch}",
                [
                    "compare",
                    "--model",
                    model,
                    *options,
                    "--mode",
                    "generate",
                    "--batch-size",
                    str(batch),
                    "--shape",
                    f"seq={scale.prompt_tokens}",
                    "--new-tokens",
                    str(scale.new_tokens),
                    "--precision",
                    scale.precision,
                    "--device",
                    acceptance.scale.device,
                    "--repetitions",
                    scale.repetitions,
                    *scale.windows,
                    "--store",
                    str(store),
                    "--out",
                    str(folder),
                ],
                timeout_s=acceptance.command_limit_s(),
                only=("a", "b"),
            )
            rows = _generation_rows(acceptance, store)
            judge_point(acceptance, section, label, done, rows, batch)


def _generation_rows(acceptance, store) -> pd.DataFrame | None:
    if not (store / "runs").exists():
        return None
    table = acceptance.report(store) / "generation.csv"
    return pd.read_csv(table) if table.exists() else None


def judge_point(
    acceptance, section: str, label: str, done: subprocess.CompletedProcess, rows: pd.DataFrame | None, batch: int
) -> None:
    """One point's checks: every figure for both runners, no difference called between them, the same tokens."""
    if done.returncode != 0 or rows is None or rows.empty:
        acceptance.add(section, label, "FAIL", detail=f"exit {done.returncode}, no generation figures: {_tail(done)}")
        return
    for figure in FIGURES:
        own = rows[rows["figure"] == figure]
        complete = set(own["runner"]) == {"a", "b"}
        called = own["significant"].astype(str).str.lower().eq("true").any()
        acceptance.add(
            section,
            f"{label}: {figure} (A/A)",
            "pass" if complete and not called else "FAIL",
            "; ".join(_figure(r, figure) for _, r in own.sort_values("runner").iterrows()),
            ("a difference was called between two identical runners: " if called else "")
            + ("" if complete else f"figures for runners {sorted(own['runner'])} only; ")
            + "; ".join(sorted({str(v) for v in own["verdict"]})),
        )
    same = rows["same_tokens"].astype(str)
    acceptance.add(
        section,
        f"{label}: both runners generate the same tokens",
        "pass" if same.eq("yes").all() else "FAIL",
        detail=", ".join(f"{r['runner']}: {r['same_tokens']}" for _, r in rows.drop_duplicates("runner").iterrows()),
    )
    decode = rows[rows["figure"] == "decode, per token"]
    consistent = all(
        math.isclose(r["decode_tokens_per_s"], batch / (r["value_ms"] / 1e3), rel_tol=1e-6)
        for _, r in decode.iterrows()
    )
    acceptance.add(
        section,
        f"{label}: decode tokens per second is batch over per-token time",
        "pass" if consistent and len(decode) else "FAIL",
        ", ".join(f"{r['runner']}: {r['decode_tokens_per_s']:.4g} tok/s" for _, r in decode.iterrows()),
    )


def _figure(row: pd.Series, figure: str) -> str:
    text = f"{row['runner']} {row['value_ms']:.4g} ms"
    if figure == "decode, per token":
        text += f" ({row['decode_tokens_per_s']:.4g} tok/s, p99 {row['p99_token_latency_ms']:.4g} ms)"
    return text


def _tail(done: subprocess.CompletedProcess) -> str:
    return " ".join(((done.stdout or "") + " " + (done.stderr or "")).split())[-500:]
