"""The report as one self-contained HTML page: plots inline as base64 PNG, CSS inline, no scripts, no external
references."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from ..analyse import stats
from ..analyse.findings import Finding
from ..analyse.results import Analysis
from ..store.analysis_columns import VERSION_COLUMNS
from ..store.health import Damage
from ..store.run_columns import CONFIG_COLUMNS
from .display import NUMERIC_HEADERS, display_frame, verdict_table
from .plot_kit import PlotResult

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.82em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr.failed td { color: #a00000; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.4em 0; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.8em; }
.skipped { color: #666; }
ul.findings li { margin: 0.3em 0; }
.flagged { color: #a00000; font-weight: bold; }
nav.contents ol { columns: 2; font-size: 0.9em; }
"""


def table_html(shown: pd.DataFrame, failed: Iterable[bool] | None = None) -> str:
    e = html.escape
    failed = list(failed) if failed is not None else [False] * len(shown)
    head = "".join(f"<th>{e(str(c))}</th>" for c in shown.columns)
    body = []
    for is_failed, values in zip(failed, shown.itertuples(index=False)):
        cells = "".join(
            f'<td class="num">{e(str(v))}</td>' if c in NUMERIC_HEADERS else f"<td>{e(str(v))}</td>"
            for c, v in zip(shown.columns, values)
        )
        body.append(f'<tr class="failed">{cells}</tr>' if is_failed else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_HEADING = re.compile(r"<h2>(.*?)</h2>", re.S)


def _anchor(heading: str, taken: set[str]) -> str:
    """A section's id from its heading's text: lower case, words joined by hyphens, unique in the page."""
    text = html.unescape(re.sub(r"<[^>]+>", "", heading))
    anchor = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    candidate, n = anchor, 2
    while candidate in taken:
        candidate, n = f"{anchor}-{n}", n + 1
    taken.add(candidate)
    return candidate


def with_contents(body: str) -> str:
    """The body with an id on each section heading (h2) and a contents list of them after its first paragraph: a
    long report is read by jumping to a section, and the page holds no script to build one."""
    taken: set[str] = set()
    entries: list[tuple[str, str]] = []

    def identified(match: re.Match) -> str:
        anchor = _anchor(match.group(1), taken)
        entries.append((anchor, match.group(1)))
        return f'<h2 id="{anchor}">{match.group(1)}</h2>'

    body = _HEADING.sub(identified, body)
    if not entries:
        return body
    items = "".join(f'<li><a href="#{anchor}">{heading}</a></li>' for anchor, heading in entries)
    contents = f'<nav class="contents" aria-label="Contents"><h2>Contents</h2><ol>{items}</ol></nav>'
    first = body.find("</p>")
    at = first + len("</p>") if first >= 0 else 0
    return body[:at] + "\n" + contents + body[at:]


def standalone_html(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _versions_html(summary: pd.DataFrame) -> str:
    present = [c for c in VERSION_COLUMNS if c in summary]
    if "status" in summary:
        summary = summary[summary["status"] == "ok"]
    if not present or summary.empty:
        return "<p>No successful runs to describe.</p>"
    versions = summary[present].astype(object).where(summary[present].notna(), "").astype(str).drop_duplicates()
    return table_html(versions.sort_values(present).reset_index(drop=True))


def _findings_html(findings: list[Finding]) -> str:
    e = html.escape
    items = "".join(
        f"<li><b>{e(f.question)}.</b> {e(f.sentence)}"
        + (f' <span class="flagged">FLAGGED: {e(f.flagged)}</span>' if f.flagged else "")
        + "</li>"
        for f in findings
    )
    return f'<h2>Findings</h2><ul class="findings">{items}</ul>'


def parity_html(checks: pd.DataFrame) -> str:
    """The "Parity" section: each stored check of a plug-in model between two runners (fwbench parity), newest
    first; empty where the store holds none."""
    if checks is None or checks.empty:
        return ""
    shown = checks.sort_values("checked_at_unix_s", ascending=False)
    table = pd.DataFrame(
        {
            "model": shown["model"],
            "variant": shown["variant"].fillna(""),
            "runners": [f"{o} against {r}" for r, o in zip(shown["reference_runner"], shown["runner"])],
            "verdict": shown["verdict"],
            "outputs": shown["numeric"].fillna(""),
            "model hash": shown["model_hash"].fillna("").astype(str).str[:12],
            "checked": [
                datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M UTC") for t in shown["checked_at_unix_s"]
            ],
        }
    )
    return (
        "<h2>Parity</h2><p>Whether two runners build the same network of a plug-in model (fwbench parity): "
        "parameters and FLOPs within tolerance, the same output shape and, where compared, matching outputs. A "
        'comparison of a plug-in says "parity not checked" until a check at its model hash covers its runners.'
        "</p>" + table_html(table, table["verdict"] != "same")
    )


def _left_out_html(left_out: Sequence[Damage]) -> str:
    items = "".join(f"<li><code>{html.escape(str(d.path))}</code>: {html.escape(d.reason)}</li>" for d in left_out)
    return (
        '<h2>Left out: damaged files</h2><p class="flagged">These files of the store cannot be read: the runs '
        "(or other entries) holding them are left out of this report, whole. <code>fwbench store check</code> "
        "lists them; <code>fwbench sweep --resume</code> runs a damaged run again, keeping its files in the "
        f"store's damaged/ folder.</p><ul>{items}</ul>"
    )


def _run_counts_html(summary: pd.DataFrame, rows: pd.DataFrame) -> str:
    """The opening paragraph: when the page was made, how many runs (ok and failed), configurations and runners."""
    e = html.escape
    status = summary["status"] if "status" in summary else pd.Series(["ok"] * len(summary))
    n_ok, n_failed = int((status == "ok").sum()), int((status != "ok").sum())
    configurations = rows[list(CONFIG_COLUMNS)].drop_duplicates().shape[0] if not rows.empty else 0
    runners = ", ".join(sorted(set(rows["runner"]))) if not rows.empty else "none"
    return (
        f"<p>Generated {e(datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC'))} from {n_ok + n_failed} runs "
        f"({n_ok} ok, {n_failed} failed); {configurations} configurations, runners: {e(runners)}.</p>"
    )


def _method_html() -> list[str]:
    """How a verdict is reached (the run as the unit of evidence, the test, the noise floor) and how the runs were
    ordered and stopped, with the thresholds analyse.stats applies."""
    return [
        "<p>The unit of evidence is the run: each run's median step time is one value, a runner's time is the "
        "geometric mean of its runs' values, and a verdict compares the fastest runner of a configuration with each "
        f"other one by Welch's t-test on the log run values ({stats.CONFIDENCE:.0%} interval, at least "
        f"{stats.MIN_REPETITIONS} runs a side). A difference is called only where the interval excludes none and the "
        f"ratio reaches {stats.MIN_EFFECT:.0%} and the configuration's noise floor (the far end of an A/A comparison "
        "measured by <code>fwbench calibrate</code>; – where not measured). Verdicts marked FLAGGED had a run on a "
        "device that was not quiet (another process, throttled clocks, a busy host).</p>",
        "<p>The runners ran in counterbalanced rounds (A, B, B, A, ...), so that a host drifting over the "
        "comparison favours neither. Under <code>--repetitions auto</code> the verdict was looked at after every "
        "round and the runs stopped once it settled; each look tests at a stricter level, so that looking often "
        f"still calls identical runners different in at most {stats.ALPHA:.0%} of comparisons. A runner that kept one "
        "process for all its runs (run isolation thread, the CPU default) shares that process's offset across them: "
        "two instances of one runner can sit a few percent apart, which a noise floor from "
        "<code>fwbench calibrate</code> covers, and runs each in a fresh process (run isolation process) sample "
        "instead, at more than twice the time. docs/verdict.md has the measurements.</p>",
    ]


def _unresolved_html(unresolved: Sequence[str]) -> str:
    if not unresolved:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in unresolved)
    return f"<h2>Points left unresolved</h2><ul>{items}</ul>"


def _plots_html(plots: list[PlotResult]) -> list[str]:
    """Each drawn plot inline, with the points marked as not run, then the plots not drawn and why."""
    e = html.escape
    parts = ["<h2>Plots</h2>"]
    for plot in (p for p in plots if p.path is not None):
        parts.append(f"<h3>{e(plot.title)}</h3>")
        parts.append(f'<img src="{png_data_uri(plot.path)}" alt="{e(plot.title)}">')
        if plot.missing:
            marks = "; ".join(f"{m.runner} {m.config}: {m.label}" for m in plot.missing)
            parts.append(f'<p class="skipped">Marked ✕ (did not run): {e(marks)}</p>')
    skipped = [p for p in plots if p.path is None]
    if skipped:
        parts.append(
            '<h3>Plots not drawn</h3><ul class="skipped">'
            + "".join(f"<li>{e(p.title)}: {e(p.reason)}</li>" for p in skipped)
            + "</ul>"
        )
    return parts


def _study_tables_html(study_tables: Sequence[tuple[str, str, str, pd.DataFrame]]) -> list[str]:
    parts = []
    for _, title, explanation, shown in study_tables:
        parts += [f"<h2>{html.escape(title)}</h2><p>{html.escape(explanation)}</p>", table_html(shown)]
    return parts


def _scaling_html(tables: Sequence[tuple[str, str, pd.DataFrame]]) -> list[str]:
    """The "Strategies and scaling" section, where a configuration ran on several device counts; none otherwise."""
    if not tables:
        return []
    parts = [
        "<h2>Strategies and scaling</h2>",
        "<p>Batch sizes are per device; throughput counts the job's samples (the per-device batch on every "
        "device of every runner) over the slowest rank's step time. Efficiency is the throughput on N "
        "devices over N times the same runner's on one device, at the same per-device batch.</p>",
    ]
    for _, title, shown in tables:
        parts += [f"<h3>{html.escape(title)}</h3>", table_html(shown)]
    return parts


def _failed_runs_html(rows: pd.DataFrame) -> list[str]:
    failed = rows[rows["status"] != "ok"] if not rows.empty else rows
    if failed.empty:
        return []
    return [
        "<h2>Failed runs</h2>",
        table_html(failed[[*CONFIG_COLUMNS, "runner", "failed_runs", "error"]].astype(str), [True] * len(failed)),
    ]


def _manifest_html(manifest: dict | None) -> str:
    if not manifest:
        return "<p>No manifest given.</p>"
    return f"<pre>{html.escape(json.dumps(manifest, indent=2, sort_keys=True, default=str))}</pre>"


_NO_RUNS = "<p>No runs.</p>"


def render_html(
    summary: pd.DataFrame,
    analysis: Analysis,
    plots: list[PlotResult],
    manifest: dict | None,
    tables: list[tuple[str, str, pd.DataFrame]] = (),
    study_tables: list[tuple[str, str, str, pd.DataFrame]] = (),
    left_out: Sequence[Damage] = (),
    unresolved: Sequence[str] = (),
    serving: str = "",
    versions: str = "",
    parity: pd.DataFrame | None = None,
) -> str:
    """One self-contained page, a contents list after its opening paragraph: the files left out, findings, points left
    unresolved, plots, the studies' tables, serving, scaling, versions, parity, verdicts, the comparison, failed
    runs, the runners and the manifest. `serving` and `versions` are sections rendered elsewhere (present.serving,
    present.versions)."""
    rows = analysis.rows
    parts = [
        "<h1>fwbench comparison report</h1>",
        _run_counts_html(summary, rows),
        *_method_html(),
        _left_out_html(left_out) if left_out else "",
        _findings_html(analysis.findings),
        _unresolved_html(unresolved),
        *_plots_html(plots),
        *_study_tables_html(study_tables),
        serving,  # the Serving and Generation sections (present.serving, present.generation), where runs had them
        *_scaling_html(tables),
        versions,
        parity_html(parity),
        "<h2>Verdicts</h2>",
        table_html(verdict_table(rows).astype(str)) if not rows.empty else _NO_RUNS,
        "<h2>Comparison</h2>",
        table_html(display_frame(rows), rows["status"] != "ok") if not rows.empty else _NO_RUNS,
        *_failed_runs_html(rows),
        "<h2>Runners</h2>",
        _versions_html(summary),
        "<h2>Manifest</h2>",
        _manifest_html(manifest),
    ]
    return standalone_html("fwbench comparison report", with_contents("\n".join(parts)))
