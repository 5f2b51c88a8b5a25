"""The options of what a run measures and how it is set up (model, shape, device, precision, layout, compilation,
strategy, devices, threads, power telemetry, and each run setting made from its declaration), each declared once as
an option type; cli.workload_options and cli.setting_options group them."""

from __future__ import annotations

import os
import re
from typing import Annotated

import typer

from ..base.vocabulary import (
    DEVICE_FORMS,
    DEVICES_FORMS,
    SHAPE_FORMS,
    Compilation,
    Layout,
    Mode,
    Precision,
    Profile,
    Strategy,
    Switch,
    devices_problem,
    is_device,
    is_shape,
)
from ..plan import spec as plan
from ..plan.settings import SETTINGS, Setting
from .option_parsing import choices_metavar, parse_choice, parse_per_runner, parse_text

ModeOption = Annotated[
    str, typer.Option(callback=parse_choice(Mode, "mode"), metavar=choices_metavar(Mode), help="train or infer")
]
PrecisionOption = Annotated[
    str,
    typer.Option(
        callback=parse_choice(Precision, "precision"),
        metavar=choices_metavar(Precision),
        help="numeric precision, the same on every runner",
    ),
]
LayoutOption = Annotated[
    str | None,
    typer.Option(
        callback=parse_choice(Layout, "layout"),
        metavar=choices_metavar(Layout),
        help="image models' memory layout; default channels_last",
    ),
]
CudnnAutotuneOption = Annotated[
    str,
    typer.Option(
        callback=parse_choice(Switch, "setting"),
        metavar=choices_metavar(Switch),
        help="cuDNN autotuning, the same on every runner",
    ),
]
ModelOption = Annotated[str, typer.Option(callback=parse_text, help="model name, as `fwbench models` lists them")]


CompilationOption = Annotated[
    list[str],
    typer.Option(
        callback=parse_per_runner(Compilation),
        help=f"{', '.join(Compilation.__members__)}, for every runner or as RUNNER=VALUE; default: each framework's "
        "default (PyTorch eager, TensorFlow graph, JAX xla)",
    ),
]
StrategyOption = Annotated[
    list[str],
    typer.Option(
        callback=parse_per_runner(Strategy),
        help=f"{', '.join(Strategy.__members__)}, for every runner or as RUNNER=VALUE; default: single on one device, "
        "else each framework's data-parallel strategy (PyTorch ddp, TensorFlow mirrored; across runners ddp and "
        "multi_worker_mirrored)",
    ),
]


def parse_devices(value: str | None) -> str | None:
    problem = value is not None and devices_problem(value)
    if problem:
        raise typer.BadParameter(f"{value!r}: {problem}; accepted: {DEVICES_FORMS}")
    return value


DevicesOption = Annotated[
    str | None,
    typer.Option(
        callback=parse_devices,
        help="several devices of each runner for one run, e.g. gpu:0,gpu:1 or cpu:0,cpu:1 (instead of --device); "
        "--batch-size is per device, the job's global batch is it times the devices of every runner",
    ),
]
RendezvousPortOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=65535,
        help="first port of a job across runners (--runner NAME=HOST1:PORT,HOST2:PORT): node i's rendezvous endpoint is "
        "HOST_i:PORT+i; default: free ports of this host when every host is loopback, else 29500",
    ),
]


DistributedTimeoutOption = Annotated[
    float | None,
    typer.Option(
        min=plan.MIN_DISTRIBUTED_TIMEOUT_S,
        max=plan.MAX_DISTRIBUTED_TIMEOUT_S,
        help="the longest a rank waits for the others (rendezvous, collectives) or stays silent before the run fails "
        "naming it; default: the runners' (120 s)",
    ),
]


def parse_shape(value: str | None) -> str | None:
    if value is not None and not is_shape(value):
        raise typer.BadParameter(f"{value!r} is not a shape: give {SHAPE_FORMS}")
    return value


ShapeOption = Annotated[
    str | None,
    typer.Option(
        callback=parse_shape,
        help="per-sample input shape: 3x224x224, seq=128, audio=16000, 161x400; default: the model's",
    ),
]


def parse_options(values: list[str]) -> list[str]:
    for value in values:
        if not re.fullmatch(r"[a-z_]+=[A-Za-z0-9_]+", value):
            raise typer.BadParameter(
                f"{value!r} is not NAME=VALUE, e.g. head=mlm (`fwbench models` lists each model's options)"
            )
    return values


ModelOptionsOption = Annotated[
    list[str],
    typer.Option("--option", callback=parse_options, help="model option NAME=VALUE, e.g. head=mlm; repeat for each"),
]


def parse_device(value: str | None) -> str | None:
    if value is not None and not is_device(value):
        raise typer.BadParameter(f"{value!r} is not a device: accepted values are {DEVICE_FORMS}")
    return value


DeviceOption = Annotated[
    str | None,
    typer.Option(callback=parse_device, help="cpu, gpu or gpu:N; default: the runner's first GPU, else its CPU"),
]


ProfileOption = Annotated[
    str,
    typer.Option(
        callback=parse_choice(Profile, "profile"),
        metavar=choices_metavar(Profile),
        help="how every setting you leave unset is chosen: equal (the same on every runner: images channels_last) or "
        "native (each framework's own out-of-the-box choice: PyTorch channels_first); docs/usage.md#profiles",
    ),
]


def parse_power_rate(value: float) -> float:
    if not (value == 0 or plan.MIN_POWER_RATE_HZ <= value <= plan.MAX_POWER_RATE_HZ):
        raise typer.BadParameter(
            f"{value} is neither 0 (off) nor in the range {plan.MIN_POWER_RATE_HZ}<=x<={plan.MAX_POWER_RATE_HZ}."
        )
    return value


PowerRateOption = Annotated[
    float, typer.Option(callback=parse_power_rate, help="power telemetry samples per second (1-100; 0: off)")
]
IdleBaselineOption = Annotated[
    float, typer.Option(min=0.0, max=plan.MAX_IDLE_BASELINE_S, help="idle power measured before each run")
]
# The threads a run takes by default: every core of this host.
CPU_COUNT = os.cpu_count() or 1
ThreadsOption = Annotated[
    int, typer.Option(min=1, max=plan.MAX_THREADS, help="threads, every runner (default: all cores)")
]
BatchSizeOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=plan.MAX_BATCH_SIZE,
        help="samples per step on each device (the global batch of a distributed run is this times its devices)",
    ),
]


def setting_option(setting: Setting):
    """A run setting's option, made from its one declaration (plan.settings): its type, range and help."""
    kind = setting.kind if setting.default is not None else setting.kind | None
    return Annotated[kind, typer.Option(min=setting.low, max=setting.high, help=setting.help)]


# Every run setting's option, by the setting's name: the option groups and commands take them from here.
SETTING_OPTIONS = {setting.name: setting_option(setting) for setting in SETTINGS}
# A serve-capacity probe warms up and measures under defaults of its own.
WarmupOption, MinMeasureOption = SETTING_OPTIONS["warmup"], SETTING_OPTIONS["min_measure_s"]
