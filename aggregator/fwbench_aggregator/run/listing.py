"""A model as the runners list it: one entry per model, with every runner that builds it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ListedModel:
    """One model, as the first runner that lists it declares it, and every runner that builds it."""

    name: str
    task: str
    input_convention: str
    default_shape: str
    min_shape: str
    max_shape: str
    options: str  # "head=classification|mlm"
    runners: list[str] = field(default_factory=list)
    parameters: dict[str, int] = field(default_factory=dict)  # runner -> trainable parameters, where counted
    source: str = ""  # a plug-in's folder; "" for a built-in
    origin: str = ""  # how the runner was pointed at the plug-in
    content_hash: str = ""


@dataclass(frozen=True)
class PluginProblem:
    """A model plug-in a runner did not load, and why."""

    runner: str
    folder: str
    error: str
