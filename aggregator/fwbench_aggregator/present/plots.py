"""Plots of a comparison's results (matplotlib, written as PNG files)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or wanted

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

PHASE_COLOURS = {"idle": "#d9d9d9", "warmup": "#fde0b6", "measure": "#cde5c8", "after": "#d9d9d9"}


def power_timeline(power: pd.DataFrame, out_dir: Path) -> list[Path]:
    """One plot per runner and repetition: power over the run's time, its phases shaded."""
    written = []
    readable = power.dropna(subset=["power_w"])
    for (runner, repetition), run in readable.groupby(["runner", "repetition"]):
        run = run.sort_values("time_s")
        start = run["time_s"].iloc[0]
        figure, axes = plt.subplots(figsize=(9, 3.5))
        # Shade each phase from its first sample to the next phase's first sample.
        boundaries = run.loc[run["phase"] != run["phase"].shift(), ["time_s", "phase"]].values.tolist()
        ends = [t for t, _ in boundaries[1:]] + [run["time_s"].iloc[-1]]
        for (begin, phase), end in zip(boundaries, ends):
            axes.axvspan(begin - start, end - start, color=PHASE_COLOURS.get(phase, "#eeeeee"), label=phase)
        axes.plot(run["time_s"] - start, run["power_w"], color="#1f4e79", linewidth=1.2)
        handles, labels = axes.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        axes.legend(unique.values(), unique.keys(), loc="upper right", fontsize=8)
        axes.set_xlabel("time since the idle baseline began (s)")
        axes.set_ylabel("power (W)")
        source = ", ".join(sorted(set(run["power_source"])))
        axes.set_title(f"{runner} #{repetition + 1}: {run['model'].iloc[0]} {run['mode'].iloc[0]}, batch {run['batch_size'].iloc[0]} ({source})")
        figure.tight_layout()
        path = out_dir / f"power-{runner}-{repetition + 1}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written
