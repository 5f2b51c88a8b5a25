"""Framework-neutral core shared by every fwbench runner. Imports no framework."""

RUNNER_VERSION = "0.1.0"
PROTOCOL = "fwbench.runner.v1"
