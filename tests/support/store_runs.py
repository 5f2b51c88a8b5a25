"""A run's frames as a store keeps them, for tests that write stores by hand."""

from __future__ import annotations

import pandas as pd


def run_frames(runner: str, median_s: float) -> dict[str, pd.DataFrame]:
    """One run's steps (two of warm-up, four measured, a little apart) and summary, at about `median_s` a step."""
    steps = pd.DataFrame(
        {
            "runner": runner,
            "step_index": range(6),
            "warmup": [i < 2 for i in range(6)],
            "step_time_s": [median_s * (1 + i / 100) for i in range(6)],
        }
    )
    summary = pd.DataFrame(
        [
            {
                "runner": runner,
                "model": "resnet18",
                "mode": "train",
                "batch_size": 8,
                "status": "ok",
                "error": "",
                "median_step_time_s": median_s,
            }
        ]
    )
    return {"steps": steps, "summary": summary}
