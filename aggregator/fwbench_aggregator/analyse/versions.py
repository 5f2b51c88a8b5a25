"""Versions side by side: per configuration and framework, each version against the previous one.

A store holds whatever versions its runs reported (Describe's framework_version), whichever runner ran them and
whenever: a version study's labelled runners, or a plain `torch` runner rebuilt on a new tag weeks later. Versions
are ordered by packaging.version. Each pair is judged exactly as a comparison judges two runners (comparison.judged:
stats.compare, or the sequential design's looks for runs made under one) against the configuration's noise floor
(floors.config_floor), so a version change is called only where a difference between frameworks would be.

A pair whose runs differ in anything but the version (Python, CUDA, cuDNN, the device, the host, the base image less
its version, the runner) is flagged: the difference may be that, not the version. A regression is confirmed only
where a confirmation round (fresh runs of both versions, interleaved) calls it a regression too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from packaging.version import InvalidVersion, Version

from ..plan.versions import leading_version
from ..store.analysis_columns import VERSION_CHANGE_COLUMNS, VERSION_POINT_COLUMNS
from ..store.run_columns import CONFIG_COLUMNS, RUN_COLUMNS
from ..store.run_columns import IMAGE_COLUMNS as STORED_IMAGE_COLUMNS
from . import stats
from .comparison import evidence_of
from .floors import busy_floor_note, config_floor, noise_floors
from .judging import judged
from .run_values import normalised, run_values

# What must be the same on both sides of a version change for it to be the version's doing.
ENVIRONMENT_FACTS = (
    "python_version",
    "cuda_version",
    "cudnn_version",
    "device_name",
    "host",
    "base_image_family",
    "runner_version",
)
# Where each run's image and its digests are recorded (store.records).
IMAGE_COLUMNS = ("container_image", *STORED_IMAGE_COLUMNS)
KEY = (*CONFIG_COLUMNS, "framework")
# Regressions first, then improvements; what was not called last.
CHANGE_ORDER = {"regression": 0, "improvement": 1, "unresolved": 2, "no change": 3}
CONFIRMED, NOT_CONFIRMED, NOT_CHECKED = "confirmed", "not confirmed", "not checked"


@dataclass(frozen=True)
class VersionTables:
    """The version report's tables: each version against the previous one (a confirmation round's verdicts beside)
    and each configuration's step time per version."""

    changes: pd.DataFrame
    points: pd.DataFrame


def version_key(version: str) -> tuple:
    """Release order (2.9 before 2.10, 2.14.0rc1 before 2.14.0); a version packaging cannot read after every one it
    can, by its text."""
    try:
        return (0, Version(version), "")
    except InvalidVersion:
        return (1, Version("0"), version)


def _option(options: object, name: str) -> str:
    pairs = (item.partition("=") for item in str(options or "").split(";"))
    return next((value for key, _, value in pairs if key == name), "")


def base_image_family(image: object) -> str:
    """A base image less its version: pytorch/pytorch:*-cuda12.6-cudnn9-runtime for ...:2.14.0-cuda12.6-cudnn9-runtime."""
    name, _, tag = str(image or "").rpartition(":")
    version = leading_version(tag) if name else None
    return f"{name}:*{tag[len(version) :]}" if version and tag.startswith(version) else str(image or "")


def version_runs(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per successful run: its configuration, median step time, framework and version, environment and image."""
    return versioned(summary, run_values(summary, steps))


def versioned(summary: pd.DataFrame, run_medians: pd.DataFrame) -> pd.DataFrame:
    """version_runs from the runs' medians as they were already worked out (analyse.run_values; an Analysis's
    run_medians): a report reads no steps for its version tables."""
    runs = run_medians
    facts = normalised(summary)
    for column in (
        "framework",
        "framework_version",
        "runner_name",
        "runner_options",
        "max_repetitions",
        "process_block",
        *IMAGE_COLUMNS,
        *(f for f in ENVIRONMENT_FACTS if f not in ("host", "base_image_family")),
    ):
        if column not in facts:
            facts[column] = ""
    facts = facts.assign(
        host=[_option(options, "host_id") for options in facts["runner_options"]],
        base_image_family=[base_image_family(image) for image in facts["container_base_image"]],
    )
    extra = [
        "framework",
        "framework_version",
        "runner_name",
        "max_repetitions",
        "process_block",
        *IMAGE_COLUMNS,
        *ENVIRONMENT_FACTS,
    ]
    runs = runs.merge(
        facts[[*RUN_COLUMNS, *extra]].drop_duplicates(list(RUN_COLUMNS)), on=list(RUN_COLUMNS), how="left"
    )
    for column in ("framework", "framework_version", "process_block", *IMAGE_COLUMNS, *ENVIRONMENT_FACTS):
        runs[column] = runs[column].astype(object).where(runs[column].notna(), "").astype(str)
    runs["max_repetitions"] = pd.to_numeric(runs["max_repetitions"], errors="coerce").fillna(0).astype(int)
    return runs[runs["framework_version"] != ""]


def _versions(group: pd.DataFrame) -> list[str]:
    return sorted(group["framework_version"].unique(), key=version_key)


def _joined(values: pd.Series) -> str:
    return " | ".join(dict.fromkeys(v for v in values.astype(str) if v and v != "nan"))


def version_points(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration, framework and version: the geometric mean step time over its runs, with its
    interval (stats.geometric_interval), the runners that ran it and their images."""
    rows = []
    for key, group in runs.groupby(list(KEY), sort=False):
        for version in _versions(group):
            own = group[group["framework_version"] == version]
            interval = stats.geometric_interval(own["median_step_time_s"].to_numpy(dtype=float))
            rows.append(
                {
                    **dict(zip(KEY, key)),
                    "framework_version": version,
                    "runners": _joined(own["runner_name"]),
                    "runs": interval.runs,
                    "median_step_ms": interval.value * 1e3,
                    "low_step_ms": interval.low * 1e3,
                    "high_step_ms": interval.high * 1e3,
                    **{column: _joined(own[column]) for column in IMAGE_COLUMNS},
                }
            )
    return pd.DataFrame(rows, columns=VERSION_POINT_COLUMNS)


def environment_differences(old: pd.DataFrame, new: pd.DataFrame) -> str:
    """What differs between two versions' runs besides the version: "python_version 3.11.9 → 3.12.1; host ..."."""
    found = []
    for fact in ENVIRONMENT_FACTS:
        before, after = _joined(old[fact]), _joined(new[fact])
        if before != after:
            found.append(f"{fact} {before or '(not recorded)'} → {after or '(not recorded)'}")
    return "; ".join(found)


def describe_config(row: dict) -> str:
    """resnet50 train b64 amp_bf16 3x224x224 gpu:0, with its options and a profile other than equal."""
    options = f"[{row['model_options']}]" if row.get("model_options") else ""
    extras = [str(row[c]) for c in ("profile", "serving") if row.get(c) not in ("", "equal", None)]
    words = [
        f"{row['model']}{options}",
        row["mode"],
        f"b{row['batch_size']}",
        row["precision"],
        row["input_shape"],
        row["device"],
        *extras,
    ]
    return " ".join(str(word) for word in words if word)


def _pct(value: float) -> str:
    return f"{(value - 1) * 100:.0f}%"


def change_text(change: str, ratio: float, low: float, high: float, verdict: str) -> str:
    """'8% slower [5%, 11%]' (new over old), '12% faster [5%, 19%]' (old over new), else the verdict itself."""
    if change == "regression":
        return f"{_pct(ratio)} slower [{_pct(low)}, {_pct(high)}]"
    if change == "improvement":
        return f"{_pct(1 / ratio)} faster [{_pct(1 / high)}, {_pct(1 / low)}]"
    return verdict


def version_changes(
    summary: pd.DataFrame,
    steps: pd.DataFrame,
    calibration: pd.DataFrame | None = None,
    min_effect: float = stats.MIN_EFFECT,
) -> pd.DataFrame:
    """One row per configuration, framework and pair of consecutive versions it ran: the newer one's step time over
    the older one's (ratio, ci_low, ci_high), the change called ("regression", "improvement", "no change",
    "unresolved") and its text, and what else differs between their runs (environment). Regressions first."""
    return changes_between_versions(version_runs(summary, steps), calibration, min_effect)


def changes_between_versions(
    runs: pd.DataFrame, calibration: pd.DataFrame | None = None, min_effect: float = stats.MIN_EFFECT
) -> pd.DataFrame:
    """version_changes over version_runs' (or versioned's) runs."""
    floors = noise_floors(normalised(calibration))
    rows = []
    for key, group in runs.groupby(list(KEY), sort=False):
        config, framework = tuple(key[:-1]), key[-1]
        # Each version's runs have a key of their own: a floor applies where it was calibrated on this device.
        devices = set(group["device_name"])
        floor = config_floor(floors, config, [(framework, {"device_name": devices.pop()} if len(devices) == 1 else {})])
        versions = _versions(group)
        for old, new in zip(versions, versions[1:]):
            rows.append(_pair(dict(zip(KEY, key)), group, old, new, floor, min_effect))
    table = pd.DataFrame(rows, columns=VERSION_CHANGE_COLUMNS)
    if table.empty:
        return table
    order = table["change"].map(CHANGE_ORDER)
    return (
        table.assign(_order=order)
        .sort_values(["_order", *KEY], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def _pair(row: dict, group: pd.DataFrame, old: str, new: str, floor, min_effect: float) -> dict:
    framework = row["framework"]
    sides = {}
    for version in (old, new):
        own = group[group["framework_version"] == version]
        # A process block's windows share its process, so a block is one value (evidence_of); two versions rarely
        # share blocks (each ran in a compare of its own), so the blocks are judged as unrelated units, like runs.
        sides[version] = {
            "runner": f"{framework} {version}",
            "_medians": evidence_of(own)[0],
            "max_repetitions": int(own["max_repetitions"].max()),
            "frame": own,
        }
    verdict, outcome, c = judged(sides[old], sides[new], min_effect, floor.value)
    new_slower = c.slower == sides[new]["runner"]
    ratio = c.ratio if new_slower else 1 / c.ratio
    low, high = (c.ci_low, c.ci_high) if new_slower else (1 / c.ci_high, 1 / c.ci_low)
    change = (
        ("regression" if new_slower else "improvement")
        if outcome == "different"
        else ("no change" if outcome == "equivalent" else "unresolved")
    )
    amount = change_text(change, ratio, low, high, verdict)
    return {
        **row,
        "version_from": old,
        "version_to": new,
        "runners_from": _joined(sides[old]["frame"]["runner_name"]),
        "runners_to": _joined(sides[new]["frame"]["runner_name"]),
        "runs_from": len(sides[old]["_medians"]),
        "runs_to": len(sides[new]["_medians"]),
        "ratio": ratio,
        "ci_low": low,
        "ci_high": high,
        "p_value": c.p_value,
        "noise_floor": floor.value,
        "noise_floor_source": floor.source,
        "change": change,
        "verdict": verdict + busy_floor_note(floor),
        "text": f"{framework} {old} → {new}: {describe_config(row)} {amount}",
        "environment": environment_differences(sides[old]["frame"], sides[new]["frame"]),
        "confirmation": "",
        "confirmation_ratio": math.nan,
        "confirmation_ci_low": math.nan,
        "confirmation_ci_high": math.nan,
        "confirmation_text": "",
    }


def confirmed(changes: pd.DataFrame, rounds: pd.DataFrame | None) -> pd.DataFrame:
    """`changes` with each regression's confirmation: "confirmed" where the confirmation round (`rounds`: its own
    version_changes) calls the same pair of the same configuration a regression too, "not confirmed" where it does
    not (both rounds' figures kept), "not checked" where no round ran it."""
    out = changes.copy()
    match = {
        tuple(r[c] for c in (*KEY, "version_from", "version_to")): r
        for r in (rounds if rounds is not None else pd.DataFrame()).to_dict("records")
    }
    for index, row in out[out["change"] == "regression"].iterrows():
        again = match.get(tuple(row[c] for c in (*KEY, "version_from", "version_to")))
        if again is None:
            out.loc[index, "confirmation"] = NOT_CHECKED
            continue
        out.loc[
            index,
            ["confirmation", "confirmation_ratio", "confirmation_ci_low", "confirmation_ci_high", "confirmation_text"],
        ] = [
            CONFIRMED if again["change"] == "regression" else NOT_CONFIRMED,
            again["ratio"],
            again["ci_low"],
            again["ci_high"],
            change_text(again["change"], again["ratio"], again["ci_low"], again["ci_high"], again["verdict"]),
        ]
    return out


def regressions_to_confirm(changes: pd.DataFrame) -> list[dict]:
    """The regressions a confirmation round runs again: configuration, framework and both versions."""
    wanted = changes[changes["change"] == "regression"]
    return wanted[[*KEY, "version_from", "version_to", "runners_from", "runners_to"]].to_dict("records")


def several_versions(points: pd.DataFrame) -> bool:
    return bool(len(points)) and bool((points.groupby(list(KEY))["framework_version"].nunique() > 1).any())


def plot_series(points: pd.DataFrame, model: str) -> tuple[list[str], dict[str, tuple]]:
    """For one model's plot: every version its configurations ran, in release order, and per configuration less the
    model (with its framework) the positions of its versions among them and its step times (ms) with their interval."""
    own = points[points["model"] == model]
    versions = sorted(own["framework_version"].unique(), key=version_key)
    position = {version: index for index, version in enumerate(versions)}
    rest = [c for c in KEY if c != "model"]
    series = {}
    for key, group in own.groupby(rest, sort=False):
        if group["framework_version"].nunique() < 2:
            continue
        ordered = group.assign(_x=group["framework_version"].map(position)).sort_values("_x")
        label = describe_config({**dict(zip(rest, key)), "model": ""})
        series[f"{key[-1]} {label}"] = (
            ordered["_x"].to_numpy(int),
            ordered["median_step_ms"].to_numpy(float),
            ordered["low_step_ms"].to_numpy(float),
            ordered["high_step_ms"].to_numpy(float),
        )
    return versions, series
