"""mypy over ``mmina/`` is clean (its settings are ``[tool.mypy]`` in pyproject.toml).

The check is incremental: its cache lives in the system's temporary folder, one per checkout,
so a run after a small change re-checks only what the change touches (a few seconds; the first
run of a checkout takes about twenty)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """A cache of this checkout's mypy results that outlives one test session."""
    return Path(tempfile.gettempdir()) / f"mmina-mypy-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"


def test_mypy_finds_no_problem_in_mmina() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache_dir()), "--no-error-summary"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == "", run.stdout
