"""The report's files: the comparison table (CSV, Markdown, HTML), the studies' tables and findings, scaling, the
plots, and report.html holding them all. Everything here renders an Analysis; nothing is computed twice."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..analyse import stats
from ..analyse.efficiency import TRAIN_FLOPS_FACTOR
from ..analyse.findings import Finding, not_covered
from ..analyse.results import Analysis
from ..analyse.scaling import has_scaling, strategy_pairs
from ..analyse.stopping import unsettled
from ..analyse.trends import FLATTEN_GAIN
from ..analyse.versions import VersionTables
from ..base.write_paths import output_folder
from ..store.health import Damage
from .console import err_console
from .display import (
    STRATEGY_TABLES,
    display_frame,
    efficiency_display,
    native_display,
    optimal_display,
    pairs_display,
    scaling_display,
    search_display,
    to_markdown,
    trend_display,
)
from .evidence import evidence_plot
from .generation import generation_section_html, print_generation
from .html import render_html, standalone_html
from .html_table import table_html
from .line_plots import latency_load_plot, scaling_plot
from .plots import make_plots
from .serving import print_serving, serving_section_html
from .terminal import print_findings, print_scaling, print_series
from .titles import configuration_title
from .versions import write_versions_section


def write_tables(rows: pd.DataFrame, out_dir: Path, stem: str = "comparison") -> list[Path]:
    """comparison.csv (every column, full precision), comparison.md and comparison.html (as displayed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path, html_path = (out_dir / f"{stem}.{ext}" for ext in ("csv", "md", "html"))
    rows.to_csv(csv_path, index=False)
    shown = display_frame(rows)
    md_path.write_text(to_markdown(shown))
    html_path.write_text(standalone_html("fwbench comparison", table_html(shown)))
    return [csv_path, md_path, html_path]


def scaling_tables(rows: pd.DataFrame, scaling: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(key, title, displayed table) of the studies' tables that have data: DP vs DDP, DDP vs MirroredStrategy,
    and efficiency against devices."""
    tables = []
    for key, title, first, second in STRATEGY_TABLES:
        pairs = strategy_pairs(rows, first, second)
        if not pairs.empty:
            tables.append((key, f"{title} ({second} samples/s ÷ {first})", pairs_display(pairs, first, second)))
    if has_scaling(scaling):
        tables.append(("efficiency", "Scaling efficiency against devices", scaling_display(scaling)))
    return tables


def write_scaling(
    rows: pd.DataFrame, scaling: pd.DataFrame, out_dir: Path
) -> tuple[list[tuple[str, str, pd.DataFrame]], list[Path]]:
    """scaling.csv (every column) and scaling.md (the studies' tables), where any has data."""
    tables = scaling_tables(rows, scaling)
    if not tables:
        return tables, []
    csv_path, md_path = out_dir / "scaling.csv", out_dir / "scaling.md"
    scaling.to_csv(csv_path, index=False)
    md_path.write_text(
        "".join(f"## {title}\n\n{to_markdown(shown)}\n" for _, title, shown in tables)
        + ("![scaling](plots/scaling.png)\n" if has_scaling(scaling) else "")
    )
    return tables, [csv_path, md_path]


def _telling(analysis: Analysis) -> dict[str, pd.DataFrame]:
    """Each study table's rows that say something: an optimum among two or more batches (or where the batches that
    fit end), a trend tested, a FLOP rate counted; a row that says only "one batch size measured" or "not tested" is
    left out, and a table with no row left with it; Keras against its native runners only where one was judged so."""
    optimal, trends, efficiency, rows = analysis.optimal, analysis.trends, analysis.efficiency, analysis.rows
    one_batch = optimal["optimal_status"].astype(str).str.startswith("one batch size")
    noted = (optimal["fit_note"].fillna("") != "") | (optimal["budget_note"].fillna("") != "")
    return {
        "optimal_batch": optimal[~one_batch | noted],
        "batch_trend": trends[~trends["trend"].astype(str).str.startswith("not tested")],
        "best_search": analysis.searches,
        "hardware_efficiency": efficiency[efficiency["achieved_flops_per_s"].notna()],
        # Every row, for the native runners' medians, where a Keras runner was judged against one.
        "native_overhead": rows
        if rows.get("native_runner", pd.Series(dtype=str)).fillna("").ne("").any()
        else rows[:0],
    }


def study_tables(analysis: Analysis) -> list[tuple[str, str, str, pd.DataFrame]]:
    """(file stem, title, explanation, displayed table) of each study table with rows that say something."""
    telling = _telling(analysis)
    explained = (
        (
            "optimal_batch",
            "Optimal batch size",
            telling["optimal_batch"],
            optimal_display,
            "Per runner and series: the batch with the highest throughput among those that ran (so fit), with its "
            f"{stats.CONFIDENCE:.0%} interval over runs; ≈ lists batches the runs cannot tell from it. 'fit' says where "
            "the batches that fit end (fwbench max-batch, or out-of-memory runs). With --latency-budget-ms: the largest "
            "batch whose step time's interval ends under the budget.",
        ),
        (
            "batch_trend",
            "Batch size and time per sample",
            telling["batch_trend"],
            trend_display,
            f"Does time per sample fall as the batch grows? Spearman's rank correlation over every run (significant at "
            f"p < {stats.ALPHA:g}), the log-log slope as the factor per doubling, and the batch past which each doubling "
            f"gains less than {FLATTEN_GAIN:.0%}.",
        ),
        (
            "best_search",
            "Best-profile searches",
            telling["best_search"],
            search_display,
            "Under the best profile each runner first tries its own settings, one at a time from its native ones, "
            "each candidate with the same runs; the fastest (chosen) is then compared on fresh runs, reported in the "
            "comparison under the best profile.",
        ),
        (
            "hardware_efficiency",
            "Hardware efficiency",
            telling["hardware_efficiency"],
            efficiency_display,
            f"Achieved FLOP/s: forward FLOPs per sample (as the runner counted them) × the job's samples per step "
            f"(× {TRAIN_FLOPS_FACTOR:g} for training) over the median step time. MFU: that over the device's "
            "published dense peak for the precision (fwbench_aggregator/analyse/peaks.py), where it is known.",
        ),
        (
            "native_overhead",
            "Keras against the framework it runs on",
            telling["native_overhead"],
            native_display,
            "Each Keras runner against the framework it runs on used natively, where both ran in the same block of "
            f"alike runs: their median step times, the ratio (above 1: Keras slower) with its {stats.CONFIDENCE:.0%} "
            "interval over runs, and the verdict, judged as every pair of runners is.",
        ),
    )
    return [(stem, title, text, show(frame)) for stem, title, frame, show, text in explained if len(frame)]


def finding_text(finding: Finding) -> str:
    return f"{finding.question}: {finding.sentence}" + (f" [FLAGGED: {finding.flagged}]" if finding.flagged else "")


def unresolved_lines(rows: pd.DataFrame, not_run: Sequence[str] = ()) -> list[str]:
    """The points a sequential design left unsettled (analyse.stopping.unsettled), each with why, and the points a
    sweep's time budget left without runs."""
    why = {
        "stopped": "its rounds stopped before the verdict settled (a time budget ran out, a runner failed, or the "
        "sweep was stopped); `fwbench sweep --resume` runs more",
        "run budget": "the run budget (max_repetitions) was spent",
        "futile": "at its runs' spread the whole run budget would most likely not settle it",
    }
    lines = [
        f"{configuration_title(r)}: {r['runner']}: {r['verdict']} ({why[r['why']]})"
        for _, r in unsettled(rows).iterrows()
    ]
    return lines + [f"{label}: not run: the time budget was spent before it started" for label in not_run]


def write_studies(analysis: Analysis, out_dir: Path, not_run: Sequence[str] = ()) -> list[Path]:
    """findings.md (the findings, the points left unresolved, then each study table) and one CSV per study table,
    every column."""
    written = []
    for stem, frame in (
        ("optimal_batch", analysis.optimal),
        ("batch_trend", analysis.trends),
        ("best_search", analysis.searches),
        ("hardware_efficiency", analysis.efficiency),
    ):
        if len(frame):
            frame.to_csv(out_dir / f"{stem}.csv", index=False)
            written.append(out_dir / f"{stem}.csv")
    text = "# Findings\n\n" + "".join(f"- {finding_text(f)}\n" for f in analysis.findings if not f.measured_by)
    uncovered = not_covered(analysis.findings)
    text += f"\nNot covered by these runs: {uncovered}.\n" if uncovered else ""
    unresolved = unresolved_lines(analysis.rows, not_run)
    if unresolved:
        text += "\n## Points left unresolved\n\n" + "".join(f"- {line}\n" for line in unresolved)
    text += "".join(
        f"\n## {title}\n\n{explanation}\n\n{to_markdown(shown)}"
        for _, title, explanation, shown in study_tables(analysis)
    )
    (out_dir / "findings.md").write_text(text)
    return [*written, out_dir / "findings.md"]


def write_report(
    analysis: Analysis,
    summary: pd.DataFrame,
    manifest: dict | None,
    out_dir: Path,
    left_out: Sequence[Damage] = (),
    not_run: Sequence[str] = (),
    versions: VersionTables | None = None,
    parity: pd.DataFrame | None = None,
) -> Path:
    """report.html in out_dir: one self-contained file, a contents list, the store's unreadable files it left out (if
    any) and the findings at its top, and every section these runs support (`versions`: analyse.versions.VersionTables,
    where they hold two versions of a configuration; `parity`: the stored parity checks). Beside it:
    comparison.csv/.md/.html, findings.md and the study tables' CSVs, scaling.csv/.md where any ran on several
    devices, serving.csv and generation.csv, the version tables' CSVs, and the plots as PNG files (each with its CSV) under plots/.
    Returns its path."""
    out_dir = output_folder(Path(out_dir), "--out")
    write_tables(analysis.rows, out_dir)
    write_studies(analysis, out_dir, not_run)
    plots = make_plots(analysis.rows, out_dir / "plots", analysis.optimal, analysis.runs)
    plots.append(scaling_plot(analysis.scaling, out_dir / "plots", runs=analysis.runs))
    evidence = evidence_plot(analysis.rows, analysis.runs, summary, out_dir / "plots")
    tables, _ = write_scaling(analysis.rows, analysis.scaling, out_dir)
    if len(analysis.serving):
        analysis.serving.to_csv(out_dir / "serving.csv", index=False)
    if len(analysis.generation):
        analysis.generation.to_csv(out_dir / "generation.csv", index=False)
    workloads = serving_section_html(
        analysis.serving, analysis.capacities, latency_load_plot(analysis.load_curve, out_dir / "plots")
    ) + generation_section_html(analysis.generation)
    versions_html = write_versions_section(versions, out_dir) if versions is not None else ""
    path = out_dir / "report.html"
    path.write_text(
        render_html(
            summary,
            analysis,
            plots,
            manifest,
            tables,
            study_tables(analysis),
            left_out,
            unresolved_lines(analysis.rows, not_run),
            workloads,
            versions_html,
            parity,
            evidence,
        ),
        encoding="utf-8",
    )
    return path


def print_report(analysis: Analysis, path: Path) -> None:
    """The report on the terminal: each series' table, scaling where a configuration ran on several device counts,
    every configuration under a serving scenario, the findings, and where report.html is."""
    print_series(analysis.rows)
    if not analysis.scaling.empty and (analysis.scaling["world_size"] > 1).any():
        print_scaling(analysis.scaling)
    if len(analysis.serving):
        print_serving(analysis.serving)
    if len(analysis.generation):
        print_generation(analysis.generation)
    print_findings(analysis.findings)
    err_console.print(f"report: {path}", markup=False, highlight=False)
