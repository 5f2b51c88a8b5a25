"""Factors: what each setting does to each runner, one setting changed at a time from the configuration as the
equal profile runs it, so that a verdict's "it depends" becomes a table ("layout: torch 1.28x slower in
channels_last [1.20, 1.37]; tensorflow: channels_first not supported on the CPU").

Each runner is asked first (CheckRun) which other value of each factor it can run; then every runner's baseline and
variants run one after the other, counterbalanced over the repetitions; each variant is compared with its own
runner's baseline over runs, with the same statistics as a comparison between runners. The runs and the table are
written to a results folder of their own, not to the store: a variant is no runner of a comparison."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..analyse import stats
from ..base.progress import Progress
from ..base.vocabulary import Compilation, Layout, Precision, Switch, numbers, to_text
from ..plan.spec import DEFAULT_REPETITIONS, RunSpec
from ..run import jobs, replies, wire
from ..run.client import RunnerClient, RunnerFailure, RunResult
from ..run.execute import run_all
from ..store import records
from .medians import medians_by_runner
from .preflight import checked, resolved_or_refusal
from .runners import RunnerChoice, runners_for

# Each factor: the request field it sets and the contract's enum of its values (threads: a count, the intra-op
# threads of the runner's framework).
FACTORS = {
    "layout": Layout,
    "compilation": Compilation,
    "precision": Precision,
    "cudnn_autotune": Switch,
    "threads": None,
}
DEFAULT_FACTORS = ("layout", "compilation", "precision", "threads")
THREADS_FIELD = "intra_op_threads"
BASELINE = "baseline"


@dataclass(frozen=True)
class FactorEffect:
    """One runner's variant against its own baseline: measured, or why the runner cannot run it."""

    runner: str
    factor: str
    baseline: str  # the factor's value in the baseline run, as the runner resolved it
    value: str
    comparison: stats.Comparison | None = None  # None where not run
    not_supported: str = ""  # the runner's reason, where it refused the variant

    @property
    def effect(self) -> str:
        """'1.28x slower [1.20, 1.37]' (the variant's step time over the baseline's, with its interval), or the same
        marked as not resolved, with what the runs could resolve."""
        if self.not_supported:
            return f"not supported: {self.not_supported}"
        c = self.comparison
        if c is None:
            return "not run"
        if not c.enough_runs:
            return c.verdict
        slower = c.slower == self.value
        ratio, low, high = (c.ratio, c.ci_low, c.ci_high) if slower else (1 / c.ratio, 1 / c.ci_high, 1 / c.ci_low)
        figure = f"{ratio:.2f}x {'slower' if ratio >= 1 else 'faster'} [{low:.2f}, {high:.2f}]"
        return figure if c.significant else f"not resolved: {figure}; these runs resolve {c.resolvable:.1%}"


@dataclass
class FactorsResult:
    effects: list[FactorEffect] = field(default_factory=list)
    results: list[RunResult] = field(default_factory=list)
    failures: list[RunnerFailure] = field(default_factory=list)
    run_dir: Path | None = None  # None where nothing ran


def _entry(runner: str, factor: str = "", value: str = "") -> str:
    """The name a run goes by: the runner's baseline, or one variant of it."""
    return f"{runner}/{BASELINE}" if not factor else f"{runner}/{factor}={value}"


def _values(factor: str, resolved: replies.Resolved) -> tuple[str, list[tuple[str, int]]]:
    """The factor's value in the baseline, as text, and each other value to try, (text, number): every other value
    of an enum; for threads, one thread, half the baseline's and twice it (oversubscribed where the baseline uses
    every core)."""
    if factor == "threads":
        current = resolved.intra_op_threads
        return str(current), [(str(n), n) for n in sorted({1, current // 2, current * 2} - {0, current})]
    enum, current = FACTORS[factor], getattr(resolved, factor)
    return current, [(to_text(enum, n), n) for n in numbers(enum) if to_text(enum, n) != current]


def _candidates(
    client: RunnerClient, baseline: wire.Request, resolved: replies.Resolved, factors: tuple[str, ...]
) -> tuple[dict[tuple[str, str], wire.Request], list[FactorEffect]]:
    """The variants this runner accepts (factor, value) -> request, and those it refuses, with its reason."""
    accepted, refused = {}, []
    for factor in factors:
        current, values = _values(factor, resolved)
        for value, number in values:
            request = wire.with_setting(baseline, THREADS_FIELD if factor == "threads" else factor, number)
            resolved_variant, reason = resolved_or_refusal(client, request)
            if resolved_variant is None:
                refused.append(FactorEffect(client.name, factor, current, value, not_supported=reason))
                continue
            accepted[(factor, value)] = request
    return accepted, refused


def effects_frame(effects: list[FactorEffect]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "factor": e.factor,
                "runner": e.runner,
                "baseline": e.baseline,
                "value": e.value,
                "effect": e.effect,
                "ratio": None if e.comparison is None else e.comparison.ratio,
                "faster": None if e.comparison is None else e.comparison.faster,
                "ci_low": None if e.comparison is None else e.comparison.ci_low,
                "ci_high": None if e.comparison is None else e.comparison.ci_high,
                "significant": bool(e.comparison and e.comparison.significant),
                "not_supported": e.not_supported,
            }
            for e in effects
        ]
    )


def factors(
    spec: RunSpec,
    runners: RunnerChoice,
    chosen: tuple[str, ...] = DEFAULT_FACTORS,
    repetitions: int = DEFAULT_REPETITIONS,
    out: Path = Path("results"),
    progress: Progress = Progress(),
) -> FactorsResult:
    """Each runner's baseline (the spec as the equal profile runs it) and each other value of each chosen factor it
    accepts, run counterbalanced; each variant's effect against its runner's baseline, written under `out`."""
    result = FactorsResult()
    baseline = wire.to_request(spec)
    run_id = (
        time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-factors-{spec.model}-{spec.mode.value}-b{spec.batch_size}"
    )
    with runners_for(runners, progress, spec.startup) as found:
        result.failures += found.failures
        resolved, unreachable = checked(
            found.endpoints, found.transport, {name: baseline for name in found.endpoints}, "the baseline"
        )
        result.failures += unreachable
        endpoints, requests, variants = {}, {}, {}
        for name, config in resolved.items():
            with RunnerClient(name, jobs.addresses_of(found.endpoints[name])[0], found.transport) as client:
                accepted, refused = _candidates(client, baseline, config, chosen)
            result.effects += refused
            endpoints[_entry(name)], requests[_entry(name)] = found.endpoints[name], baseline
            for (factor, value), request in accepted.items():
                entry = _entry(name, factor, value)
                endpoints[entry], requests[entry] = found.endpoints[name], request
                variants[entry] = (name, factor, _values(factor, config)[0], value)
        result.results, failures = run_all(endpoints, requests, found.transport, repetitions, progress=progress)
        result.failures += failures
    medians = medians_by_runner(result.results) if result.results else {}
    for entry, (runner, factor, base_value, value) in variants.items():
        base, own = medians.get(_entry(runner)), medians.get(entry)
        comparison = stats.compare(base_value, base, value, own) if base and own else None
        result.effects.append(FactorEffect(runner, factor, base_value, value, comparison))
    result.effects.sort(key=lambda e: (list(FACTORS).index(e.factor), e.runner, e.not_supported != "", e.value))
    if result.results:
        result.run_dir = out / run_id
        records.write_results(
            result.run_dir,
            {
                "steps": records.steps_frame(run_id, result.results),
                "summary": records.summary_frame(run_id, result.results, result.failures),
                "factors": effects_frame(result.effects),
            },
        )
        records.write_manifest(result.run_dir, records.manifest(run_id, result.results, requests))
    return result
