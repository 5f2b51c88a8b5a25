"""Parity's evidence, from the runners themselves: each runner's count of a model's parameters and FLOPs and its
output shape, and, where one runner can load the other's weights, their outputs for the same input. Judging it
is analyse.parity's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..base.paths import CHANGED_MARK, safe_component
from ..base.vocabulary import shape_text
from . import wire
from .client import RunnerClient, RunnerFailure

# The runners fwbench starts share a folder it makes; runners named with --runner are the user's to start so.
SHARED_FOLDER_HINT = (
    "runners given as --runner NAME=HOST:PORT must share one reference folder: start both with the same "
    "--reference-dir (or $FWBENCH_REFERENCE_DIR)"
)


@dataclass(frozen=True)
class Variant:
    """A model with one choice of its options (every head of a multi-head model is checked)."""

    model: str
    options: dict[str, str]
    token_precision: str = ""  # a generating model's tokens in this precision; "": fp32

    @property
    def label(self) -> str:
        return self.model + "".join(f" {k}={v}" for k, v in sorted(self.options.items()))

    @property
    def reference_name(self) -> str:
        """The name its reference file has in the runners' shared reference folder: one safe component
        (whatever model name the runner sent), in the runner's name alphabet, which has no '~'."""
        label = self.label + (f" tokens-{self.token_precision}" if self.token_precision else "")
        stem = safe_component(label.replace(" ", "_").replace("=", "-")).replace(CHANGED_MARK, "-")
        return f"reference-{stem}.npz"


def variants(models: list[wire.ModelInfo], names: list[str] | None, token_precision: str = "") -> list[Variant]:
    """Every variant of the models `names` (None: all); with a `token_precision`, of the generating models only,
    whose tokens it is the precision of."""
    chosen = [m for m in models if (names is None or m.name in names) and (m.generates or not token_precision)]
    out = []
    for m in chosen:
        if not m.options:
            out.append(Variant(m.name, {}, token_precision))
        for option in m.options:
            out += [Variant(m.name, {option.name: choice}, token_precision) for choice in option.choices]
    return out


def tokens_text(compared: int, first_divergence: int, precision: str = "") -> str:
    """A generating model's greedy tokens against the reference's: "identical (16)", "differ from position 3" (with
    " in amp_bf16" where generated in a lower precision), or "" for a model that does not generate."""
    if not compared:
        return ""
    text = f"identical ({compared})" if first_divergence < 0 else f"differ from position {first_divergence}"
    return text + (f" in {precision}" if precision else "")


def gather_variant(variant: Variant, reference: RunnerClient, other: RunnerClient) -> dict:
    """Inspect the model on both runners and, where the other runner can load the reference's
    weights, compare outputs on the same input. The weights go from one runner to the other as a named
    file in the reference folder they share. One row: each runner's figures, and "numeric": match, MISMATCH or
    not checked (the other runner cannot load the reference's weights)."""
    row: dict = {"model": variant.label}
    reports = {}
    for client in (reference, other):
        report = client.inspect(variant.model, model_options=variant.options)
        reports[client.name] = report
        row[f"params_{client.name}"] = report.parameter_count
        row[f"flops_{client.name}"] = report.forward_flops
        row[f"output_{client.name}"] = shape_text(report.output_shape)
        row[f"build_s_{client.name}"] = report.build_time_s
    row["input_shape"] = shape_text(reports[reference.name].input_shape)

    request = wire.reference_request(variant.model, variant.options, variant.reference_name, variant.token_precision)
    try:
        reference.export_reference(request)
        compared = other.compare_reference(request)
    except RunnerFailure as failure:
        if failure.code == "NOT_FOUND" and failure.runner == other.name:
            raise RunnerFailure(other.name, failure.code, f"{failure.message}; {SHARED_FOLDER_HINT}") from None
        if failure.code != "FAILED_PRECONDITION":
            raise
        row["numeric"] = "not checked"
        row["numeric_note"] = failure.message
        row["max_rel_diff"] = None
        row["tokens"] = ""
    else:
        row["numeric"] = "match" if compared.matched else "MISMATCH"
        row["numeric_note"] = ""
        row["max_rel_diff"] = compared.max_rel_diff
        row["tokens"] = tokens_text(compared.tokens_compared, compared.first_token_divergence, variant.token_precision)

    return row


def gather(
    reference: RunnerClient,
    other: RunnerClient,
    names: list[str] | None,
    on_variant: Callable[[Variant], None] = lambda v: None,
    token_precision: str = "",
) -> tuple[list[dict], list[str]]:
    """Every model both runners list (or those of `names`), gathered, generating models' tokens in `token_precision`
    ("": fp32, and with one only the generating models); and the models the reference lists and the other does not
    (a further framework may build a subset; asked for by name, it is an error)."""
    reference_models = reference.list_models()
    listed = {m.name for m in other.list_models()}
    lacking = [name for name in names or [] if name not in listed]
    if lacking:
        raise RunnerFailure(
            other.name,
            "FAILED_PRECONDITION",
            f"lists no model {', '.join(lacking)}; it has: {', '.join(sorted(listed))}",
        )
    rows = []
    for variant in variants([m for m in reference_models if m.name in listed], names, token_precision):
        on_variant(variant)
        rows.append(gather_variant(variant, reference, other))
    return rows, sorted(m.name for m in reference_models if m.name not in listed)
