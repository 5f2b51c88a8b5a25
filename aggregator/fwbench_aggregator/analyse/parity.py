"""Whether two runners build the same network, from what they reported (run.parity): parameters and FLOPs within
tolerance, the same output shape, and, where compared, outputs that match."""

from __future__ import annotations

import pandas as pd

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
