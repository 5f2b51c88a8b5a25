"""The runners the tests start: the fake one (from the aggregator's environment) and every shipped framework's."""

from __future__ import annotations

import pytest
from fwbench_aggregator.base import frameworks

# The real runners are the shipped frameworks (aggregator/fwbench_aggregator/base/frameworks.toml).
REAL_RUNNERS = tuple(f.name for f in frameworks.shipped())
# A test parametrized over runners: the fake one in the fast tier, each real one marked `frameworks`.
RUNNER_PARAMS = ("fake", *(pytest.param(name, marks=pytest.mark.frameworks, id=name) for name in REAL_RUNNERS))

# The fake runner's steps sleep this long: long enough that a run of a few dozen
# steps keeps the device busy while a second request arrives.
FAKE_STEP_TIME_S = "0.01"
