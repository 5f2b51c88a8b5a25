"""Hardware efficiency: achieved FLOP/s from the runners' own FLOP counts, and model FLOP utilisation against the
device's published peak where it is known."""

from __future__ import annotations

import math

import pandas as pd

from ..store.analysis_columns import EFFICIENCY_COLUMNS
from ..store.run_columns import CONFIG_COLUMNS
from . import stats
from .peaks import peak_flops

# A training step is about three forward passes: the forward, and the backward's two products per layer.
TRAIN_FLOPS_FACTOR = 3.0


def _forward_flops(model_facts: pd.DataFrame | None) -> dict[tuple, float]:
    """(runner name, model, options, shape) -> forward FLOPs per sample, as the runner counted them."""
    if model_facts is None or model_facts.empty:
        return {}
    facts = model_facts.copy()
    for column in ("runner", "model", "model_options", "input_shape"):
        facts[column] = facts[column].astype(object).where(facts[column].notna(), "").astype(str)
    return {
        (r.runner, r.model, r.model_options, r.input_shape): float(r.forward_flops)
        for r in facts.itertuples(index=False)
        if r.forward_flops and r.forward_flops > 0
    }


def peak_precision(precision: str, tf32: object) -> str:
    """The precision whose peak bounds a run: fp32 math that TF32 may run on tensor cores (the native profile's
    default on a GPU) is bounded by the TF32 peak, not the non-tensor fp32 one, which it can pass (found on an H200:
    resnet50 training at "68.8%" of the fp32 peak was 9% of the TF32 one)."""
    allowed = isinstance(tf32, str) and tf32 not in ("", "off")
    return "tf32" if precision == "fp32" and allowed else precision


def hardware_efficiency(rows: pd.DataFrame, model_facts: pd.DataFrame | None) -> pd.DataFrame:
    """Per comparison row that ran: achieved FLOP/s (forward FLOPs per sample x the job's samples, x3 for
    training, over the median step time) and, where the device's peak for the precision is known, the model FLOP
    utilisation against that peak times the job's devices."""
    if rows.empty:
        return pd.DataFrame(columns=EFFICIENCY_COLUMNS)
    flops = _forward_flops(model_facts)
    table = []
    for row in rows[(rows["status"] == "ok") & rows["median_step_ms"].notna()].itertuples(index=False):
        config = tuple(getattr(row, c) for c in CONFIG_COLUMNS)
        out = {
            **dict(zip(CONFIG_COLUMNS, config)),
            "runner": row.runner,
            "runs": row.runs,
            "device_name": row.device_name,
            "forward_flops": math.nan,
            "flops_per_step": math.nan,
            "achieved_flops_per_s": math.nan,
            "peak_flops_per_s": math.nan,
            "peak_entry": "",
            "mfu": math.nan,
        }
        forward = flops.get((row.runner_name, row.model, row.model_options, row.input_shape))
        notes = []
        if row.mode == "generate":
            # A request is a prefill and many one-token steps: a forward pass's count over the prompt is no measure.
            notes.append("not counted in mode generate: a request's FLOPs are not one forward pass over its shape")
        elif forward is None:
            notes.append("no FLOP count stored for this model and shape (a sweep or compare inspects it)")
        else:
            per_step = forward * row.global_batch_size * (TRAIN_FLOPS_FACTOR if row.mode == "train" else 1.0)
            out.update(
                forward_flops=forward,
                flops_per_step=per_step,
                achieved_flops_per_s=per_step / (row.median_step_ms / 1e3),
            )
        precision = peak_precision(row.precision, getattr(row, "tf32", ""))
        peak = peak_flops(out["device_name"], precision) if str(row.device).startswith("gpu") else None
        if precision != row.precision and peak is not None:
            notes.append(
                f"fp32 with TF32 {row.tf32}: against the TF32 peak, which such math can reach"
                + (
                    "; a model whose FLOPs are matrix products runs them at fp32, below it"
                    if str(row.tf32) == "convolutions only"
                    else ""
                )
            )
        if peak is None:
            notes.append(
                "no peak known for a CPU"
                if str(row.device).startswith("cpu")
                else f"no peak known for {out['device_name'] or 'this device'} at {row.precision}"
            )
        else:
            devices = int(row.world_size) * int(row.nodes)
            out.update(peak_flops_per_s=peak.flops_per_s * devices, peak_entry=peak.entry)
            if forward is not None:
                out["mfu"] = out["achieved_flops_per_s"] / out["peak_flops_per_s"]
        if row.runs < stats.MIN_REPETITIONS:
            notes.append(f"{row.runs} run(s): the step time behind it is not resolved")
        out["efficiency_note"] = "; ".join(notes)
        table.append(out)
    return pd.DataFrame(table, columns=EFFICIENCY_COLUMNS)
