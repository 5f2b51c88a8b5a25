"""What the runners are and what they build: fwbench models and fwbench describe."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.progress import Progress
from ..base.vocabulary import Task, shape_text, to_text
from ..run import replies
from ..run.client import RunnerClient, RunnerFailure
from ..run.listing import ListedModel, PluginProblem
from ..run.runners import each_runner
from .runners import RunnerChoice, runners_for


@dataclass
class ModelList:
    models: list[ListedModel] = field(default_factory=list)
    runners: list[str] = field(default_factory=list)  # every runner that answered
    failures: list[RunnerFailure] = field(default_factory=list)
    plugin_problems: list[PluginProblem] = field(default_factory=list)  # plug-ins a runner did not load


def list_models(runners: RunnerChoice, parameters: bool = False, progress: Progress = Progress()) -> ModelList:
    """Every runner's models, one entry per model; with `parameters`, each runner builds each model on its CPU to
    count its parameters (tens of seconds)."""
    listing = ModelList()
    by_name: dict[str, ListedModel] = {}

    def visit(name: str, address: str, client: RunnerClient) -> None:
        if name in listing.runners:
            return  # a job across machines: its first node answers for it
        listing.runners.append(name)
        listing.plugin_problems += [
            PluginProblem(name, p.folder, p.error) for p in client.describe().plugins if p.error
        ]
        models = client.list_models()
        counts = _parameter_counts(name, client, [m.name for m in models], progress) if parameters else {}
        for m in models:
            entry = by_name.setdefault(
                m.name,
                ListedModel(
                    m.name,
                    to_text(Task, m.task),
                    m.input_convention,
                    shape_text(m.default_input_shape),
                    shape_text(m.min_input_shape),
                    shape_text(m.max_input_shape),
                    " ".join(f"{o.name}={'|'.join(o.choices)}" for o in m.options),
                    source=m.source_folder,
                    origin=m.source_origin,
                    content_hash=m.content_hash,
                ),
            )
            entry.runners.append(name)
            if m.name in counts:
                entry.parameters[name] = counts[m.name]

    with runners_for(runners, progress) as found:
        listing.failures += found.failures
        listing.failures += each_runner(found.endpoints, found.transport, visit)
    listing.models = list(by_name.values())
    return listing


def _parameter_counts(name: str, client: RunnerClient, models: list[str], progress: Progress) -> dict[str, int]:
    """Each model's trainable parameters as the runner's InspectModel counts them, one model at a time."""
    counts = {}
    task = progress.add_task(f"{name}: counting parameters", total=len(models))
    for model in models:
        progress.update(task, description=f"{name}: building {model}")
        counts[model] = client.inspect(model).parameter_count
        progress.advance(task)
    progress.remove_task(task)
    return counts


@dataclass
class RunnerDescription:
    name: str
    address: str
    info: replies.RunnerDescription


def describe(
    runners: RunnerChoice, progress: Progress = Progress()
) -> tuple[list[RunnerDescription], list[RunnerFailure]]:
    described: list[RunnerDescription] = []
    with runners_for(runners, progress) as found:
        failures = found.failures + each_runner(
            found.endpoints,
            found.transport,
            lambda name, address, client: described.append(RunnerDescription(name, address, client.describe())),
        )
    return described, failures
