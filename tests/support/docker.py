"""Whether a Docker engine answers here: the container and Slurm tests need one, and skip loudly without."""

from __future__ import annotations

import shutil
import subprocess
import warnings

import pytest


def docker_engine_problem() -> str | None:
    """Why no Docker engine can be used here, or None when one answers."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    done = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0 or not done.stdout.strip():
        return f"`docker info` failed: {(done.stderr or done.stdout).strip()[:500]}"
    return None


def skip_without_docker_engine(tests: str) -> None:
    """Skip, loudly (a warning in the summary as well as the skip), where no Docker engine answers."""
    problem = docker_engine_problem()
    if problem:
        message = f"NO DOCKER ENGINE, {tests} TESTS NOT RUN: {problem}"
        warnings.warn(message, stacklevel=2)
        pytest.skip(message)
