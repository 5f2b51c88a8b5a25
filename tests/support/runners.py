"""The runners the tests start: the fake one (from the aggregator's environment) and every shipped framework's."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwbench_aggregator.base import frameworks
from fwbench_core.catalog import load_catalog
from fwbench_core.fake import FAKE_MODELS
from fwbench_core.plugins import MODELS_DIR_FLAG, PluginLocation

# The real runners are the shipped frameworks (aggregator/fwbench_aggregator/base/frameworks.toml).
REAL_RUNNERS = tuple(f.name for f in frameworks.shipped())
# A test parametrized over runners: the fake one in the fast tier, each real one marked `frameworks`.
RUNNER_PARAMS = ("fake", *(pytest.param(name, marks=pytest.mark.frameworks, id=name) for name in REAL_RUNNERS))

# The fake runner's steps sleep this long: long enough that a run of a few dozen
# steps keeps the device busy while a second request arrives.
FAKE_STEP_TIME_S = "0.01"

# The example model plug-ins: every runner the suite starts serves them beside the built-ins, so that the contract
# (conformance, parity) is shown to hold for a user's model exactly as for ours.
EXAMPLE_MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
EXAMPLE_PLUGINS = ("tiny_cnn", "tiny_decoder", "tiny_transformer")
# Every model the suite's runners serve, by name: the built-ins and the example plug-ins, as declared.
SERVED_SPECS = load_catalog(FAKE_MODELS, [PluginLocation(EXAMPLE_MODELS, MODELS_DIR_FLAG)]).specs
