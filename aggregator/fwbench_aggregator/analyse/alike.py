"""Which runs are alike (comparability_columns.COMPARABILITY_COLUMNS): each run's comparability key as text, and the labels that
say what sets groups of runs apart. analyse.comparison pools runs into a row only within one key."""

from __future__ import annotations

import pandas as pd

from ..plan.settings import stored
from ..store.comparability_columns import BLOCK_KEY_COLUMNS, COMPARABILITY_COLUMNS, RUNNER_KEY_COLUMNS
from ..store.run_columns import CONFIG_COLUMNS
from ..store.selection import is_missing, key_text
from .object_text import object_column, text_as_objects

# How each part of the comparability key reads in a row's label: "version 2.15.0", "intra-op threads 1"; a run
# setting's as its declaration says (plan.settings).
KEY_NAMES = {
    "framework": "framework",
    "framework_version": "version",
    "image_digest": "image",
    "environment_lock": "environment",
    "malloc": "malloc",
    "layout": "layout",
    "compilation": "compilation",
    "cudnn_autotune": "cuDNN autotuning",
    "tf32": "TF32",
    "intra_op_threads": "intra-op threads",
    "inter_op_threads": "inter-op threads",
    "model_hash": "model",
    "run_isolation": "run isolation",
    "device_name": "device",
    "design": "design",
    **{setting.column: setting.label for setting in stored() if setting.key},
}


HASHES = ("image_digest", "environment_lock", "model_hash")


def key_texts(frame: pd.DataFrame, columns) -> pd.DataFrame:
    """`frame` with each of `columns` as key text ("" where missing or unknown)."""
    frame = frame.copy()
    for column in columns:
        frame[column] = object_column([key_text(v) for v in frame[column]] if column in frame else "", frame.index)
    return frame


def keyed(summary: pd.DataFrame) -> pd.DataFrame:
    """The (normalised) summary with every part of the comparability key (comparability_columns.COMPARABILITY_COLUMNS) as text, ""
    where unknown. A failed run records no settings: it takes those its runner's successful runs of the configuration
    agree on, and the block of its configuration's successful runs where they make one."""
    frame = key_texts(summary, COMPARABILITY_COLUMNS)
    failed = frame["status"] != "ok"
    if not failed.any() or failed.all():
        return frame
    for _, group in frame.groupby([*CONFIG_COLUMNS, "runner"], sort=False):
        good, bad = group[group["status"] == "ok"], group.index[group["status"] != "ok"]
        for column in RUNNER_KEY_COLUMNS if len(good) and len(bad) else ():
            if good[column].nunique() == 1:
                frame.loc[bad, column] = frame.loc[bad, column].where(
                    frame.loc[bad, column] != "", good[column].iloc[0]
                )
    for _, group in frame.groupby(list(CONFIG_COLUMNS), sort=False):
        good = group[group["status"] == "ok"]
        bad = group.index[(group["status"] != "ok") & (group[list(BLOCK_KEY_COLUMNS)] == "").all(axis=1)]
        if len(bad) and len(good.drop_duplicates(list(BLOCK_KEY_COLUMNS))) == 1:
            frame.loc[bad, list(BLOCK_KEY_COLUMNS)] = good[list(BLOCK_KEY_COLUMNS)].iloc[0].tolist()
    return frame


def labelled(frame: pd.DataFrame, over) -> pd.DataFrame:
    """The keyed `frame` with, within each group of `over` (the configuration; a series, less its batch size): `group`,
    what sets its block (comparability_columns.BLOCK_KEY_COLUMNS) apart from the group's other blocks; `variant`, what sets its
    runner key (RUNNER_KEY_COLUMNS) apart from its runner's others in the block, both "" when alone; and `label`, its
    runner as every table shows it, "torch (version 2.15.0) [device H100]". Runs with one label are alike."""
    frame = frame.copy()
    over = list(over)
    blocks = list(dict.fromkeys([*over, *BLOCK_KEY_COLUMNS]))
    runners = list(dict.fromkeys([*blocks, "runner"]))
    variants = list(dict.fromkeys([*runners, *RUNNER_KEY_COLUMNS]))
    # What sets a block or a runner key apart depends only on the distinct keys around it: worked out once per distinct
    # key, then looked up per run (grouping the runs themselves, group in group, was a third of a large analysis).
    keys = text_as_objects(frame[variants])
    group_of = _told_apart(keys.drop_duplicates(blocks), over, blocks, BLOCK_KEY_COLUMNS)
    variant_of = _told_apart(keys.drop_duplicates(variants), runners, variants, RUNNER_KEY_COLUMNS)
    group = object_column([group_of[key] for key in _rows(keys, blocks)], frame.index)
    variant = object_column([variant_of[key] for key in _rows(keys, variants)], frame.index)
    frame["group"], frame["variant"] = group, variant
    frame["label"] = object_column(
        [
            runner + (f" ({variant})" if variant else "") + (f" [{group}]" if group else "")
            for runner, variant, group in zip(frame["runner"], frame["variant"], frame["group"])
        ],
        frame.index,
    )
    return frame


def _told_apart(distinct: pd.DataFrame, within: list[str], key: list[str], apart: tuple[str, ...]) -> dict[tuple, str]:
    """For each distinct `key` (its values, a row of `distinct`; `key` holds `within` and `apart`), what sets its
    `apart` columns apart from those of the other keys that share its `within` values (differences). In Python: the
    keys are few, and pandas' selections per group cost more than the work."""
    inside, told_by = [key.index(c) for c in within], [key.index(c) for c in apart]
    by: dict[tuple, list[tuple]] = {}
    for row in _rows(distinct, key):
        by.setdefault(tuple(row[i] for i in inside), []).append(row)
    told: dict[tuple, str] = {}
    for same in by.values():
        told.update(zip(same, differences([tuple(row[i] for i in told_by) for row in same], apart)))
    return told


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple]:
    """The rows' values of `columns` as tuples, a missing value as None (NaN is never equal to itself: a key of one
    would never be found again)."""
    return list(zip(*([None if is_missing(v) else v for v in frame[column].tolist()] for column in columns)))


def differences(keys: list[tuple], columns: tuple[str, ...]) -> list[str]:
    """For groups with these keys (values of `columns`), what sets each apart from the others: "version 2.15.0,
    intra-op threads 1" over the columns whose values differ among them; "" for a group alone."""
    varying = [i for i in range(len(columns)) if len({key[i] for key in keys}) > 1]
    return [
        ", ".join(f"{KEY_NAMES.get(columns[i], columns[i])} {_shown(columns[i], key[i])}" for i in varying)
        for key in keys
    ]


def _shown(column: str, value: str) -> str:
    """A key's value in a label: a hash by its first 12 characters, as git shows a commit."""
    if not value:
        return "unknown"
    return value.removeprefix("sha256:")[:12] if column in HASHES else value
