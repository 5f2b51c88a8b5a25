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
# A Keras runner is the one kind that runs on another framework, in its environment (frameworks.native_of).
KERAS_RUNNERS = tuple(f.name for f in frameworks.shipped() if not f.owns_environment)
# The real runners with a framework of their own (aggregator/fwbench_aggregator/base/frameworks.toml).
REAL_RUNNERS = tuple(f.name for f in frameworks.shipped() if f.name not in KERAS_RUNNERS)

# A larger member of a builder family and the member that trains that family's code in every runner: every
# runner builds both from one builder at other depths or widths (a ResNet's bottleneck stages, EfficientNet's
# multipliers). The larger member trains in the fake and torch runners only: in TensorFlow and JAX its training
# compiles for 80-140 s on a 2-core machine and runs no code the smaller member's does not (a broken JAX bottleneck
# or TensorFlow EfficientNet wrapper fails resnet50's or efficientnet_b0's run), while InspectModel's parameter
# counts and forward passes (test_parity) check its own depths.
LARGER_MEMBERS = {"resnet152": "resnet50", "efficientnet_b4": "efficientnet_b0"}


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
