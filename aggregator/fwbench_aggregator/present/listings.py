"""What the runners are and build, as the terminal shows it: models (a row per model), describe, parity,
max-batch, and a Slurm submission."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from rich.markup import escape

from ..run import replies
from ..run.client import RunnerFailure
from ..run.listing import ListedModel, PluginProblem
from .console import Column, err_console, out_console, print_table

# Wider than this, the models table shows each model's shape range too.
WIDE = 120
# The list of batches a search tried wraps at this width rather than widening the table.
BATCHES_TRIED_WIDTH = 40


def print_models(
    models: Sequence[ListedModel],
    runners: Sequence[str],
    parameters: bool,
    plugin_problems: Sequence[PluginProblem] = (),
) -> None:
    """One row per model: its task, default input, options, and the runners that build it ("all" where every runner
    does); with --parameters, its trainable parameters (each runner's where they differ), in place of the task and
    options on a narrow terminal. A wide one adds the input's convention and range. A plug-in's name is marked *,
    its folder said below the table, and so is every plug-in a runner did not load, with why."""
    wide = out_console.width >= WIDE
    described = wide or not parameters
    columns = [
        Column("model", key=True),
        *([Column("task")] if described else []),
        Column("input"),
        *([Column("as"), Column("min"), Column("max")] if wide else []),
        *([Column("options", wrap_at=20)] if described else []),
        Column("runners", wrap_at=12),
        *([Column("parameters", numeric=True)] if parameters else []),
    ]
    table = []
    for m in models:
        counts = sorted(set(m.parameters.values()))
        table.append(
            (
                m.name + (" *" if m.source else ""),
                *((m.task,) if described else ()),
                m.default_shape,
                *((m.input_convention, m.min_shape, m.max_shape) if wide else ()),
                *((m.options.replace("|", ", ") or "–",) if described else ()),
                "all" if set(m.runners) >= set(runners) and len(runners) > 1 else ", ".join(m.runners),
                *((" / ".join(f"{c:,}" for c in counts) or "–",) if parameters else ()),
            )
        )
    print_table(columns, table, f"models of {', '.join(runners)}" if runners else "models")
    for m in models:
        if m.source:
            out_console.print(
                f"* {m.name}: plug-in {m.source} ({m.origin}, {m.content_hash[:19]})",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    for problem in plugin_problems:
        err_console.print(
            f"[yellow]{escape(problem.runner)}: plug-in {escape(problem.folder)} not loaded: "
            f"{escape(problem.error)}[/]",
            highlight=False,
        )


def print_descriptions(described: Sequence) -> None:
    """Each runner as it describes itself; `described` hold name, address and info (a replies.RunnerDescription)."""
    for d in described:
        info: replies.RunnerDescription = d.info
        devices = [
            f"{x.text} {x.name}"
            + (f", {x.memory_bytes / 2**30:.1f} GiB" if x.memory_bytes else "")
            + (f", driver {x.driver_version}" if x.driver_version else "")
            for x in info.devices
        ]
        fields = [
            ("address", d.address),
            ("framework", f"{info.framework} {info.framework_version}"),
            ("python", info.python_version),
            ("CUDA", info.cuda_version or "–"),
            ("cuDNN", info.cudnn_version or "–"),
            ("runner", f"{info.runner_version} ({info.protocol})"),
            ("devices", "\n".join(devices)),
            ("precisions", ", ".join(info.precisions)),
            ("options", "\n".join(f"{key}={value}" for key, value in sorted(info.options.items()))),
            *(
                (
                    (
                        "plug-ins",
                        "\n".join(
                            f"{p.folder} ({p.origin}): "
                            + (f"NOT LOADED: {p.error}" if p.error else f"{', '.join(p.models)}, {p.content_hash[:19]}")
                            for p in info.plugins
                        ),
                    ),
                )
                if info.plugins
                else ()
            ),
        ]
        print_table([Column("field", key=True), Column("value", wrap_at=60)], fields, f"runner {d.name}")


def print_parity(tables: Sequence, path: Path | None) -> None:
    """Each parity table (reference, other, table, only_reference), and the models it could not check."""
    for t in tables:
        reference, other = t.reference, t.other
        has_tokens = t.table.get("tokens", pd.Series(dtype=object)).fillna("").ne("").any()
        columns = [
            Column("model", key=True),
            Column("input"),
            Column("params", numeric=True),
            Column("GFLOPs", numeric=True),
            Column("output"),
            Column("outputs"),
            *(
                [Column("greedy tokens")]
                if t.table.get("tokens", pd.Series(dtype=object)).fillna("").ne("").any()
                else []
            ),
            Column("verdict"),
        ]
        rows = []
        for row in t.table.to_dict("records"):
            numeric = (
                row["numeric"] if pd.isna(row["max_rel_diff"]) else f"{row['max_rel_diff']:.1e} ({row['numeric']})"
            )
            params = {row[f"params_{reference}"], row[f"params_{other}"]}
            flops = {round(row[f"flops_{reference}"] / 1e9, 3), round(row[f"flops_{other}"] / 1e9, 3)}
            outputs = {row[f"output_{reference}"], row[f"output_{other}"]}
            rows.append(
                (
                    row["model"],
                    row["input_shape"],
                    " / ".join(f"{p:,}" for p in sorted(params)),
                    " / ".join(f"{f:.3f}" for f in sorted(flops)),
                    " / ".join(sorted(outputs)),
                    numeric,
                    *([row.get("tokens") or "–"] if has_tokens else []),
                    row["verdict"],
                )
            )
        print_table(columns, rows, f"parity: {other} against {reference} (a / b where they differ)")
        for row in t.table.to_dict("records"):
            if row.get("numeric_note"):
                err_console.print(
                    f"{row['model']}: outputs not compared: {row['numeric_note']}", markup=False, highlight=False
                )
        if t.only_reference:
            err_console.print(
                f"{other} builds no {', '.join(t.only_reference)}: not checked", markup=False, highlight=False
            )
    if path is not None:
        err_console.print(f"results: {path}", markup=False, highlight=False)
    if any((t.table["verdict"] != "same").any() for t in tables if len(t.table)):
        err_console.print("[bold red]some models differ between the runners[/]")


def print_max_batch(searches: Sequence, title: str, store: Path) -> None:
    """Each runner's search (runner, largest, tried)."""
    columns = [
        Column("runner", key=True),
        Column("largest batch", numeric=True),
        Column("batches tried", wrap_at=BATCHES_TRIED_WIDTH),
    ]
    rows = [
        (
            s.runner,
            "none fits" if s.largest is None else str(s.largest),
            ", ".join(f"{b}{'' if ok else ' (OOM)'}" for b, ok in s.tried.items()),
        )
        for s in searches
    ]
    print_table(columns, rows, f"largest batch: {title}")
    if rows:
        err_console.print(f"stored in {store}", markup=False, highlight=False)


def print_failure(failure: RunnerFailure) -> None:
    err_console.print(f"[red]{escape(failure.runner)}: {failure.code}: {escape(failure.message)}[/]", highlight=False)


def print_submitted(submitted, dry_run: bool) -> None:
    """A Slurm submission (folder, to_do, done_before, job_id)."""
    if not submitted.to_do:
        err_console.print(
            f"nothing to do: {submitted.folder} holds all {submitted.done_before} runs of the study", markup=False
        )
        return
    script = submitted.folder / "job.sh"
    err_console.print(
        f"{submitted.to_do} runs to do, {submitted.done_before} already in the store; batch script: {script}",
        markup=False,
        highlight=False,
    )
    if dry_run:
        out_console.print(script.read_text(), markup=False, highlight=False)
    elif submitted.job_id:
        err_console.print(
            f"submitted Slurm job {submitted.job_id}; follow it with: squeue -j {submitted.job_id}; its "
            f"output: {submitted.folder / f'slurm-{submitted.job_id}.out'}",
            markup=False,
            highlight=False,
        )


def print_job_record(record: dict | None, ended: str) -> None:
    """The job's account, as `fwbench slurm --wait` shows it once the job has ended."""
    if ended:
        err_console.print(f"[bold red]{escape(ended)}[/]")
    if record is None:
        return
    err_console.print(f"Slurm job {record['job_id']} on {', '.join(record['nodes'])}", markup=False)
    for node, why in record["lost"].items():
        err_console.print(f"[bold red]node {escape(node)} lost[/]: {escape(why)}")
    for failure in record["failures"]:
        err_console.print(f"[red]{escape(failure['runner'])}: {failure['code']}: {escape(failure['message'])}[/]")
    if record["left"]:
        err_console.print(f"[bold yellow]{len(record['left'])} runs left[/] for a resume (--resume)")
