"""The opt-in for the slow and heavy cases: ``MMINA_HEAVY=1`` (see docs/development.md).

The default test command checks a small sample of each heavy case — a few tasks of a suite,
a few Hypothesis examples, one of several equivalent variants — and ``MMINA_HEAVY=1`` runs
the full versions, marked ``@pytest.mark.heavy`` or sized with :func:`sized`.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

HEAVY_ENV = "MMINA_HEAVY"
"""``MMINA_HEAVY=1`` runs the tests marked ``heavy`` (every real application, long fuzzing, the full
benchmark sections) and the full sizes of the sized ones; the default run checks a sample of each."""
HEAVY = os.environ.get(HEAVY_ENV) == "1"


def sized(default: T, heavy: T) -> T:
    """``heavy`` with ``MMINA_HEAVY=1``, else the default run's smaller ``default`` (a sample, a
    Hypothesis example count): the same test, the same assertions, on less input."""
    return heavy if HEAVY else default
