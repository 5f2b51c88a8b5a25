"""Compilation torchscript: torch.jit.script, or torch.jit.trace where scripting cannot compile the model."""

from __future__ import annotations

import warnings

import torch


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    # A compiler's message goes on with the source it points at, after a colon.
    return f"{type(error).__name__}: {text.splitlines()[0].rstrip(':')}" if text else type(error).__name__


def torchscript(
    model: torch.nn.Module, example: torch.Tensor, script_failure: str | None
) -> tuple[torch.nn.Module, str | None]:
    """The model compiled by torch.jit.script, or by torch.jit.trace on `example` (which records one path
    through the Python code) where scripting fails or gives a forward that returns no single tensor; and why
    scripting was not used, None where it was. `script_failure`: why it failed before in this process, where it
    is not tried again: the classes a failed attempt defined stay in TorchScript's compilation unit, and a second
    attempt fails on those instead ("Can't redefine method")."""
    with warnings.catch_warnings():
        # PyTorch deprecates TorchScript in favour of torch.compile and torch.export; runs measure it as it is.
        warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", FutureWarning)
        if script_failure is None:
            try:
                scripted = torch.jit.script(model)
            except Exception as error:  # the script front end's errors share no base class narrower than this
                script_failure = f"torch.jit.script failed: {first_line(error)}"
            else:
                returns = scripted.forward.schema.returns
                if len(returns) == 1 and isinstance(returns[0].type, torch.TensorType):
                    return scripted, None
                # e.g. torchvision's Inception3: scripted, it returns InceptionOutputs (logits and auxiliary logits).
                script_failure = (
                    f"torch.jit.script's forward returns {', '.join(str(r.type) for r in returns)}, not a tensor"
                )
        # check_trace would run the model twice more and compare outputs, which dropout makes differ in training.
        return torch.jit.trace(model, example, check_trace=False), script_failure


def torchscript_note(script_failure: str | None) -> str:
    return "torchscript (scripted)" if script_failure is None else f"torchscript (traced: {script_failure})"
