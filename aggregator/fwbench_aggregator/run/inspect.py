"""Each model's forward FLOPs per sample and parameters, as the runner that ran it counts them (InspectModel).
Inspecting builds the model on the runner's CPU (0.1-2 s); the runners inspect at once, after the runs, when
nothing is timed."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from ..base.progress import Progress
from ..base.vocabulary import shape_dims
from . import jobs, wire
from .client import RunnerClient, RunnerFailure
from .connection import Transport


class Inspected(NamedTuple):
    identity: dict[str, str]  # runner, framework, framework_version, model, model_options, input_shape
    report: wire.ModelReport
    address: str


def _options(text: str) -> dict[str, str]:
    """ "head=mlm;size=base" (as the summary frame writes model_options) -> {"head": "mlm", "size": "base"}."""
    return dict(pair.split("=", 1) for pair in text.split(";") if pair)


def inspect_models(
    endpoints: Mapping[str, str],
    transport: Transport,
    wanted: Mapping[str, list[dict[str, str]]],
    progress: Progress = Progress(),
) -> list[Inspected]:
    """Inspect, on each runner, the models `wanted` names for it (identities as the summary frame has them). A
    runner that cannot inspect one is warned about and skipped: only that model's FLOPs go missing."""
    wanted = {runner: identities for runner, identities in wanted.items() if runner in endpoints and identities}
    if not wanted:
        return []
    task = progress.add_task(f"counting model FLOPs on {', '.join(wanted)}")
    try:
        with ThreadPoolExecutor(len(wanted)) as pool:
            # A job across machines is inspected on its first node.
            done = [
                pool.submit(
                    _inspect_runner, runner, jobs.addresses_of(endpoints[runner])[0], identities, transport, progress
                )
                for runner, identities in wanted.items()
            ]
            return [inspected for future in done for inspected in future.result()]
    finally:
        progress.remove_task(task)


def _inspect_runner(
    runner: str, address: str, identities: list[dict[str, str]], transport: Transport, progress: Progress
) -> list[Inspected]:
    """One runner's inspections, one model after the other (it takes its CPU lock for each)."""
    out = []
    try:
        with RunnerClient(runner, address, transport) as client:
            version = client.describe().framework_version
            for identity in identities:
                if version != identity["framework_version"]:
                    continue  # run by another version of the framework: not this runner's to count
                try:
                    report = client.inspect(
                        identity["model"], shape_dims(identity["input_shape"]), _options(identity["model_options"])
                    )
                except RunnerFailure as failure:
                    _warn(progress, runner, identity["model"], failure)
                    continue
                out.append(Inspected(identity, report, address))
    except RunnerFailure as failure:
        _warn(progress, runner, ", ".join(sorted({i["model"] for i in identities})), failure)
    return out


def _warn(progress: Progress, runner: str, models: str, failure: RunnerFailure) -> None:
    progress.note(
        f"{runner} could not inspect {models}, so its FLOPs are not stored: {failure.code}: {failure.message}",
        "warning",
    )
