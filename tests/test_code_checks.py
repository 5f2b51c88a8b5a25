"""The code's own checks, in the fast tier: ruff's lint and format and mypy's types, as pyproject.toml configures them
(the pre-commit hooks run the same). A finding fails with the tool's own report, which names the file and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    done = _tool("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_would_change_nothing():
    done = _tool("ruff", "format", "--no-cache", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing_in_the_checked_packages():
    # Its cache is the repository's .mypy_cache (ignored by git): a second run takes a second, not twenty.
    done = _tool("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
