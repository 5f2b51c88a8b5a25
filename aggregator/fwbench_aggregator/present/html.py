"""The report as one self-contained HTML page: plots inline as base64 PNG, CSS inline, no scripts, no external
references."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from ..analyse.findings import Finding
from ..analyse.results import Analysis
from ..store.analysis_columns import VERSION_COLUMNS
from ..store.health import Damage
from ..store.run_columns import CONFIG_COLUMNS
from .display import display_frame
from .headline import headlines_html
from .html_table import table_html
from .method import counts_text, method_html
from .plot_kit import PlotResult

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.82em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr.failed td { color: #a00000; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td { overflow-wrap: break-word; } td.long { overflow-wrap: anywhere; }
td.num { white-space: nowrap; overflow-wrap: normal; }
p.caption { color: #444; margin: 0.6em 0 0.2em; font-size: 0.9em; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.4em 0; }
pre { background: #f6f6f6; padding: 0.6em; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.8em; }
details { margin: 0.5em 0; } summary { cursor: pointer; font-weight: bold; }
ul.headlines li { margin: 0.4em 0; } ul.headlines .config { color: #444; }
p.method, p.not-covered { max-width: 60em; }
.skipped { color: #666; }
ul.findings li { margin: 0.3em 0; }
.flagged { color: #a00000; font-weight: bold; }
nav.contents ol { columns: 2; font-size: 0.9em; }
"""


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


CONTENTS_HERE = "<!-- contents -->"


def with_contents(body: str) -> str:
    """The body with an id on each section heading (h2) and a contents list of them where the body marks it
    (CONTENTS_HERE), else after its first paragraph: a long report is read by jumping to a section, and the page holds
    no script to build one."""
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
    if CONTENTS_HERE in body:
        at = body.index(CONTENTS_HERE)
    return body[:at] + "\n" + contents + body[at:]


def standalone_html(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _runners_html(summary: pd.DataFrame) -> str:
    present = [c for c in VERSION_COLUMNS if c in summary]
    if "status" in summary:
        summary = summary[summary["status"] == "ok"]
    if not present or summary.empty:
        return "<p>No successful runs to describe.</p>"
    versions = summary[present].astype(object).where(summary[present].notna(), "").astype(str).drop_duplicates()
    return table_html(versions.sort_values(present).reset_index(drop=True), lift=True)


def _code(text: str) -> str:
    """Text with `command` spans as <code>, the rest escaped."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text))


def _findings_html(findings: list[Finding]) -> str:
    """The findings these runs answer, then one line of the questions they do not and what would measure each."""
    e = html.escape
    items = "".join(
        f"<li><b>{e(f.question)}.</b> {e(f.sentence)}"
        + (f' <span class="flagged">FLAGGED: {e(f.flagged)}</span>' if f.flagged else "")
        + "</li>"
        for f in findings
        if not f.measured_by
    )
    uncovered = "; ".join(f"{e(f.question)} ({_code(f.measured_by)})" for f in findings if f.measured_by)
    return (
        "<h2>Findings</h2>"
        + (f'<ul class="findings">{items}</ul>' if items else "")
        + (f'<p class="not-covered">These runs do not cover: {uncovered}.</p>' if uncovered else "")
    )


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
    """The opening paragraph: when the page was made, what its runs are in their design's units (blocks of windows,
    or runs in rounds), the configurations and the runners."""
    e = html.escape
    configurations = rows[list(CONFIG_COLUMNS)].drop_duplicates().shape[0] if not rows.empty else 0
    runners = ", ".join(sorted(set(rows["runner"]))) if not rows.empty else "none"
    return (
        f"<p>Generated {e(datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC'))} from {e(counts_text(rows, summary))}; "
        f"{configurations} configuration{'' if configurations == 1 else 's'}, runners: {e(runners)}.</p>"
    )


def _unresolved_html(unresolved: Sequence[str]) -> str:
    if not unresolved:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in unresolved)
    return f"<h2>Points left unresolved</h2><ul>{items}</ul>"


def _plots_html(plots: list[PlotResult]) -> list[str]:
    """Each drawn plot inline, with the points marked as not run; none where no plot was drawn (what these runs do
    not cover the findings say)."""
    e = html.escape
    if all(p.path is None for p in plots):
        return []
    parts = ["<h2>Plots</h2>"]
    for plot in (p for p in plots if p.path is not None):
        parts.append(f"<h3>{e(plot.title)}</h3>")
        parts.append(f'<img src="{png_data_uri(plot.path)}" alt="{e(plot.title)}">')
        if plot.missing:
            marks = "; ".join(f"{m.runner} {m.config}: {m.label}" for m in plot.missing)
            parts.append(f'<p class="skipped">Marked ✕ (did not run): {e(marks)}</p>')
    return parts


def _evidence_html(evidence: PlotResult | None) -> str:
    """The evidence each verdict rests on (present.evidence), drawn under the answer; "" where none was drawn."""
    if evidence is None or evidence.path is None:
        return ""
    e = html.escape
    return f'<img src="{png_data_uri(evidence.path)}" alt="{e(evidence.title)}">'


def _study_tables_html(study_tables: Sequence[tuple[str, str, str, pd.DataFrame]]) -> list[str]:
    parts = []
    for _, title, explanation, shown in study_tables:
        parts += [f"<h2>{html.escape(title)}</h2><p>{html.escape(explanation)}</p>", table_html(shown, lift=True)]
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
        parts += [f"<h3>{html.escape(title)}</h3>", table_html(shown, lift=True)]
    return parts


def _failed_runs_html(rows: pd.DataFrame) -> list[str]:
    failed = rows[rows["status"] != "ok"] if not rows.empty else rows
    if failed.empty:
        return []
    return [
        "<h2>Failed runs</h2>",
        table_html(
            failed[[*CONFIG_COLUMNS, "runner", "failed_runs", "error"]].astype(str), [True] * len(failed), lift=True
        ),
    ]


def _details_html(summary: pd.DataFrame, manifest: dict | None) -> list[str]:
    """The runners' versions and options and the manifest, folded: facts to look up, not to read through (a
    <details> element opens without a script)."""
    manifest_text = (
        f"<pre>{html.escape(json.dumps(manifest, indent=2, sort_keys=True, default=str))}</pre>"
        if manifest
        else "<p>No manifest given.</p>"
    )
    return [
        "<h2>Runners and manifest</h2>",
        f"<details><summary>Runners: versions, devices and options</summary>{_runners_html(summary)}</details>",
        f"<details><summary>Manifest (JSON)</summary>{manifest_text}</details>",
    ]


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
    evidence: PlotResult | None = None,
) -> str:
    """One self-contained page: what its runs are, the answer (a headline per configuration), how the runs were made,
    a contents list, then the files left out, findings (and what these runs do not cover), points left unresolved,
    plots, the studies' tables, serving, scaling, versions, parity, the comparison, failed runs, and the runners and
    manifest folded. A section appears only where its runs say something. `serving` and `versions` are sections
    rendered elsewhere (present.serving, present.versions)."""
    rows = analysis.rows
    parts = [
        "<h1>fwbench comparison report</h1>",
        _run_counts_html(summary, rows),
        "<h2>The answer</h2>",
        headlines_html(rows),
        _evidence_html(evidence),
        method_html(rows, summary),
        CONTENTS_HERE,
        _left_out_html(left_out) if left_out else "",
        _findings_html(analysis.findings),
        _unresolved_html(unresolved),
        *_plots_html(plots),
        *_study_tables_html(study_tables),
        serving,  # the Serving and Generation sections (present.serving, present.generation), where runs had them
        *_scaling_html(tables),
        versions,
        parity_html(parity),
        "<h2>Comparison</h2>",
        table_html(display_frame(rows), rows["status"] != "ok", lift=True) if not rows.empty else _NO_RUNS,
        *_failed_runs_html(rows),
        *_details_html(summary, manifest),
    ]
    return standalone_html("fwbench comparison report", with_contents("\n".join(parts)))
