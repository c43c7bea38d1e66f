"""Shared test fixtures: a real fixture web, a real Chromium, and one really recorded store."""

from __future__ import annotations

import os
import pickle
import shutil
import threading
from pathlib import Path

import pytest

from mmina.fixtures.web import FixtureWeb
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.store import Store
from tests.built_once import built_once, run_folder
from tests.heavy import HEAVY, HEAVY_ENV

PREWARM = pytest.StashKey[threading.Thread]()
"""The thread installing the default run's third-party software from its start (``tests/prewarm.py``)."""
PREWARM_JOIN_S = 900.0
"""How long a run that ends early waits for those installs (on a fresh machine: a few minutes)."""


@pytest.fixture(scope="session")
def fixture_web():
    with FixtureWeb() as web:
        yield web


@pytest.fixture(scope="session")
def recorded() -> tuple[Path, RunSummary]:
    """The built-in task normal/1 (wiki, then shop) recorded once per test run with the oracle
    (read-only for tests)."""
    folder = built_once("recorded-normal-1", _record_normal_1)
    return folder / "store", pickle.loads((folder / "summary.pickle").read_bytes())


def _record_normal_1(folder: Path) -> None:
    summary = record_run(Store.open(folder / "store", create=True), RecordConfig(task_ids=("normal/1",)))
    (folder / "summary.pickle").write_bytes(pickle.dumps(summary))


@pytest.fixture
def recorded_copy(recorded: tuple[Path, RunSummary], tmp_path: Path) -> Path:
    """A private copy of the recorded store, for tests that write or damage it."""
    target = tmp_path / "store"
    shutil.copytree(recorded[0], target)
    return target


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"heavy: slow and heavy cases, run only with {HEAVY_ENV}=1")
    if not hasattr(config, "workerinput"):  # the run's main process, before any worker starts
        run_folder()
        if config.args_source is pytest.Config.ArgsSource.TESTPATHS:  # the whole default suite
            from tests import prewarm

            config.stash[PREWARM] = prewarm.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        if PREWARM in config.stash:
            config.stash[PREWARM].join(PREWARM_JOIN_S)
        shutil.rmtree(run_folder(), ignore_errors=True)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the default, pyproject.toml): one worker more than the cores, at least three —
    most tests wait on browsers and servers (docs/development.md)."""
    return max(3, (os.cpu_count() or 1) + 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leaves the ``heavy`` tests out of the default run (deselected, not skipped: they are an
    opt-in), and puts the slowest files first (``SLOWEST``)."""
    items.sort(key=lambda item: _rank(item.path.name))  # stable: a file's tests keep their order
    if HEAVY:
        return
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker("heavy")]


SLOWEST = (
    "test_s3_store.py",
    "test_concurrency.py",
    "test_realweb_deadlines.py",
    "test_secrets.py",
    "test_record.py",
    "test_rescore_batch.py",
    "test_hard_web.py",
    "test_rescore.py",
    "test_keypoints.py",
    "test_user_install.py",
    "test_builtin_suite.py",
    "test_replay.py",
    "test_sql_sandbox.py",
    "test_independent_site.py",
    "test_serve.py",
    "test_conditioned.py",
    "test_interchange.py",
    "test_serve_http.py",
    "test_step_evidence.py",
    "test_agents.py",
    "test_bench.py",
)
"""The slowest test files, slowest first (measured on the 2-core machine: from 260 s down to 35 s
in a run). The workers take files from the front of the run's list whenever they run short
(``--dist loadfile --no-loadscope-reorder``, pyproject.toml), so the long files start first and
the short ones fill in: a long file started last would be the run's tail. Order only: a file
missing here runs after them, in the usual order."""


def _rank(file_name: str) -> int:
    return SLOWEST.index(file_name) if file_name in SLOWEST else len(SLOWEST)
