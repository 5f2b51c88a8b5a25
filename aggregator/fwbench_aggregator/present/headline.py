"""The answer first: one headline per configuration, the verdict in words, each runner's figure and the ratio with
its interval, "not resolved" said as plainly as a verdict, and where no verdict can be given, why."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import pandas as pd

from ..analyse import stats
from ..analyse.comparison import flagged_verdict
from ..store.run_columns import CONFIG_COLUMNS
from .display import DISPLAY_COLUMNS, cell
from .html_table import table_html
from .titles import configuration_title

# Verdicts that judge nothing: a runner alone in its block of alike runs.
ALONE = ("fastest", "only runner")


# Up to this many configurations the answer is a sentence each; beyond, a table of one line each.
SENTENCES_UP_TO = 3


@dataclass(frozen=True)
class Headline:
    row: pd.Series  # the configuration's first row (its CONFIG_COLUMNS name it)
    group: str  # what sets this block of alike runs apart from the configuration's others; "" where alone
    answer: str  # the verdict in words: "torch faster by 29% than tensorflow", "not resolved", "no verdict"
    figures: str  # each runner's time, fastest first
    ratio: str  # each other runner over the fastest, with its interval
    why: str  # what the runs resolve, or why there is no verdict; "" where the answer says it all

    @property
    def title(self) -> str:
        return configuration_title(self.row) + (f" [{self.group}]" if self.group else "")


def _unit(row) -> str:
    return "block" if int(getattr(row, "blocks", 0) or 0) > 0 else "run"


def _figures(ran: pd.DataFrame) -> str:
    """'torch 12.3 ms, tensorflow 16.0 ms a step (over 8 blocks)': each runner's time, fastest first."""
    ran = ran.sort_values("median_step_ms")
    first = next(ran.itertuples())
    count = int(first.blocks) if _unit(first) == "block" else int(ran["runs"].min())
    times = ", ".join(f"{r.runner} {r.median_step_ms:.4g} ms" for r in ran.itertuples())
    return f"{times} a step (over {count} {_unit(first)}{'s' if count != 1 else ''})"


def _answer(fastest: str, other) -> str:
    """One runner against the fastest, in words."""
    verdict = str(other.verdict)
    if bool(other.significant):
        # The interval is said beside it, as a ratio.
        faster = stats.faster_text(other.ratio_to_fastest, other.ratio_ci_low, other.ratio_ci_high).split(" [")[0]
        return f"{fastest} {faster} than {other.runner}"
    if " equivalent within " in verdict:
        return f"{fastest} and {other.runner} equivalent"
    if verdict.startswith("no significant difference") and " is below " in verdict:
        return "no difference worth calling"  # one was seen, below the minimum effect or the noise floor
    if verdict.startswith(("not resolved", "no significant difference", "undecided")):
        return "not resolved"
    return "no verdict"


def _ratio(fastest: str, other) -> str:
    if pd.isna(other.ratio_ci_low):
        return f"{other.runner} ÷ {fastest} {other.ratio_to_fastest:.3f}"
    return (
        f"{other.runner} ÷ {fastest} {other.ratio_to_fastest:.3f} [{other.ratio_ci_low:.3f}, {other.ratio_ci_high:.3f}]"
    )


def _why(other) -> str:
    """What a verdict other than a called difference says, less the ratio and interval said beside it."""
    why = flagged_verdict(other.verdict, other.flagged, getattr(other, "parity", ""))
    if bool(other.significant):
        return why[why.index("FLAGGED") - 1 :].strip(" []") if "FLAGGED" in why else ""
    return why


def _judged(row: pd.Series, group: str, ran: pd.DataFrame) -> Headline:
    """The headline of one block of alike runs with two or more runners."""
    fastest = str(ran.loc[ran["verdict"] == "fastest", "runner"].iloc[0]) if (ran["verdict"] == "fastest").any() else ""
    others = [r for r in ran.itertuples() if r.verdict not in ALONE]
    return Headline(
        row,
        group,
        "; ".join(dict.fromkeys(_answer(fastest, r) for r in others)),
        _figures(ran),
        "; ".join(_ratio(fastest, r) for r in others),
        "; ".join(w for w in (_why(r) for r in others) if w),
    )


def _no_verdict(frame: pd.DataFrame) -> str:
    """Why a configuration has no verdict: its runners ran apart (different machines or settings), or fewer than two
    ran."""
    ran = frame[frame["status"] == "ok"]
    failed = frame[frame["status"] != "ok"]
    if ran["group"].nunique() >= 2:
        apart = "; ".join(f"{getattr(r, 'runner_name', r.runner)} with {r.group}" for r in ran.itertuples() if r.group)
        machines = "ran on different machines" if ran["group"].astype(str).str.contains("device ").any() else "differ"
        return (
            f"the runners' runs {machines} ({apart}): only runs alike in machine and settings are compared; "
            "compare the runners in one `fwbench compare` on one machine"
        )
    why = [f"only {', '.join(ran['runner'])} ran"] if len(ran) else ["no runner ran"]
    why += [f"{r.runner} failed: {str(r.error).splitlines()[0][:120]}" for r in failed.itertuples() if r.error]
    return "; ".join(why)


def headlines(rows: pd.DataFrame) -> list[Headline]:
    """One headline per configuration (and per block of alike runs where it has several that can be judged)."""
    found: list[Headline] = []
    if rows.empty:
        return found
    for _, frame in rows.groupby(list(CONFIG_COLUMNS), sort=False):
        first = frame.iloc[0]
        judged = False
        for group, block in frame.groupby("group", sort=False):
            ran = block[(block["status"] == "ok") & block["median_step_ms"].notna()]
            if len(ran) >= 2:
                found.append(_judged(first, str(group), ran))
                judged = True
        if not judged:
            ran = frame[(frame["status"] == "ok") & frame["median_step_ms"].notna()]
            figures = _figures(ran) if len(ran) else "–"
            found.append(Headline(first, "", "no verdict", figures, "–", _no_verdict(frame)))
    return found


def _sentence(h: Headline) -> str:
    ratio = f" {h.ratio}." if h.ratio != "–" else ""
    why = f" {h.why[0].upper()}{h.why[1:]}." if h.why else ""
    return (
        f'<li><span class="config">{escape(h.title)}</span>: <b>{escape(h.answer)}</b>. {escape(h.figures)}.'
        f"{escape(ratio)}{escape(why)}</li>"
    )


def headlines_html(rows: pd.DataFrame) -> str:
    """The answer as the page opens with it: a sentence per configuration, or for many a table of one line each, its
    constant columns lifted into the caption. Ratios are the slower runner's
    time over the fastest's, with the stats.CONFIDENCE interval."""
    found = headlines(rows)
    if not found:
        return "<p>No runs.</p>"
    note = (
        f"<p>Ratios: the slower runner's time over the fastest's, with its {stats.CONFIDENCE:.0%} interval; each "
        "figure a runner's median step time.</p>"
    )
    if len(found) <= SENTENCES_UP_TO:
        return f'<ul class="headlines">{"".join(_sentence(h) for h in found)}</ul>' + note
    table = pd.DataFrame(
        [
            {
                **{DISPLAY_COLUMNS[c]: cell(h.row[c]) for c in CONFIG_COLUMNS},
                "runs alike": h.group or "–",
                "answer": h.answer,
                "time a step": h.figures,
                f"ratio [{stats.CONFIDENCE:.0%}]": h.ratio,
                "why": h.why or "–",
            }
            for h in found
        ]
    )
    return table_html(table, lift=True) + note
