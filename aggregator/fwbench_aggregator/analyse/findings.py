"""One finding per question of the published studies, generated from the data: training time, GPU and CPU
inference, the batch trend, power and energy, scaling. Each sentence says only what the runs resolve."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..store.run_columns import CONFIG_COLUMNS
from . import stats
from .scaling import has_scaling
from .trends import FLATTEN_GAIN


@dataclass(frozen=True)
class VerdictCount:
    """How one question's configurations came out: per runner, those it won with confidence, and the rest."""

    configurations: int
    wins: dict[str, list[float]]  # runner -> the margins (ratio - 1) of the configurations it won
    unresolved: int  # enough runs, but the difference was not called
    too_few_runs: int
    flagged: int  # configurations with a run on a device that was not quiet

    def headline(self) -> str:
        """'torch faster in 5, tensorflow in 2, 1 not resolved': what a plot's title says."""
        parts = [f"{runner} faster in {len(margins)}" for runner, margins in self._ranked()]
        if self.unresolved:
            parts.append(f"{self.unresolved} not resolved")
        if self.too_few_runs:
            parts.append(f"{self.too_few_runs} with too few runs")
        return ", ".join(parts) or "no verdict"

    def _ranked(self) -> list[tuple[str, list[float]]]:
        return sorted(self.wins.items(), key=lambda item: (-len(item[1]), item[0]))


def verdict_counts(rows: pd.DataFrame) -> VerdictCount:
    """Per configuration (and block of alike runs, where a store holds several) with two or more runners that ran:
    the fastest runner wins it where every other runner's verdict called it significantly slower."""
    wins: dict[str, list[float]] = {}
    configurations = unresolved = too_few = flagged = 0
    if rows.empty:
        return VerdictCount(0, wins, 0, 0, 0)
    for _, frame in rows.groupby([*CONFIG_COLUMNS, "group"], sort=False):  # a block's runners, judged together
        ran = frame[(frame["status"] == "ok") & frame["median_step_ms"].notna()]
        if len(ran) < 2:
            continue
        configurations += 1
        flagged += bool((ran["flagged"].astype(str) != "").any())
        others = ran[ran["verdict"] != "fastest"]
        if (others["runs"] < stats.MIN_REPETITIONS).any() or int(ran["runs"].min()) < stats.MIN_REPETITIONS:
            too_few += 1
        elif others["significant"].astype(bool).all():
            winner = ran.loc[ran["verdict"] == "fastest", "runner"].iloc[0]
            wins.setdefault(winner, []).append(float(others["ratio_to_fastest"].min()) - 1.0)
        else:
            unresolved += 1
    return VerdictCount(configurations, wins, unresolved, too_few, flagged)


SCALING_COMMAND = "`fwbench compare --devices gpu:0,gpu:1` beside the same configuration on one device"


@dataclass(frozen=True)
class Finding:
    question: str
    sentence: str
    flagged: str = ""  # why a verdict behind it is not trustworthy; "" where none
    # Where these runs do not answer the question: what would measure it (a command, or a machine); "" where they do.
    measured_by: str = ""


OVER_RUNS = f" ({stats.CONFIDENCE:.0%} confidence, over runs)."


def _range(margins: list[float]) -> str:
    """'by 12% to 30%'; beyond twice as fast as stats.faster_text says it: '7.1x faster' reads, '608%' does not."""
    low, high = min(margins), max(margins)
    if low > 1.0:
        return f"{1 + low:.1f}x" if round(low, 1) == round(high, 1) else f"{1 + low:.1f}x to {1 + high:.1f}x"
    return f"by {low:.0%}" if round(low, 2) == round(high, 2) else f"by {low:.0%} to {high:.0%}"


def not_covered(findings: Sequence[Finding]) -> str:
    """The questions these runs do not answer, each with what would measure it, in one line."""
    return "; ".join(f"{f.question} ({f.measured_by})" for f in findings if f.measured_by)


def _time_finding(question: str, rows: pd.DataFrame, what: str, measured_by: str) -> Finding:
    counts = verdict_counts(rows)
    if not counts.configurations:
        return Finding(question, f"Not measured: no {what} configuration ran on two or more runners.", "", measured_by)
    wins = [
        f"{runner} was faster in {len(m)} of {counts.configurations} configurations ({_range(m)})"
        for runner, m in counts._ranked()
    ]
    rest = []
    if counts.unresolved:
        rest.append(f"{counts.unresolved} could not be told apart")
    if counts.too_few_runs:
        rest.append(f"{counts.too_few_runs} had too few runs for a verdict (need {stats.MIN_REPETITIONS} per runner)")
    if counts.too_few_runs == counts.configurations:
        return Finding(
            question,
            f"Not resolved: each of the {counts.configurations} configurations has fewer than "
            f"{stats.MIN_REPETITIONS} runs per runner, and a verdict needs {stats.MIN_REPETITIONS} "
            "(run more repetitions).",
        )
    if not wins:
        wins = [f"no runner was faster with confidence in any of {counts.configurations} configurations"]
    sentence = "; ".join(wins) + (f"; {', '.join(rest)}" if rest else "") + OVER_RUNS
    flagged = f"{counts.flagged} configuration(s) had a run on a device that was not quiet" if counts.flagged else ""
    return Finding(question, sentence, flagged)


def _trend_finding(trends: pd.DataFrame) -> Finding:
    question = "Batch size and inference time per sample"
    tested = trends[(trends["mode"] == "infer") & trends["spearman_p"].notna()] if not trends.empty else trends
    if tested.empty:
        return Finding(
            question,
            f"Not tested: no inference series ran at three or more batch sizes with at least "
            f"{stats.MIN_REPETITIONS} runs each.",
            measured_by="`fwbench sweep` with three or more batch_sizes and modes: [infer]",
        )
    falls = tested[tested["trend"] == "falls"]
    rises = tested[tested["trend"] == "rises"]
    sentence = (
        f"Time per sample fell as the batch grew in {len(falls)} of {len(tested)} series"
        + (f", rose in {len(rises)}" if len(rises) else "")
        + f" (Spearman's rank correlation over runs, p < {stats.ALPHA:g})"
    )
    flat = tested.dropna(subset=["flattens_at_batch"])
    if len(flat):
        points = [
            f"{r.model} {r.runner} {r.device} past {int(r.flattens_at_batch)}"
            for r in flat.head(4).itertuples(index=False)
        ]
        sentence += (
            f"; doubling it gained less than {FLATTEN_GAIN:.0%} " + ", ".join(points) + (", …" if len(flat) > 4 else "")
        )
    return Finding(question, sentence + ".")


def _energy_finding(runs: pd.DataFrame) -> Finding:
    question = "Power and energy"
    runs = runs.dropna(subset=["energy_per_sample_j"])
    if runs.empty:
        return Finding(
            question,
            "Not measured: no run has a power reading (CPUs have none here; on a GPU, telemetry "
            "was off or unreadable).",
            measured_by="runs on a GPU with power telemetry on (`--power-rate-hz`, on by default)",
        )
    wins: dict[str, int] = {}
    configurations = unresolved = 0
    for _, frame in runs.groupby([*CONFIG_COLUMNS, "group"], sort=False):  # runners within a block of alike runs
        per_runner = {r: g["energy_per_sample_j"].to_numpy() for r, g in frame.groupby("runner")}
        if len(per_runner) < 2:
            continue
        configurations += 1
        ranked = sorted(per_runner, key=lambda r: stats.geometric_mean(per_runner[r]))
        best = ranked[0]
        if all(stats.compare(best, per_runner[best], r, per_runner[r]).significant for r in ranked[1:]):
            wins[best] = wins.get(best, 0) + 1
        else:
            unresolved += 1
    if not configurations:
        return Finding(
            question,
            "Energy per sample was measured for one runner only: nothing to compare.",
            measured_by="runs of two or more runners on a device with power readings",
        )
    parts = [
        f"{runner} used less energy per sample in {n} of {configurations} configurations"
        for runner, n in sorted(wins.items(), key=lambda i: -i[1])
    ]
    if not wins:
        parts = [f"no runner used less energy per sample with confidence in any of {configurations} configurations"]
    elif unresolved:
        parts.append(f"{unresolved} could not be told apart")
    return Finding(question, "; ".join(parts) + OVER_RUNS)


def _scaling_finding(scaling: pd.DataFrame) -> Finding:
    question = "Scaling over devices"
    if not has_scaling(scaling):
        return Finding(
            question,
            "Not measured: no configuration ran at more than one number of devices.",
            measured_by=SCALING_COMMAND,
        )
    spread = scaling[(scaling["world_size"] > 1) & scaling["scaling_efficiency"].notna()]
    if spread.empty:
        return Finding(
            question,
            "Not measured: no one-device baseline at the same per-device batch.",
            measured_by="`fwbench compare` of the same configuration on one device",
        )
    resolved = spread[spread["runs"] >= stats.MIN_REPETITIONS]
    shown = resolved if len(resolved) else spread
    best = shown.loc[shown["scaling_efficiency"].idxmax()]
    worst = shown.loc[shown["scaling_efficiency"].idxmin()]
    sentence = (
        f"Scaling efficiency ranged from {worst.scaling_efficiency:.0%} ({worst.runner}, {worst.world_size} devices) "
        f"to {best.scaling_efficiency:.0%} ({best.runner}, {best.world_size} devices) over {len(shown)} configuration(s)"
    )
    if resolved.empty:
        sentence += f"; from fewer than {stats.MIN_REPETITIONS} runs each, so not resolved"
    return Finding(question, sentence + ".")


def _winner(frame: pd.DataFrame) -> str | None:
    """The runner every other runner of one configuration was called slower than, or None."""
    ran = frame[(frame["status"] == "ok") & frame["median_step_ms"].notna()]
    others = ran[ran["verdict"] != "fastest"]
    if len(ran) < 2 or not others["significant"].astype(bool).all():
        return None
    return str(ran.loc[ran["verdict"] == "fastest", "runner"].iloc[0])


def profile_disagreements(rows: pd.DataFrame) -> list[str]:
    """The configurations whose verdict under one settings profile names another runner faster than under another:
    where "it depends" on the settings, each called with confidence."""
    if rows.empty or rows["profile"].nunique() < 2:
        return []
    found = []
    without_profile = [c for c in CONFIG_COLUMNS if c != "profile"]
    for config, frame in rows.groupby(without_profile, sort=False):
        winners = {profile: _winner(own) for profile, own in frame.groupby("profile", sort=False)}
        called = {profile: winner for profile, winner in winners.items() if winner}
        if len(set(called.values())) > 1:
            values = dict(zip(without_profile, config))
            under = ", ".join(f"{winner} under {profile}" for profile, winner in called.items())
            found.append(
                f"{values['model']} {values['mode']} batch {values['batch_size']} {values['input_shape']}: {under}"
            )
    return found


def _profile_finding(rows: pd.DataFrame) -> Finding:
    question = "Settings profiles"
    if rows.empty or rows["profile"].nunique() < 2:
        return Finding(
            question,
            "Not compared: every configuration ran under one settings profile.",
            measured_by="`fwbench compare --profile native` (or best) beside these runs",
        )
    disagreements = profile_disagreements(rows)
    if not disagreements:
        return Finding(question, "No configuration's verdict names another runner faster under another profile.")
    return Finding(
        question,
        "The faster runner depends on the profile in "
        + f"{len(disagreements)} configuration(s): "
        + "; ".join(disagreements)
        + ".",
    )


def findings(rows: pd.DataFrame, runs: pd.DataFrame, trends: pd.DataFrame, scaling: pd.DataFrame) -> list[Finding]:
    """One finding per question of the studies, generated from the data: training time, GPU inference, CPU
    inference, the batch trend, power and energy, scaling, and whether the settings profile changes a verdict."""
    kinds = rows["device"].astype(str).str.split(":").str[0] if not rows.empty else pd.Series(dtype=str)
    infer = rows["mode"] == "infer" if not rows.empty else pd.Series(dtype=bool)
    return [
        _time_finding(
            "Training time",
            rows[rows["mode"] == "train"] if not rows.empty else rows,
            "training",
            "`fwbench compare --mode train`",
        ),
        _time_finding(
            "GPU inference",
            rows[infer & (kinds == "gpu")] if not rows.empty else rows,
            "GPU inference",
            "`fwbench compare --mode infer --device gpu` on a machine with a GPU",
        ),
        _time_finding(
            "CPU inference",
            rows[infer & (kinds == "cpu")] if not rows.empty else rows,
            "CPU inference",
            "`fwbench compare --mode infer --device cpu`",
        ),
        _trend_finding(trends),
        _energy_finding(runs),
        _scaling_finding(scaling),
        _profile_finding(rows),
    ]
