"""The code stays as ruff wants it (``[tool.ruff]`` in pyproject.toml): lint clean and formatted.

``ruff check`` runs pyflakes, pycodestyle, import order, pyupgrade and bugbear; ``ruff format
--check`` says which file the formatter would change. Fix with ``ruff check --fix`` and ``ruff
format`` (the whole tree was formatted once, in a commit of its own: .git-blame-ignore-revs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "args",
    [("check", "--output-format", "concise", "."), ("format", "--check", ".")],
    ids=["check", "format"],
)
def test_ruff_finds_nothing(args: tuple[str, ...]) -> None:
    done = _ruff(*args)
    assert done.returncode == 0, done.stdout + done.stderr
