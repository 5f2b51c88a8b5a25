"""Whether two runners build the same network, from what they reported (run.parity): parameters and FLOPs within
tolerance, the same output shape, and, where compared, outputs that match."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ..store.run_columns import BUILT_IN

# What a comparison of a plug-in says of the evidence that its runners build the same network.
PARITY_CHECKED = "parity checked"
PARITY_NOT_CHECKED = "parity not checked"
PARITY_DIFFERENT = "parity: DIFFERENT networks"

# Trainable parameters may differ this much, each difference explained in the
# model's docstring (a bias a builder adds, a BatchNorm without scale).
PARAMETER_TOLERANCE = 0.005
FLOPS_TOLERANCE = 0.01


def _relative_gap(a: int, b: int) -> float:
    return abs(a - b) / max(a, b, 1)


def judged(rows: list[dict], reference: str, other: str) -> pd.DataFrame:
    """The parity table: the gathered rows with their gaps and a verdict each, "same" or "DIFFERENT"."""
    out = []
    for row in rows:
        row = dict(row)
        row["params_gap"] = _relative_gap(row[f"params_{reference}"], row[f"params_{other}"])
        row["flops_gap"] = _relative_gap(row[f"flops_{reference}"], row[f"flops_{other}"])
        row["outputs_equal"] = row[f"output_{reference}"] == row[f"output_{other}"]
        same = (
            row["params_gap"] <= PARAMETER_TOLERANCE
            and row["flops_gap"] <= FLOPS_TOLERANCE
            and row["outputs_equal"]
            and row["numeric"] != "MISMATCH"
        )
        row["verdict"] = "same" if same else "DIFFERENT"
        out.append(row)
    return pd.DataFrame(out)


def parity_status(
    model: str, model_hash: str, model_source: str, runners: Sequence[str], checks: pd.DataFrame | None
) -> str:
    """What `fwbench parity` has shown of a plug-in model at this hash, for these runners: every runner checked
    "same" against another of them, or one found different, or not checked. "" for a built-in model, whose parity
    the project's tests prove."""
    if not model_source or model_source == BUILT_IN:
        return ""
    if checks is None or checks.empty or len(runners) < 2:
        return PARITY_NOT_CHECKED
    mine = checks[
        (checks["model"] == model)
        & (checks["model_hash"] == model_hash)
        & checks["reference_runner"].isin(runners)
        & checks["runner"].isin(runners)
    ]
    if (mine["verdict"] != "same").any():
        return PARITY_DIFFERENT
    covered = set(mine["reference_runner"]) | set(mine["runner"])
    return PARITY_CHECKED if covered >= set(runners) else PARITY_NOT_CHECKED
