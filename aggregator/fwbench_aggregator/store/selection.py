"""Which of a store's runs a report reads: every run, one compare's runs (--compare ID, the name of the compare's
results folder), or the runs whose summary holds a value (--where COLUMN=VALUE, each condition holding). The report,
its findings and the version report read the same selection."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from . import catalog
from .results_store import ResultStore
from .run_columns import SUMMARY_COLUMNS
from .schema import QUERIES_FRAME

COMPARE_KEY = "compare"  # a compare's runs carry its id in their stored configuration (app.compare)
RUN_FRAMES = ("summary", "steps", "power", QUERIES_FRAME)  # the frames of runs; calibrations and the rest stay whole


class SelectionError(ValueError):
    """A selection that names no column of the summary or matches no run; `option` is the option to change."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option


def is_missing(value: object) -> bool:
    """Whether a stored value is missing: None, pandas' NA or NaN (a scalar; pd.isna of a list is a list)."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def key_text(value: object) -> str:
    """A stored value as text to compare: 2, 2.0 and "2" alike; "" for a missing one. How --where matches a value,
    and how analyse.alike reads the comparability key."""
    if is_missing(value):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class Selection:
    compare: str = ""
    where: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, compare: str = "", where: Sequence[str] = ()) -> Selection:
        conditions = []
        for condition in where:
            column, equals, value = condition.partition("=")
            if not equals or not column.strip():
                raise SelectionError(
                    f"--where {condition!r}: accepted: COLUMN=VALUE, e.g. framework_version=2.15.0", "--where"
                )
            if column.strip() not in SUMMARY_COLUMNS:
                raise SelectionError(
                    f"--where {condition!r}: {column.strip()!r} is no column of the store's summary; "
                    f"accepted columns: {', '.join(SUMMARY_COLUMNS)}",
                    "--where",
                )
            conditions.append((column.strip(), value.strip()))
        return cls(compare.strip(), tuple(conditions))

    @property
    def everything(self) -> bool:
        return not self.compare and not self.where

    def describe(self) -> str:
        parts = ([f"compare {self.compare}"] if self.compare else []) + [f"{c}={v}" for c, v in self.where]
        return ", ".join(parts)

    def keys_in(self, store: ResultStore) -> set[str] | None:
        """The run keys of the selected runs, answered from the store's catalog without opening a run (None: every
        run); SelectionError where none is."""
        if self.everything:
            return None
        chosen = store.run_keys()
        if self.compare:
            chosen &= catalog.keys_where(store.catalog, COMPARE_KEY, [self.compare])
            if not chosen:
                known = sorted(set(catalog.column(store.catalog, COMPARE_KEY).values()) - {""})
                raise SelectionError(
                    f"--compare {self.compare}: the store holds no run of that compare; its compares: "
                    f"{', '.join(known[-10:]) or 'none (its runs came from sweeps)'}",
                    "--compare",
                )
        if self.where:
            rows = catalog.summary_values(store.catalog, [column for column, _ in self.where])
            chosen &= {key for key, values in rows if all(key_text(values[c]) == value for c, value in self.where)}
        if not chosen:
            raise SelectionError(
                f"no run of the store matches {self.describe()}", "--where" if self.where else "--compare"
            )
        return chosen
