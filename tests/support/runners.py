"""The runners the tests start: the fake one (from the aggregator's environment) and every shipped framework's."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwbench_aggregator.base import frameworks
from fwbench_core.catalog import load_catalog
from fwbench_core.fake import FAKE_MODELS
from fwbench_core.plugins import MODELS_DIR_FLAG, PluginLocation

# The Keras runners: Keras 3 on a backend, building the TensorFlow runner's model definitions. They pass the
# conformance suite and parity (RUNNER_PARAMS, test_parity); they neither generate nor run distributed, so the
# tests of those (and of the native runners' own steps) take the native runners only.
KERAS_RUNNERS = tuple(f.name for f in frameworks.shipped() if f.module.startswith("fwbench_keras."))
# The real runners with a framework of their own (aggregator/fwbench_aggregator/base/frameworks.toml).
REAL_RUNNERS = tuple(f.name for f in frameworks.shipped() if f.name not in KERAS_RUNNERS)


# A test parametrized over runners: the fake one in the fast tier, each real one marked `frameworks`.
RUNNER_PARAMS = (
    "fake",
    *(pytest.param(name, marks=pytest.mark.frameworks, id=name) for name in (*REAL_RUNNERS, *KERAS_RUNNERS)),
)

# The fake runner's steps sleep this long: long enough that a run of a few dozen
# steps keeps the device busy while a second request arrives.
FAKE_STEP_TIME_S = "0.01"

# The example model plug-ins: every runner the suite starts serves them beside the built-ins, so that the contract
# (conformance, parity) is shown to hold for a user's model exactly as for ours.
EXAMPLE_MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
EXAMPLE_PLUGINS = ("tiny_cnn", "tiny_decoder", "tiny_transformer")
# Every model the suite's runners serve, by name: the built-ins and the example plug-ins, as declared.
SERVED_SPECS = load_catalog(FAKE_MODELS, [PluginLocation(EXAMPLE_MODELS, MODELS_DIR_FLAG)]).specs
