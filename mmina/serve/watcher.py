"""Following the store while it is served: new runs, newly committed episodes, new verdicts.

A background thread lists the store's ``runs``, ``episodes`` and ``scores`` files over and
over (every half second, or less often when listing takes long, as on a large object
store). A run whose files changed is indexed again (``episode_index.py``), the runs being
followed first, and every change bumps a version that open pages wait on (``/api/changes``),
so a run being recorded updates on screen as its episodes commit. Listing only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from mmina.errors import MminaError, first_line
from mmina.serve.catalog import Catalog
from mmina.serve.episode_index import EpisodeIndex
from mmina.serve.params import BadRequest
from mmina.store import Store
from mmina.store.layout import data_files, file_version, run_of
from mmina.store.schema import EPISODES, RUNS, SCORES

POLL_S = 0.5
SLOWEST_POLL_S = 10.0
WORK_S = 1.0
"""Indexing done in one pass before the store is listed again (so followed runs stay current)."""
EVALUATORS_KEPT = 4
EVALUATORS_SQL = "SELECT DISTINCT evaluator FROM scores WHERE level = 'task' ORDER BY evaluator"
LIVE_S = 120.0
"""A run whose files changed this recently, and that has tasks left, is shown as being recorded."""
log = logging.getLogger("mmina.serve")


@dataclass(frozen=True)
class Listing:
    """What the store held at one listing: a fingerprint per run, and the schema versions present."""

    runs: dict[str, str] = field(default_factory=dict)
    versions: frozenset[tuple[str, int | None]] = frozenset()


def list_store(store: Store) -> Listing:
    """Fingerprints of every run's ``runs``, ``episodes`` and ``scores`` files (their names:
    files are written once, so a new name is the only way a run changes)."""
    names: dict[str, list[str]] = defaultdict(list)
    versions = set()
    for table in (RUNS, EPISODES, SCORES):
        for path in data_files(store.backend, table):
            names[run_of(path) or ""].append(f"{table.name}/{path.name}")
            versions.add((table.name, file_version(path)))
    fingerprints = {
        run: hashlib.sha256("\n".join(sorted(found)).encode()).hexdigest()[:24]
        for run, found in names.items()
        if run
    }
    return Listing(fingerprints, frozenset(versions))


class Changes:
    """A version number that pages wait on; bumped from any thread, awaited on the event loop."""

    def __init__(self) -> None:
        self.version = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self._event = loop, asyncio.Event()

    def bump(self) -> None:
        self.version += 1
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        assert self._event is not None
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, since: int, timeout: float) -> int:
        """The version once it differs from ``since``, or after ``timeout`` seconds."""
        event = self._event
        if self.version == since and event is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
        return self.version


class StoreWatcher:
    """The background thread keeping the catalog and the episode indexes current."""

    def __init__(self, store: Store, catalog: Catalog, evaluator: str) -> None:
        self.store, self.catalog, self.default_evaluator = store, catalog, evaluator
        self.changes = Changes()
        self.listing = Listing()
        self.listed = threading.Event()
        self.last_change: dict[str, float] = {}
        self.problem: str | None = None
        """Why the store could not be read at the last try (shown on the pages), or None."""
        self.run_problems: dict[str, str] = {}
        """Why a run could not be indexed (e.g. an unreadable file), by run."""
        self._indexes = {evaluator: EpisodeIndex(store, evaluator)}
        self._evaluators: tuple[Listing, list[str]] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mmina-serve-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def evaluators(self) -> list[str]:
        """The evaluators with task verdicts in the store, the default first (read again when
        the store's files change)."""
        listing = self.listing
        if self._evaluators is None or self._evaluators[0] is not listing:
            found = [row["evaluator"] for row in self.catalog.rows(EVALUATORS_SQL)]
            self._evaluators = (
                listing,
                [self.default_evaluator, *(e for e in found if e != self.default_evaluator)],
            )
        return self._evaluators[1]

    def index(self, evaluator: str | None = None) -> EpisodeIndex:
        """The index under ``evaluator`` (made on first use; the thread fills it)."""
        name = evaluator or self.default_evaluator
        if name not in self._indexes:
            if name not in self.evaluators():
                raise BadRequest(
                    f"no verdicts of evaluator {name} in the store (it has: {', '.join(self.evaluators())})"
                )
            if len(self._indexes) >= EVALUATORS_KEPT:
                raise BadRequest(
                    f"at most {EVALUATORS_KEPT} evaluators are followed at once: {', '.join(self._indexes)}"
                )
            self._indexes[name] = EpisodeIndex(self.store, name)
            self.changes.bump()
        return self._indexes[name]

    def progress(self, evaluator: str | None = None) -> dict[str, int]:
        """How much of the store the index under ``evaluator`` holds."""
        index = self.index(evaluator)
        done = sum(index.indexed.get(run) == mark for run, mark in self.listing.runs.items())
        return {"runs_indexed": done, "runs_total": len(self.listing.runs)}

    def live(self, run_id: str) -> bool:
        """True when the run's files changed in the last ``LIVE_S`` seconds."""
        return time.monotonic() - self.last_change.get(run_id, -LIVE_S) < LIVE_S

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            busy = self._pass()
            took = time.monotonic() - started
            self._stop.wait(0 if busy else min(SLOWEST_POLL_S, max(POLL_S, 2 * took)))

    def _pass(self) -> bool:
        """List the store, follow what changed; True while indexing work is left."""
        try:
            self._follow(list_store(self.store))
            busy = any(self._index_some(index) for index in list(self._indexes.values()))
            self.problem = None
            return busy
        except MminaError as exc:
            self.problem = str(exc)
        except Exception as exc:  # noqa: BLE001 - the thread must go on; the page shows the reason
            log.exception("reading the store failed")
            self.problem = f"{type(exc).__name__}: {first_line(exc)}"
        return False

    def _follow(self, listing: Listing) -> None:
        old = self.listing
        if listing == old:
            return
        self.catalog.refresh()  # a connection's views read the files listed when it was made
        now = time.monotonic()
        for run, mark in listing.runs.items():
            if old.runs.get(run) != mark:
                self.catalog.forget(run)
                if self.listed.is_set():
                    self.last_change[run] = now
        self.listing = listing
        self.listed.set()
        self.changes.bump()

    def _index_some(self, index: EpisodeIndex) -> bool:
        """Index the runs whose files changed (those already shown first, then the newest), for
        about ``WORK_S``; True when some are left for the next pass."""
        runs = self.listing.runs
        for gone in set(index.indexed) - set(runs):
            index.drop_run(gone)
        pending = sorted(
            (r for r, mark in runs.items() if index.indexed.get(r) != mark),
            key=lambda r: (r not in index.indexed, _newest_first(r)),
        )
        deadline = time.monotonic() + WORK_S
        for run in pending:
            if time.monotonic() > deadline:
                return True
            try:
                index.index_run(run, runs[run])
                self.run_problems.pop(run, None)
            except MminaError as exc:
                self.run_problems[run] = str(exc)
                index.indexed[run] = runs[run]  # not again until its files change
            self.changes.bump()
        return False


def _newest_first(run_id: str) -> tuple[int, ...]:
    """Sort key putting later run ids first (default ids start with the date and time)."""
    return tuple(-ord(c) for c in run_id)
