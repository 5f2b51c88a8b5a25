"""The power timeline plot, from telemetry samples as the aggregator stores them."""

from __future__ import annotations

import pandas as pd
from fwbench_aggregator.present.plots import power_timeline
from PIL import Image


def samples(runner: str, repetition: int) -> list[dict]:
    phases = ["idle"] * 10 + ["warmup"] * 5 + ["measure"] * 20 + ["after"] * 2
    return [
        {"runner": runner, "repetition": repetition, "model": "resnet18", "mode": "train", "batch_size": 32,
         "time_s": 100 + i * 0.05, "phase": phase, "power_w": 80.0 if phase == "idle" else 300.0,
         "power_source": "nvml_instant"}
        for i, phase in enumerate(phases)
    ]


def test_one_png_per_run_with_power_readings(tmp_path):
    frame = pd.DataFrame(samples("torch", 0) + samples("tensorflow", 0) + samples("tensorflow", 1))
    unreadable = pd.DataFrame(samples("fake", 0)).assign(power_w=None)
    written = power_timeline(pd.concat([frame, unreadable]), tmp_path)
    assert sorted(p.name for p in written) == ["power-tensorflow-1.png", "power-tensorflow-2.png", "power-torch-1.png"]
    with Image.open(written[0]) as image:
        assert image.width > 500 and image.height > 200
        colours = {image.getpixel((x, image.height // 2))[:3] for x in range(0, image.width, 5)}
        assert (0xcd, 0xe5, 0xc8) in colours  # the measured phase is shaded
