"""How these runs were made, said from the runs themselves: blocks or rounds, windows or runs, the process each ran
in, where the verdict was looked at and the budget it had (the comparison rows' design, blocks, runs, looks and
max_repetitions; the summary's run_isolation and status). The report's opening paragraphs read it, so that a page
never explains a design its runs did not use."""

from __future__ import annotations

import re
from html import escape

import pandas as pd

from ..analyse import stats
from ..plan.design import ROUNDS_LABEL, is_blocks
from ..store.run_columns import CONFIG_COLUMNS, looks_of

# Where a reader learns to read a verdict: the page stays self-contained, so it names the file rather than linking it.
VERDICT_DOCS = "docs/verdict.md"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _span(values: pd.Series, word: str) -> str:
    """'8 blocks', or '3 to 8 blocks' where configurations differ."""
    low, high = int(values.min()), int(values.max())
    return _plural(high, word) if low == high else f"{low} to {high} {word}s"


def _windows_per_block(design: str) -> int | None:
    found = re.match(r"blocks of (\d+) windows", design)
    return int(found.group(1)) if found else None


def _designs(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The measured rows by the design that made them (rounds where a store predates designs)."""
    ran = rows[rows["status"] == "ok"] if not rows.empty else rows
    if ran.empty:
        return {}
    design = ran["design"].fillna(ROUNDS_LABEL).astype(str) if "design" in ran else pd.Series(ROUNDS_LABEL, ran.index)
    return {str(label): own for label, own in ran.groupby(design.replace("", ROUNDS_LABEL), sort=True)}


def _per_configuration(own: pd.DataFrame, column: str) -> pd.Series:
    """A column's largest value per configuration (every runner of one configuration shares its blocks)."""
    return own.groupby([*CONFIG_COLUMNS, "group"], sort=False)[column].max()


def counts_text(rows: pd.DataFrame, summary: pd.DataFrame) -> str:
    """What the page rests on, in the design's own units: '8 blocks of 8 windows a runner (128 windows)', '6 runs a
    runner (12 runs)', with the failed ones counted apart."""
    parts = []
    for design, own in _designs(rows).items():
        windows = _windows_per_block(design)
        if is_blocks(design) and windows:
            blocks = _per_configuration(own, "blocks")
            parts.append(f"{_span(blocks, 'block')} of {_plural(windows, 'window')} a runner")
        else:
            parts.append(f"{_span(_per_configuration(own, 'runs'), 'run')} a runner in rounds")
    status = summary["status"] if "status" in summary else pd.Series("ok", index=summary.index)
    failed = int((status != "ok").sum())
    stored = "window" if _designs(rows) and all(is_blocks(d) for d in _designs(rows)) else "run"
    total = f"{_plural(len(summary), stored)} stored" + (f", {failed} failed" if failed else ", none failed")
    return f"{'; '.join(parts) or 'no measured runs'} ({total})"


def _looks_text(own: pd.DataFrame, unit: str) -> str:
    """Where a sequential design looked at the verdict and its budget, or that the count was fixed."""
    budget = int(own["max_repetitions"].max()) if "max_repetitions" in own else 0
    if budget <= 0:
        return f"the number of {unit}s was fixed in advance"
    looks = looks_of(str(own["looks"].iloc[0])) if "looks" in own else ()
    at = (
        f"after {unit}s {', '.join(map(str, looks[:-1]))} and {looks[-1]}"
        if len(looks) > 1
        else f"after every {unit} from the {_ordinal(stats.MIN_REPETITIONS)}"
    )
    return f"the verdict was looked at {at}, with a budget of {_plural(budget, unit)}, stopping once it settled"


def _blocks_text(design: str, own: pd.DataFrame) -> str:
    windows = _windows_per_block(design)
    blocks = _span(_per_configuration(own, "blocks"), "block")
    return (
        f"The runners ran in interleaved process blocks ({blocks}, {_plural(windows or 0, 'window')} a runner a "
        "block): each block starts a fresh worker process per runner, which builds the model and warms it up once, "
        "then the runners measure short windows in turn (A B B A …). A verdict compares the runners block by block "
        "(a runner's value for a block is the geometric mean of its windows' medians), so that a host's drift cancels "
        f"within a block; {_looks_text(own, 'block')}."
    )


def _isolation_text(summary: pd.DataFrame) -> str:
    """Which process the runs in rounds stepped in, as they recorded it (summary.run_isolation); "" where they
    differ or did not record it."""
    if "run_isolation" not in summary:
        return ""
    in_rounds = summary[~summary["design"].astype(str).map(is_blocks)] if "design" in summary else summary
    isolation = set(in_rounds["run_isolation"].fillna("").astype(str)) - {""}
    if isolation == {"process"}:
        return ", each in a fresh process (run isolation process)"
    if isolation == {"thread"}:
        return (
            ", all of a runner's runs in one process (run isolation thread), so they share that process's offset: "
            "a noise floor from <code>fwbench calibrate</code> covers it"
        )
    return ""


def _rounds_text(own: pd.DataFrame, summary: pd.DataFrame) -> str:
    runs = _span(_per_configuration(own, "runs"), "run")
    return (
        f"The runners ran whole runs in counterbalanced rounds (A B B A …; {runs} a runner), each run building, "
        f"warming up and measuring on its own{_isolation_text(summary)}. Each run's median step time is one "
        f"value, and a verdict compares the runners by Welch's t-test on the log run values; "
        f"{_looks_text(own, 'run')}."
    )


def method_html(rows: pd.DataFrame, summary: pd.DataFrame) -> str:
    """Two or three sentences per design these runs used, then when a difference is called and where to read more."""
    described = [
        _blocks_text(design, own) if is_blocks(design) else _rounds_text(own, summary)
        for design, own in _designs(rows).items()
    ]
    called = (
        f"A difference is called only where the ratio's {stats.CONFIDENCE:.0%} interval excludes 1 and the ratio "
        f"reaches {stats.MIN_EFFECT:.0%} and the configuration's noise floor (from <code>fwbench calibrate</code>); "
        "FLAGGED marks a verdict with evidence from a device that was not quiet. How to read a verdict: "
        f"<code>{escape(VERDICT_DOCS)}</code> in fwbench's repository."
    )
    return f'<p class="method">{" ".join(described)} {called}</p>'
