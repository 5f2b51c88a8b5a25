"""Every runner asked, before any runs, whether it can run what it will be asked (CheckRun): a mistake is refused
with one message naming each runner's problem, instead of surfacing after another runner has run in full."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..run import jobs, replies, wire
from ..run.client import RunnerClient, RunnerFailure
from ..run.connection import Transport
from .errors import UsageError

# What a runner answers when the request itself is the problem; any other failure is the runner's (unreachable,
# busy) and is reported as a failure of that runner.
REFUSALS = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND", "OUT_OF_RANGE"}


def resolved_or_refusal(client: RunnerClient, request: wire.Request) -> tuple[replies.Resolved | None, str]:
    """The runner's resolution of `request`, or None and its reason where it refuses it; any other failure (an
    unreachable runner) is raised."""
    try:
        return client.check_run(request), ""
    except RunnerFailure as failure:
        if failure.code not in REFUSALS:
            raise
        return None, failure.message


def check_all(
    endpoints: Mapping[str, str], transport: Transport, requests: Sequence[tuple[str, wire.Request]], what: str
) -> tuple[list[replies.Resolved | None], list[RunnerFailure]]:
    """Each (runner, request)'s resolved configuration (None where the runner is too old to answer CheckRun, or could
    not be asked), and the runners that could not be asked. Raises UsageError naming every problem, runners that
    share one named together, where any runner refuses its request."""
    resolved: list[replies.Resolved | None] = [None] * len(requests)
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


def checked(
    endpoints: Mapping[str, str],
    transport: Transport,
    requests: Mapping[str, wire.Request],
    what: str = "the comparison",
) -> tuple[dict[str, replies.Resolved], list[RunnerFailure]]:
    """check_all for one request per runner: each runner's resolved configuration, and the runners not asked."""
    resolved, failures = check_all(endpoints, transport, list(requests.items()), what)
    return {name: config for name, config in zip(requests, resolved) if config is not None}, failures


def same_network(
    endpoints: Mapping[str, str],
    transport: Transport,
    requests: Mapping[str, wire.Request],
    allow_different: bool = False,
) -> None:
    """For a plug-in model, evidence before anything runs that the runners build one network: the same plug-in
    (content hash) and the same trainable parameter count at the run's shape and options. A UsageError where they
    differ, unless the user allows it; built-in models pass at once (the project's parity tests prove them)."""
    found: dict[str, tuple[wire.ModelInfo, wire.Request]] = {}
    for name, request in requests.items():
        with RunnerClient(name, jobs.addresses_of(endpoints[name])[0], transport) as client:
            info = next((m for m in client.list_models() if m.name == request.model), None)
            if info is not None and info.source_folder:
                found[name] = (info, request)
    if not found or allow_different:
        return
    hashes = {name: info.content_hash for name, (info, _) in found.items()}
    if len(set(hashes.values())) > 1:
        versions = ", ".join(f"{name} {h[:19]}" for name, h in hashes.items())
        raise UsageError(
            f"the runners load different versions of plug-in {next(iter(found.values()))[0].name}: "
            f"{versions}; point them at the same folder, or pass --allow-different-models",
            "--allow-different-models",
        )
    counts = {}
    for name, (_info, request) in found.items():
        with RunnerClient(name, jobs.addresses_of(endpoints[name])[0], transport) as client:
            counts[name] = client.inspect(
                request.model, request.input_shape, dict(request.model_options)
            ).parameter_count
    if len(set(counts.values())) > 1:
        model = next(iter(found.values()))[0].name
        figures = ", ".join(f"{name} {count:,}" for name, count in counts.items())
        raise UsageError(
            f"the runners build plug-in {model} with different trainable parameter counts ({figures}): not the same "
            f"network, so a comparison would not compare frameworks; `fwbench parity --models {model}` shows where "
            "they differ, and --allow-different-models compares them anyway",
            "--allow-different-models",
        )
