"""Serving a Keras runner on one backend. Keras reads KERAS_BACKEND when it is first imported: it is set here,
before, and every worker process this runner starts inherits it."""

from __future__ import annotations

import importlib
import os

from fwbench_core.isolation import RunIsolation
from fwbench_core.server import serve

# The backends, each with its native runner's isolation: TensorFlow and JAX keep the GPU memory they took while
# their process lives (a GPU run gets its own process); PyTorch empties its allocator cache after every run.
BACKENDS = {
    "tensorflow": RunIsolation.PROCESS_ON_GPU,
    "jax": RunIsolation.PROCESS_ON_GPU,
    "torch": RunIsolation.THREAD,
}


def main(backend: str) -> None:
    os.environ["KERAS_BACKEND"] = backend
    # The native runner's start-up settings for its framework (its __main__ sets them on import and serves only
    # when run), for the same reasons: TensorFlow's oneDNN kernels and quiet C++ log, JAX's GPU memory as it needs it.
    importlib.import_module(f"fwbench_{backend}.__main__")
    from .backend import KerasBackend

    serve(KerasBackend, default_isolation=BACKENDS[backend])
