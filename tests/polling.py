"""Waiting on a condition with a generous bound — what a test does instead of a fixed sleep.

A sleep stands for "by now it has happened", which a loaded machine breaks (the suite must pass
beside CPU burners: ``python -m tests.burners 2 -- ...``). Poll the thing itself; the bound is
how long to wait before calling it a failure, so make it generous: a test on a quiet machine
returns as soon as the condition holds and pays nothing for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(found: Callable[[], T], within_s: float, what: str, every_s: float = 0.05) -> T:
    """``found()``'s first truthy value, polled every ``every_s``; AssertionError naming ``what``
    when none came within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        value = found()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {within_s:g} s: {what}")
        time.sleep(every_s)
