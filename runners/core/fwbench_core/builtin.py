"""The built-in models: each declared in builtin_models/<name>/model.toml, read once. Every runner's registry checks
its builders against them and the catalog serves them."""

from __future__ import annotations

from pathlib import Path

from .declaration import read_declaration
from .models import ModelSource, ModelSpec

BUILTIN_MODELS_FOLDER = Path(__file__).parent / "builtin_models"


def _builtin_specs() -> dict[str, ModelSpec]:
    folders = sorted(p for p in BUILTIN_MODELS_FOLDER.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    return {folder.name: read_declaration(folder, ModelSource()) for folder in folders}


# The built-in models, by name.
MODEL_SPECS: dict[str, ModelSpec] = _builtin_specs()
