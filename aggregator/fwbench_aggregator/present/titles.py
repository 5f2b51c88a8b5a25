"""A table's title: what every runner of a configuration shares ("resnet18 train · batch 8 · 3x64x64 · fp32 ·
cpu:0 · equal profile") and the settings that decide its verdict, said once above the table (the terminal, the
report's sections, MLflow's run names)."""

from __future__ import annotations

import pandas as pd

from ..store.run_columns import SETTINGS_COLUMNS

SETTING_NAMES = {"layout": "layout", "compilation": "compilation", "cudnn_autotune": "cuDNN autotune", "tf32": "TF32"}


def title_part(column: str, value) -> str:
    """A configuration column's value as a title names it."""
    if column == "batch_size":
        return f"batch {value} per device"
    return f"{value} profile" if column == "profile" else str(value)


def configuration_title(row: pd.Series, with_batch: bool = True) -> str:
    """'resnet18 train · batch 8 · 3x64x64 · fp32 · cpu:0 · equal profile': what every runner of a configuration
    shares."""
    parts = [f"{row['model']}" + (f" ({row['model_options']})" if row["model_options"] else ""), str(row["mode"])]
    if with_batch:
        parts.append(f"batch {row['batch_size']}" + (" per device" if int(row["world_size"]) > 1 else ""))
    parts += [str(row["input_shape"]), str(row["precision"]), str(row["device"])]
    if int(row["world_size"]) > 1:
        parts.append(f"{row['world_size']} devices over {row['nodes']} runner(s)")
    if row.get("profile"):
        parts.append(title_part("profile", row["profile"]))
    return " · ".join(p for p in parts if p)


def settings_title(rows: pd.DataFrame) -> str:
    """The runners' settings that decide a verdict: one value where every runner used the same, else each runner's
    ('compilation: torch eager, tensorflow graph')."""
    ran = rows[rows["status"] == "ok"]
    if ran.empty:
        return ""
    parts = []
    threads = {(r.runner, f"{r.intra_op_threads}/{r.inter_op_threads}") for r in ran.itertuples() if r.intra_op_threads}
    columns = [c for c in SETTINGS_COLUMNS if c in SETTING_NAMES and (c != "cudnn_autotune" or _on_gpu(ran))]
    for column in columns:
        values = {r["runner"]: str(r[column]) for _, r in ran.iterrows() if str(r[column])}
        if not values:
            continue
        if len(set(values.values())) == 1:
            parts.append(f"{SETTING_NAMES[column]} {next(iter(values.values()))}")
        else:
            parts.append(
                f"{SETTING_NAMES[column]}: " + ", ".join(f"{runner} {value}" for runner, value in values.items())
            )
    if threads:
        values = {value for _, value in threads}
        parts.append(
            f"threads {values.pop()} (intra/inter-op)"
            if len(values) == 1
            else "threads: " + ", ".join(f"{runner} {value}" for runner, value in sorted(threads))
        )
    return " · ".join(parts)


def _on_gpu(rows: pd.DataFrame) -> bool:
    return rows["device"].astype(str).str.startswith("gpu").any()
