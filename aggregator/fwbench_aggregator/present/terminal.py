"""What a comparison, a study's report and a calibration print: tables that fit the terminal (80 columns and up),
the settings that are the same on every runner in the title, and each fact said once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from rich.markup import escape

from ..analyse.comparison import flagged_verdict, is_out_of_memory
from ..analyse.findings import Finding, not_covered
from ..analyse.parity import PARITY_DIFFERENT, PARITY_NOT_CHECKED
from ..run.client import RunnerFailure, RunResult
from ..store.run_columns import SCALING_KEY_COLUMNS, SERIES_COLUMNS
from .console import Column, err_console, out_console, print_table
from .display import KEY_HEADERS, NUMERIC_HEADERS, SCALING_DISPLAY, cell, scaling_display
from .next_step import next_step
from .strip import strip_lines
from .titles import configuration_title, settings_title, title_part

VERDICT_WIDTH = 34


def _ms(value: float) -> str:
    return "–" if pd.isna(value) else f"{value:.2f}"


def run_flags(results: Sequence[RunResult]) -> dict[str, list[str]]:
    """Each warning a runner raised about its figures, with the runs it concerns: said once, not once per run."""
    flags: dict[str, list[str]] = {}
    for r in results:
        for flag in r.summary.flags:
            flags.setdefault(flag, []).append(f"{r.runner} #{r.repetition + 1}")
    return flags


def _in_blocks(ran: pd.DataFrame) -> bool:
    """Whether every measured row was made in process blocks."""
    return not ran.empty and bool((ran.get("blocks", pd.Series(0, index=ran.index)) > 0).all())


def print_compare(
    rows: pd.DataFrame,
    run_dir: Path | None,
    store: Path,
    scaling: pd.DataFrame,
    results: Sequence[RunResult],
    report: Path | None = None,
) -> None:
    """One configuration's rows: the table, each runner's verdict, the noise floor, energy, each runner's blocks or
    runs as a strip (present.strip), flags, where its results and its report are."""
    if rows.empty:
        return
    ran = rows[rows["status"] == "ok"]
    energy = ran["energy_per_sample_j"].notna().any()
    distributed = (ran["world_size"] > 1).any()
    # In process blocks a row counts its windows, and its median and spread are of its blocks' values.
    count, unit = ("windows", "block") if _in_blocks(ran) else ("runs", "run")
    columns = [
        Column("runner", key=True),
        Column("version", key=True),
        Column(count, numeric=True),
        Column(f"median ms\n(of {unit}s)", numeric=True),
        Column("p5–p95 ms\n(of steps)", numeric=True),
        Column(f"{unit}\nspread", numeric=True),
        Column("samples/s", numeric=True),
        Column("× fastest", numeric=True),
        *([Column("J/sample", numeric=True), Column("mean W", numeric=True)] if energy else []),
        *([Column("devices", numeric=True), Column("straggler\nspread", numeric=True)] if distributed else []),
    ]
    table = []
    for r in ran.itertuples():
        table.append(
            (
                r.runner,
                str(r.framework_version),
                str(r.runs),
                _ms(r.median_step_ms),
                f"{_ms(r.p5_step_ms)}–{_ms(r.p95_step_ms)}",
                cell(r.run_spread, "run_spread"),
                f"{r.throughput_samples_per_s:.1f}",
                f"{r.ratio_to_fastest:.3f}",
                *((cell(r.energy_per_sample_j, "energy_per_sample_j"), cell(r.mean_power_w)) if energy else ()),
                *((str(r.world_size), cell(r.straggler_spread, "straggler_spread")) if distributed else ()),
            )
        )
    first = rows.iloc[0]
    settings = settings_title(rows)
    print_table(columns, table, configuration_title(first) + (f"\n{settings}" if settings else ""))
    _print_verdicts(rows)
    for line in strip_lines(results):
        out_console.print(line, markup=False, highlight=False)
    if not scaling.empty:
        print_scaling(scaling)
    for flag, runs in run_flags(results).items():
        err_console.print(f"[yellow]{escape(', '.join(runs))}: {escape(flag)}[/]", highlight=False)
    if run_dir is not None:
        err_console.print(f"results: {run_dir} (every run also in {store})", markup=False, highlight=False)
    if report is not None:
        err_console.print(f"report: {report}", markup=False, highlight=False)


def _print_verdicts(rows: pd.DataFrame) -> None:
    ran = rows[rows["status"] == "ok"]
    judged = rows[~rows["verdict"].isin(["fastest", "only runner"])]
    fastest = ran.loc[ran["ratio_to_fastest"].idxmin(), "runner"] if ran["ratio_to_fastest"].notna().any() else ""
    for r in judged.itertuples():
        # Which pair a verdict is about, where there are more than two: it is never the subject of the sentence.
        who = "" if len(rows) == 2 else f" ({r.runner} vs {fastest})"
        under = f" ({r.profile} profile)" if getattr(r, "profile", "") else ""
        out_console.print(
            f"verdict{who}{under}: {flagged_verdict(r.verdict, r.flagged, getattr(r, 'parity', ''))}",
            markup=False,
            highlight=False,
        )
    for r in ran[ran.get("native_verdict", pd.Series("", index=ran.index)).fillna("") != ""].itertuples():
        # Keras' cost on its backend: the Keras runner against that framework's own runner.
        out_console.print(
            f"{r.runner} against {r.native_runner} (the framework it runs on, used natively): {r.native_verdict}",
            markup=False,
            highlight=False,
        )
    unproven = rows[rows.get("parity", pd.Series("", index=rows.index)).isin([PARITY_NOT_CHECKED, PARITY_DIFFERENT])]
    if len(unproven):
        model = unproven.iloc[0]["model"]
        out_console.print(
            f"parity: {model} is a plug-in whose runners were not shown to build the same network; "
            f"`fwbench parity --models {model}` (with the same --models-dir) checks it",
            markup=False,
            highlight=False,
        )
    if len(ran) > 1:
        out_console.print(noise_floor_line(ran.iloc[0]), markup=False, highlight=False)
    # Runners on one host mostly share why energy is missing (no RAPL domain readable): said once for all.
    missing = ran[ran["energy_status"].fillna("") != ""].groupby("energy_status", sort=False)["runner"]
    for status, runners in missing:
        out_console.print(f"energy ({', '.join(runners)}): {status}", markup=False, highlight=False)


def noise_floor_line(row: pd.Series) -> str:
    """Which noise floor a configuration's verdicts applied, and which calibration it is (analyse.floors)."""
    source = str(row.get("noise_floor_source") or "none")
    if pd.isna(row["noise_floor"]):
        return "noise floor: not measured here; `fwbench calibrate` with the same options measures it"
    busy = (
        " [FLAGGED: calibrate again on a quiet host, e.g. with --wait-for-quiet]"
        if row.get("noise_floor_flagged")
        else ""
    )
    return f"noise floor: {row['noise_floor']:.1%} (from fwbench calibrate), {source}{busy}"


def series_table(rows: pd.DataFrame) -> tuple[list[Column], list[tuple], list]:
    """One series (a configuration less its batch size): a row per batch, a column per runner (median ms of its
    runs, or why it has none), the runs (or blocks, where every row was made in blocks), and the verdict."""
    runners = list(dict.fromkeys(rows["runner"]))
    unit = "blocks" if _in_blocks(rows[rows["status"] == "ok"]) else "runs"
    columns = [
        Column("batch", numeric=True, key=True),
        *(Column(f"{runner}\nms", numeric=True) for runner in runners),
        Column(unit, numeric=True),
        Column("verdict", wrap_at=VERDICT_WIDTH),
    ]
    table, styles = [], []
    for batch, own in rows.groupby("batch_size", sort=True):
        by_runner = {r.runner: r for r in own.itertuples()}
        figures = []
        for runner in runners:
            r = by_runner.get(runner)
            if r is None:
                figures.append("–")
            elif r.status != "ok":
                figures.append("OOM" if is_out_of_memory(r.error) else "failed")
            else:
                figures.append(_ms(r.median_step_ms))
        # One count where every runner ran as many runs, else each runner's in the columns' order.
        counts = [
            int(getattr(by_runner[runner], unit))
            for runner in runners
            if runner in by_runner and by_runner[runner].status == "ok"
        ]
        counts = counts[:1] if len(set(counts)) == 1 else counts
        judged = [r for r in own.itertuples() if r.verdict not in ("fastest", "only runner")]
        verdicts = [
            flagged_verdict(r.verdict, r.flagged, getattr(r, "parity", ""))
            if len(runners) == 2
            else f"{r.runner}: {flagged_verdict(r.verdict, r.flagged, getattr(r, 'parity', ''))}"
            for r in judged
        ]
        table.append((str(batch), *figures, "/".join(map(str, counts)) or "0", "; ".join(verdicts) or "–"))
        styles.append("red" if (own["status"] != "ok").any() else None)
    return columns, table, styles


def print_series(rows: pd.DataFrame, console=None) -> None:
    """Every configuration of a study, one table per series (its constant columns in the title)."""
    console = console or out_console
    if rows.empty:
        console.print("no runs")
        return
    for _, series in rows.groupby(list(SERIES_COLUMNS), sort=False):
        columns, table, styles = series_table(series)
        title = configuration_title(series.iloc[0], with_batch=False)
        settings = settings_title(series)
        print_table(columns, table, title + (f"\n{settings}" if settings else ""), console, styles=styles)


def print_scaling(scaling: pd.DataFrame, console=None) -> None:
    """Throughput against devices and the scaling efficiency; the configuration columns that vary only."""
    scaling = scaling.sort_values(
        [*SCALING_KEY_COLUMNS, "runner_name", "world_size", "nodes", "strategy"], kind="stable"
    )
    same = [c for c in SCALING_KEY_COLUMNS if scaling[c].nunique() <= 1]
    title = "scaling: throughput against devices"
    if same and len(scaling):
        first = scaling.iloc[0]
        title += " (" + ", ".join(title_part(c, first[c]) for c in same if first[c] != "") + ")"
    shown = scaling_display(scaling).drop(columns=[SCALING_DISPLAY[c] for c in same])
    if not (scaling["efficiency_note"] != "").any():
        shown = shown.drop(columns="note")
    columns = [
        Column(c, numeric=c in NUMERIC_HEADERS, key=c in KEY_HEADERS, wrap_at=VERDICT_WIDTH if c == "note" else None)
        for c in shown.columns
    ]
    groups = [tuple(r) for r in scaling[list(SCALING_KEY_COLUMNS)].itertuples(index=False)]
    print_table(columns, list(shown.itertuples(index=False)), title, console, groups=groups)


def print_findings(findings: Sequence[Finding], console=None) -> None:
    """The findings as the terminal shows them after the comparison tables: those these runs answer, then one line of
    the questions they do not and what would measure each."""
    console = console or out_console
    console.print("[bold]findings[/]")
    for finding in (f for f in findings if not f.measured_by):
        flag = f" [bold yellow]FLAGGED: {escape(finding.flagged)}[/]" if finding.flagged else ""
        console.print(f"- [bold]{escape(finding.question)}[/]: {escape(finding.sentence)}{flag}", highlight=False)
    uncovered = not_covered(findings)
    if uncovered:
        console.print(f"not covered by these runs: {uncovered}", markup=False, highlight=False)


def print_out_of_memory(failures: Sequence[RunnerFailure]) -> None:
    if failures:
        runners = ", ".join(dict.fromkeys(f.runner for f in failures))
        err_console.print(
            f"[yellow]{len(failures)} run(s) of {escape(runners)} ran out of memory: stored, and marked in "
            "the report as missing points[/]",
            highlight=False,
        )


def print_interrupted(stored: int, stored_now: int, store_runs: int, store: Path) -> None:
    """A study's own runs kept (`stored`, `stored_now` of them by this sitting), apart from the whole store's."""
    err_console.print(
        f"[bold yellow]interrupted[/]: the run in flight was cancelled; {stored} runs of this study are "
        f"kept in {escape(str(store))} ({stored_now} stored now; the store holds {store_runs} runs in all)"
    )


def print_calibrations(calibrations: Sequence, title: str, store: Path) -> None:
    """Each runner's A/A comparison: `calibrations` hold runner, row (the stored calibration), comparison and
    run_spread."""
    columns = [
        Column("runner", key=True),
        *(
            Column(h, numeric=True)
            for h in ("runs", "A/A ratio", "99% interval", "run spread", "noise floor", "floor\nknown to")
        ),
    ]
    table = []
    for c in calibrations:
        enough = c.comparison.enough_runs
        table.append(
            (
                c.runner,
                str(c.row["runs"]),
                f"{c.comparison.ratio:.3f}",
                f"[{c.comparison.ci_low:.3f}, {c.comparison.ci_high:.3f}]" if enough else "–",
                f"{c.run_spread:.1%}",
                f"{c.row['noise_floor']:.1%}" if enough else "too few runs",
                f"±{c.precision.relative:.0%}" if c.precision is not None else "–",
            )
        )
    print_table(columns, table, f"noise floor: {title}")
    for c in calibrations:
        if c.target is not None and not c.target.reached(c.precision):
            out_console.print(
                f"{escape(c.runner)}: [yellow]the floor is known to ±{c.precision.relative:.0%} of itself "
                f"after the most runs, {c.row['runs']} per instance, not the ±{c.target.precision:.0%} "
                "asked[/]: raise --max-repetitions, or calibrate on a quieter host",
                highlight=False,
            )
        elif c.target is not None:
            out_console.print(
                f"{escape(c.runner)}: the floor is known to ±{c.precision.relative:.0%} of itself after "
                f"{c.row['runs']} runs per instance (asked: ±{c.target.precision:.0%})",
                highlight=False,
            )
        if c.row.get("flagged"):
            out_console.print(
                f"{escape(c.runner)}: [yellow]FLAGGED: its runs were not on a quiet device "
                f"({escape(c.row['flagged'])})[/]: compare applies this floor only where no quiet "
                "calibration exists, and says so; calibrate again on a quiet host (--wait-for-quiet)",
                highlight=False,
            )
    out_console.print(
        "A difference below a runner's noise floor is what two instances of that runner already show on this host: "
        f"`fwbench compare` and `fwbench report` with the store {escape(str(store))} call it no significant difference.",
        highlight=False,
    )


def print_rounds(rows: pd.DataFrame, stopped: str) -> None:
    """Under --repetitions auto, how many runs the verdict took and why the rounds ended; where they ended unresolved,
    what the runs tell and what would tell more (present.next_step)."""
    if not stopped or rows.empty:
        return
    ran = rows[rows["status"] == "ok"]
    if ran.empty:
        return
    unit = "blocks" if _in_blocks(ran) else "runs"
    why = {
        "settled": "the verdict was settled",
        "run budget": f"the {unit[:-1]} budget (--max-repetitions) was spent",
        "futile": f"at these {unit}' spread the whole budget would most likely leave the verdict unresolved",
        "time budget": "the time budget (--time-budget-s) was spent",
        "one runner left": "only one runner was left",
    }.get(stopped, stopped)
    if unit == "blocks":
        counts = f"{ran['blocks'].max()} blocks, {'/'.join(str(n) for n in ran['runs'])} windows per runner"
    else:
        counts = f"{'/'.join(str(n) for n in ran['runs'])} per runner"
    out_console.print(f"{unit}: {counts} (auto: stopped because {why}; {ran['wall_s'].max():.0f} s)", highlight=False)
    if stopped != "settled" and next_step(rows):
        out_console.print(next_step(rows), markup=False, highlight=False)


def print_unresolved(lines: Sequence[str], store: Path) -> None:
    """Under repetitions auto, the points a sweep left unsettled, each with why (app.sweep_rounds)."""
    if not lines:
        return
    out_console.print(
        f"[bold]left unresolved[/] ({len(lines)} point(s); their runs are kept in {escape(str(store))}: "
        "`fwbench sweep --resume` with a larger time_budget_s or max_repetitions continues them):",
        highlight=False,
    )
    for line in lines:
        out_console.print(f"- {escape(line)}", highlight=False)


def print_best_search(choices: dict) -> None:
    """Under the best profile, the settings each runner's search chose (app.best.BestChoice), what it tried and what
    it could not run, before the comparison at those settings."""
    for choice in choices.values():
        out_console.print(f"best settings for {choice.runner}: {choice.summary}", markup=False, highlight=False)
        for candidate in choice.candidates:
            chosen = " ← chosen" if candidate.settings == choice.settings else ""
            values = ", ".join(value for _, value in candidate.settings)
            out_console.print(
                f"  {values}: {candidate.step_time_s * 1e3:.2f} ms{chosen}", markup=False, highlight=False
            )
        if choice.refused:
            out_console.print(f"  not supported here: {choice.not_supported}", markup=False, highlight=False)
        for failure in choice.failed:
            out_console.print(f"  failed: {failure}", markup=False, highlight=False)
        if choice.fixed:
            out_console.print(
                f"  not searched (set on the command line): {', '.join(choice.fixed)}", markup=False, highlight=False
            )


def print_factors(effects: Sequence, title: str, run_dir: Path | None) -> None:
    """Each factor's effect on each runner, one setting changed from the baseline (app.factors.FactorEffect): a table
    of what ran, then what each runner refused, with its reason."""
    columns = [Column("factor", key=True), Column("runner"), Column("change", wrap_at=16), Column("effect", wrap_at=28)]
    measured = [e for e in effects if not e.not_supported]
    table = [(e.factor, e.runner, f"{e.baseline} → {e.value}", e.effect) for e in measured]
    print_table(columns, table, f"factors: {title}, one setting changed at a time")
    for e in effects:
        if e.not_supported:
            out_console.print(
                f"{e.runner} {e.factor} {e.value}: not supported: {e.not_supported}", markup=False, highlight=False
            )
    if run_dir is not None:
        err_console.print(f"results: {run_dir}", markup=False, highlight=False)
