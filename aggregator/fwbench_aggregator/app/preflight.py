"""Every runner asked, before any runs, whether it can run what it will be asked (CheckRun): a mistake is refused
with one message naming each runner's problem, instead of surfacing after another runner has run in full."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fwbench.runner.v1 import runner_pb2 as pb

from ..run import jobs
from ..run.client import RunnerClient, RunnerFailure
from ..run.connection import Transport
from .errors import UsageError

# What a runner answers when the request itself is the problem; any other failure is the runner's (unreachable,
# busy) and is reported as a failure of that runner.
REFUSALS = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND", "OUT_OF_RANGE"}


def check_all(endpoints: Mapping[str, str], transport: Transport, requests: Sequence[tuple[str, pb.RunRequest]],
              what: str) -> tuple[list[pb.ResolvedConfig | None], list[RunnerFailure]]:
    """Each (runner, request)'s resolved configuration (None where the runner is too old to answer CheckRun, or could
    not be asked), and the runners that could not be asked. Raises UsageError naming every problem, runners that
    share one named together, where any runner refuses its request."""
    resolved: list[pb.ResolvedConfig | None] = [None] * len(requests)
    failures: dict[str, RunnerFailure] = {}
    problems: dict[str, list[str]] = {}
    by_runner: dict[str, list[int]] = {}
    for index, (name, _) in enumerate(requests):
        by_runner.setdefault(name, []).append(index)
    for name, indices in by_runner.items():
        # A job across machines: its first node answers for it (the others hold the same runner).
        with RunnerClient(name, jobs.addresses_of(endpoints[name])[0], transport) as client:
            for index in indices:
                try:
                    resolved[index] = client.check_run(requests[index][1])
                except RunnerFailure as failure:
                    if failure.code == "UNIMPLEMENTED":
                        break
                    if failure.code not in REFUSALS:
                        failures[name] = failure
                        break
                    named = problems.setdefault(failure.message, [])
                    if name not in named:
                        named.append(name)
    if problems:
        lines = [f"  {', '.join(names)}: {message}" for message, names in problems.items()]
        raise UsageError(f"{what} cannot run, and nothing was run:\n" + "\n".join(lines))
    return resolved, list(failures.values())


def checked(endpoints: Mapping[str, str], transport: Transport, requests: Mapping[str, pb.RunRequest],
            what: str = "the comparison") -> tuple[dict[str, pb.ResolvedConfig], list[RunnerFailure]]:
    """check_all for one request per runner: each runner's resolved configuration, and the runners not asked."""
    resolved, failures = check_all(endpoints, transport, list(requests.items()), what)
    return {name: config for name, config in zip(requests, resolved) if config is not None}, failures
