"""What several test files build alike (a recorded store), built once per test run and shared by
the run's worker processes (pytest-xdist runs the files in several; see docs/development.md).

The first process to ask builds it while the others wait on a lock; a build cut short (its
process died) is done again by the next one. Everything lands in one folder per run, which the
run's main process removes at its end (``tests/conftest.py``). What is built this way is read
only: a test that writes copies it first.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

RUN_ENV = "MMINA_TEST_RUN"
"""Named by the run's main process before its workers start (``tests/conftest.py``), which
inherit it: the same in every process of one run."""
DONE = ".built"


def run_folder() -> Path:
    """The folder this run's processes share."""
    return Path(tempfile.gettempdir()) / f"mmina-tests-{os.environ.setdefault(RUN_ENV, uuid.uuid4().hex)}"


def built_once(name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` after ``build(folder)`` ran once in this test run, whichever process asked first."""
    root = run_folder()
    root.mkdir(parents=True, exist_ok=True)
    target = root / name
    with locked(root / f"{name}.lock"):
        if not (target / DONE).exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            build(target)
            (target / DONE).touch()
    return target


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if need be) across processes, for the block."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
