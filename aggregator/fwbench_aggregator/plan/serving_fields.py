"""The serving load of an inference or generation run (a scenario, runner.proto's Serving) and its rules, the same
for the command line (`compare --scenario`, `serve-capacity`) and sweep files:

    scenarios: [server]            # single_stream, server, offline; default: none (back-to-back batches)
    target_qps: [50, 100, 200]     # server: the offered loads, queries per second
    queries: 600                   # measured queries per run; default: the runner's (at least 300)
    batch_timeout_ms: 5            # server with batch_size > 1: the longest the oldest query waits for a batch

A sweep's grid gains one axis of loads: each scenario, and for server each target_qps (ServingSweep). Within each
runner's turn at a point, every load runs its batch sizes in order (one reuse chain per load)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from ..base.vocabulary import Mode, Scenario
from .field_checks import Checker, checked_list, choice, finite, number
from .keys import config_key
from .spec import MAX_BATCH_TIMEOUT_MS, MAX_QUERIES, MAX_TARGET_QPS, RunSpec, StartupSettings
from .study import Configuration, Sweep

SWEEP_FIELDS = ("scenarios", "target_qps", "queries", "batch_timeout_ms")
# The modes a scenario serves: inference queries, or generation requests (a query a prompt; docs/serving.md).
SERVED_MODES = (Mode.infer, Mode.generate)
TARGET_QPS_RANGE = f"a number above 0 and at most {MAX_TARGET_QPS:g}"
QUERIES_RANGE = f"an integer from 1 to {MAX_QUERIES}"
BATCH_TIMEOUT_RANGE = f"a number from 0 to {MAX_BATCH_TIMEOUT_MS:g}"


@dataclass(frozen=True)
class Load:
    """One point of the load axis: a scenario and, for server, its offered rate."""

    scenario: Scenario
    target_qps: float | None = None
    query_count: int = 0  # 0: the runner's default
    batch_timeout_ms: float | None = None


def target_qps_ok(value: object) -> bool:
    rate = finite(value)
    return rate is not None and 0 < rate <= MAX_TARGET_QPS


def load_problem(mode: Mode, load: Load, names: Mapping[str, str]) -> str | None:
    """Why `load` cannot run in `mode`, naming each setting as `names` calls it (the command line's options or a
    sweep file's fields: keys scenario, target_qps, queries, batch_timeout_ms); None where it can."""
    scenario, qps, timeout = names["scenario"], names["target_qps"], names["batch_timeout_ms"]
    if mode not in SERVED_MODES:
        return (
            f"{scenario} {load.scenario.value} serves inference or generation: use it with mode infer or generate, "
            f"not {mode.value}"
        )
    server = load.scenario == Scenario.server
    if server and load.target_qps is None:
        return f"{scenario} server needs {qps}, the offered load ({TARGET_QPS_RANGE})"
    if not server and load.target_qps is not None:
        return f"{qps} sets the arrival rate of {scenario} server, not {load.scenario.value}"
    if not server and load.batch_timeout_ms is not None:
        return f"{timeout} sets how {scenario} server batches queries, not {load.scenario.value}"
    return None


def sweep_loads(raw: Mapping, checker: Checker, modes: Sequence[Mode] | None) -> tuple[Load, ...] | None:
    """A sweep file's load axis (every scenario, server at every target_qps); None where it names no scenario.
    Problems are recorded in `checker`, each naming its field and what is accepted."""
    if "scenarios" in raw and not set(modes or (Mode.train,)) <= set(SERVED_MODES):
        checker.fail(
            ("scenarios",), "a scenario serves inference or generation: give modes: [infer], [generate] or both with it"
        )
    scenarios = checked_list(raw, "scenarios", checker, choice(Scenario, "scenario", checker), "[server]")

    def rate(path, value) -> float:
        if not target_qps_ok(value):
            checker.fail(path, f"{value!r} is not a rate; accepted: {TARGET_QPS_RANGE}")
        return float(value)

    rates = checked_list(raw, "target_qps", checker, rate, "[50, 100, 200]")
    queries = number(raw, "queries", checker, 1, MAX_QUERIES) or 0
    timeout = number(raw, "batch_timeout_ms", checker, 0, MAX_BATCH_TIMEOUT_MS, integer=False)
    if scenarios is None:
        given = [name for name in SWEEP_FIELDS[1:] if name in raw]
        if given:
            checker.fail((given[0],), "applies to a serving scenario: add scenarios, e.g. scenarios: [server]")
        return None
    if Scenario.server in scenarios and rates is None:
        checker.fail(
            ("target_qps",),
            f"scenarios: server needs the offered loads, e.g. target_qps: [50, 100, 200] (each {TARGET_QPS_RANGE})",
        )
    if Scenario.server not in scenarios:
        for name in ("target_qps", "batch_timeout_ms"):
            if name in raw:
                checker.fail((name,), "applies to the server scenario only; add server to scenarios")
    loads = []
    for scenario in scenarios:
        for target_qps in rates if scenario == Scenario.server else (None,):
            loads.append(Load(scenario, target_qps, queries, timeout if scenario == Scenario.server else None))
    return tuple(loads)


@dataclass(frozen=True)
class ServingConfiguration(Configuration):
    """A run of a sweep with a load axis: a Configuration whose run serves queries under `load`."""

    load: Load | None = None

    def run_spec(self, startup: StartupSettings, reuse_key: str = "", end_reuse: bool = False) -> RunSpec:
        spec = super().run_spec(startup, reuse_key, end_reuse)
        if self.load is None:
            return spec
        return replace(
            spec,
            scenario=self.load.scenario,
            target_qps=self.load.target_qps,
            query_count=self.load.query_count,
            batch_timeout_ms=self.load.batch_timeout_ms,
        )

    def key_fields(self, **settings: object) -> dict[str, object]:
        fields = super().key_fields(**settings)
        if self.load is not None:
            fields["serving"] = {**asdict(self.load), "scenario": self.load.scenario.value}
        return fields


@dataclass(frozen=True)
class ServingSweep(Sweep):
    """A sweep with a load axis: its grid's every run once per load."""

    loads: tuple[Load, ...] = ()

    def run_count(self) -> int:
        return super().run_count() * max(1, len(self.loads))

    def configurations(self) -> list[Configuration]:
        """The grid, each runner's turn at a point (its reuse chain, or its one run) repeated for every load, the
        load's runs one chain of their own."""
        out: list[Configuration] = []
        turns = itertools.groupby(
            super().configurations(), key=lambda c: (c.runner, c.repetition, c.reuse_chain or id(c))
        )
        for _, turn in turns:
            turn = list(turn)
            for load in self.loads:
                runs = [
                    ServingConfiguration(**{f: getattr(c, f) for f in c.__dataclass_fields__}, load=load) for c in turn
                ]
                if runs[0].reuse_chain:
                    chain = config_key({**runs[0].key_fields(), "batch_size": None})
                    runs = [replace(c, reuse_chain=chain) for c in runs]
                out.extend(runs)
        return out


def with_loads(sweep: Sweep, loads: tuple[Load, ...] | None) -> Sweep:
    """The sweep with its load axis, where the file gave one."""
    if not loads:
        return sweep
    return ServingSweep(**{name: getattr(sweep, name) for name in sweep.__dataclass_fields__}, loads=loads)
