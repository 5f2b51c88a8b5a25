"""The version report: each version against the previous one, regressions and improvements first, in the terminal
and as versions.html (self-contained, as report.html), with its tables as CSV and a plot per model."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
from rich.markup import escape

from ..analyse.versions import CONFIRMED, NOT_CONFIRMED, VersionTables, plot_series
from ..base.write_paths import output_folder
from .console import Column, err_console, out_console, print_table
from .html import png_data_uri, standalone_html
from .html_table import table_html
from .line_plots import version_plot

PAGE = "versions.html"
CHANGES_CSV, POINTS_CSV = "version_changes.csv", "version_points.csv"
CHANGE_STYLES = {"regression": "bold red", "improvement": "green"}


def change_line(row: dict) -> str:
    """The change as one sentence: its text, its confirmation (both rounds' figures where it was not confirmed), and
    what else differed between the versions' runs."""
    line = row["text"]
    if row.get("confirmation") == CONFIRMED:
        line += f"; confirmed by a second round ({row['confirmation_text']})"
    elif row.get("confirmation") == NOT_CONFIRMED:
        line += f"; not confirmed: the second round found {row['confirmation_text']}"
    elif row.get("confirmation"):
        line += f"; {row['confirmation']} by a second round"
    if row.get("environment"):
        line += f" [FLAGGED: not only the version differs: {row['environment']}]"
    return line


def _shown(changes: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "change": changes["change"],
            "between": [change_line(r) for r in changes.to_dict("records")],
            "confirmation": changes["confirmation"].fillna(""),
            "runs": [f"{a} / {b}" for a, b in zip(changes["runs_from"], changes["runs_to"])],
            "noise floor": ["–" if pd.isna(v) else f"{v:.1%}" for v in changes["noise_floor"]],
            "verdict": changes["verdict"],
        }
    )


def versions_section_html(changes: pd.DataFrame, points: pd.DataFrame, plots_dir: Path) -> str:
    """The "Framework versions" section, as the version report and report.html show it: each version against the
    previous one, step time against version per model (its plots written into `plots_dir`), and what ran each."""
    e = html.escape
    body = [
        f"<h2>Framework versions side by side</h2><p>{len(changes)} version change(s) over "
        f"{points['framework_version'].nunique()} version(s); regressions and improvements first. A regression "
        "is confirmed only where a second round of fresh, interleaved runs calls it too.</p>",
        "<h3>Each version against the previous one</h3>",
        table_html(_shown(changes), lift=True),
        "<h3>Step time against version</h3>",
    ]
    for model in dict.fromkeys(points["model"]):
        plot = version_plot(*plot_series(points, model), model, plots_dir)
        body.append(
            f'<img alt="{e(plot.title)}" src="{png_data_uri(plot.path)}">'
            if plot.path
            else f'<p class="skipped">{e(plot.title)}: {e(plot.reason)}</p>'
        )
    images = points[
        [
            "framework",
            "framework_version",
            "runners",
            "container_image",
            "image_digest",
            "container_base_image",
            "base_image_digest",
        ]
    ].drop_duplicates()
    body += ["<h3>What ran each version</h3>", table_html(images.fillna(""))]
    return "\n".join(body)


def write_versions_section(tables: VersionTables, out: Path) -> str:
    """The two tables as CSV and a plot per model into `out`; the section that shows them."""
    out.mkdir(parents=True, exist_ok=True)
    tables.changes.to_csv(out / CHANGES_CSV, index=False)
    tables.points.to_csv(out / POINTS_CSV, index=False)
    return versions_section_html(tables.changes, tables.points, out / "plots")


def write_version_report(tables: VersionTables, out: Path) -> Path:
    """versions.html, the two tables as CSV and a plot per model into `out`; the page's path."""
    path = output_folder(out, "--out") / PAGE
    body = "<h1>fwbench: framework versions</h1>\n" + write_versions_section(tables, out)
    path.write_text(standalone_html("fwbench: versions", body))
    return path


def print_version_report(changes: pd.DataFrame, path: Path) -> None:
    columns = [
        Column("change", key=True),
        Column("between", wrap_at=90),
        Column("runs", numeric=True),
        Column("noise floor", numeric=True),
    ]
    shown = _shown(changes)
    rows = [[r["change"], r["between"], r["runs"], r["noise floor"]] for r in shown.to_dict("records")]
    print_table(
        columns,
        rows,
        "Each version against the previous one",
        out_console,
        styles=[CHANGE_STYLES.get(change) for change in changes["change"]],
    )
    err_console.print(f"version report: {escape(str(path))}", highlight=False)
