"""The best profile's search: each runner tries its own settings (layout, compilation, cuDNN autotuning) and keeps the
fastest, so that a comparison under `best` sets each framework at its fastest on this machine.

The search goes one setting at a time from the runner's native settings (coordinate descent): every value of the
setting that the runner accepts (CheckRun) runs with the others at their best so far, and the fastest is kept. Every
candidate of every runner gets the same number of runs, and the same statistic picks the fastest (the geometric mean
of its per-run median step times, as a comparison's). Precision is not searched: it changes the math, so it stays the
user's (a sweep over precisions under `best` searches each). A setting the user fixed (--layout, --compilation) is
not searched either.

The comparison then measures each runner at its choice on fresh runs: the fastest of several noisy candidates looks
faster than it is, and reusing its search runs would favour the runner that had more candidates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from ..analyse import stats
from ..analyse.searches import candidate_entry
from ..base.progress import Progress
from ..base.vocabulary import Compilation, Layout, Switch, numbers, to_text
from ..run import jobs, replies, wire
from ..run.client import RunnerClient, RunnerFailure, RunResult
from ..run.connection import Transport
from ..run.execute import run_all
from ..run.gate import Gate
from .medians import medians_by_runner
from .preflight import resolved_or_refusal

# The settings searched, in order, each with the contract's enum of its values.
SEARCHED = {"layout": Layout, "compilation": Compilation, "cudnn_autotune": Switch}
DEFAULT_SEARCH_REPETITIONS = 2


@dataclass(frozen=True)
class Candidate:
    """One setting of one runner as the search measured it."""

    runner: str
    settings: tuple[tuple[str, str], ...]  # every searched setting as the runner resolved it
    run_medians_s: tuple[float, ...]

    @property
    def step_time_s(self) -> float:
        return stats.geometric_mean(self.run_medians_s)


@dataclass
class BestChoice:
    """A runner's fastest settings found, what else it tried, and what it refused."""

    runner: str
    request: wire.Request
    settings: tuple[tuple[str, str], ...]
    candidates: list[Candidate] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # (setting, value, the runner's reason)
    failed: list[str] = field(default_factory=list)  # candidates that failed when they ran, with their error
    fixed: list[str] = field(default_factory=list)  # settings the user fixed, not searched

    @property
    def not_supported(self) -> str:
        """'compilation graph/xla; cudnn_autotune on': the values the runner refused, by setting."""
        by_setting: dict[str, list[str]] = {}
        for setting, value, _ in self.refused:
            by_setting.setdefault(setting, []).append(value)
        return "; ".join(f"{setting} {'/'.join(values)}" for setting, values in by_setting.items())

    @property
    def summary(self) -> str:
        """'channels_first, eager, off (fastest of 3 candidates, 2 runs each)'."""
        runs = {len(c.run_medians_s) for c in self.candidates}
        count = runs.pop() if len(runs) == 1 else 0
        tried = (
            f"fastest of {len(self.candidates)} candidates, {count} run{'s' if count != 1 else ''} each"
            if count
            else f"fastest of {len(self.candidates)} candidates"
            if self.candidates
            else "the only settings it accepts, not measured"
        )
        return f"{', '.join(f'{name} {value}' for name, value in self.settings)} ({tried})"


@dataclass
class SearchResult:
    choices: dict[str, BestChoice] = field(default_factory=dict)
    results: list[RunResult] = field(default_factory=list)
    failures: list[RunnerFailure] = field(default_factory=list)


def _settings(resolved: replies.Resolved) -> tuple[tuple[str, str], ...]:
    return tuple((name, getattr(resolved, name)) for name in SEARCHED if getattr(resolved, name))


def _values(
    client, request: wire.Request, setting: str, choice: BestChoice, searched_before: tuple[str, ...] = ()
) -> dict[tuple[tuple[str, str], ...], wire.Request]:
    """Each value of `setting` the runner accepts with the other settings as `request` has them, keyed by the
    settings it resolves to; the refusals go to `choice`. A value refused with the settings chosen so far is tried
    with the other values of the settings searched before it: one setting at a time would miss a value that needs
    another (PyTorch's onnxruntime takes channels_first images only)."""
    accepted = {}
    for number in numbers(SEARCHED[setting]):
        variant = wire.with_setting(request, setting, number)
        resolved, reason = resolved_or_refusal(client, variant)
        alternatives = ((other, value) for other in searched_before for value in numbers(SEARCHED[other]))
        for other, value in alternatives if resolved is None else ():
            resolved, _ = resolved_or_refusal(client, wire.with_setting(variant, other, value))
            if resolved is not None:
                variant = wire.with_setting(variant, other, value)
                break
        if resolved is None:
            choice.refused.append((setting, to_text(SEARCHED[setting], number), reason))
            continue
        accepted.setdefault(_settings(resolved), variant)
    return accepted


def search(
    endpoints: dict[str, str],
    transport: Transport,
    baselines: dict[str, wire.Request],
    repetitions: int = DEFAULT_SEARCH_REPETITIONS,
    on_result: Callable[[RunResult, wire.Request], None] = lambda run, sent: None,
    progress: Progress = Progress(),
    gate: Gate | None = None,
) -> SearchResult:
    """Each runner's fastest settings, from its baseline (a best-profile request, which the runner accepts) one
    searched setting at a time; each candidate runs `repetitions` times, every runner's candidates interleaved
    (counterbalanced) at each step."""
    result = SearchResult()
    current = dict(baselines)
    measured: dict[str, dict[tuple, Candidate]] = {name: {} for name in baselines}
    for name, baseline in baselines.items():
        with RunnerClient(name, jobs.addresses_of(endpoints[name])[0], transport) as client:
            result.choices[name] = BestChoice(
                name,
                baseline,
                _settings(client.check_run(baseline)),
                fixed=[setting for setting in SEARCHED if getattr(baseline, setting)],
            )
    for setting in SEARCHED:
        entries, requests, owners, options = {}, {}, {}, {}
        for name, choice in result.choices.items():
            if setting in choice.fixed or name in {f.runner for f in result.failures}:
                continue
            try:
                before = tuple(s for s in list(SEARCHED)[: list(SEARCHED).index(setting)] if s not in choice.fixed)
                with RunnerClient(name, jobs.addresses_of(endpoints[name])[0], transport) as client:
                    options[name] = _values(client, current[name], setting, choice, before)
            except RunnerFailure as failure:  # unreachable: the comparison names it, the others search on
                result.failures.append(failure)
                continue
            if len(options[name]) == 1:
                ((choice.settings, current[name]),) = options[name].items()
                continue
            for key, request in options[name].items():
                if key not in measured[name]:
                    entry = candidate_entry(name, tuple(value for _, value in key))
                    entries[entry], requests[entry], owners[entry] = endpoints[name], request, (name, key)
        if entries:
            runs, failures = run_all(
                entries,
                requests,
                transport,
                repetitions,
                progress=progress,
                on_result=lambda run, requests=requests: on_result(run, requests[run.runner]),
                gate=gate,
            )
            result.results += runs
            for failure in failures:  # a candidate that fails is no candidate; the runner searches on
                name, key = owners[failure.runner]
                result.choices[name].failed.append(f"{', '.join(v for _, v in key)}: {failure.message}")
            for entry, medians in medians_by_runner(runs).items():
                name, key = owners[entry]
                measured[name][key] = Candidate(name, key, tuple(medians))
        for name, values in options.items():
            tried = [measured[name][key] for key in values if key in measured[name]]
            if len(values) > 1 and tried:
                fastest = min(tried, key=lambda candidate: candidate.step_time_s)
                result.choices[name].settings, current[name] = fastest.settings, values[fastest.settings]
    for name, choice in result.choices.items():
        choice.candidates = sorted(measured[name].values(), key=lambda candidate: candidate.step_time_s)
        choice.request = current[name]
    return result


def search_frame(choices: dict[str, BestChoice]) -> pd.DataFrame:
    """One row per candidate each runner measured: its settings, runs and step time, and whether it was chosen."""
    return pd.DataFrame(
        [
            {
                "runner": c.runner,
                **dict(c.settings),
                "runs": len(c.run_medians_s),
                "median_step_ms": c.step_time_s * 1e3,
                "chosen": c.settings == choice.settings,
            }
            for choice in choices.values()
            for c in choice.candidates
        ]
    )
