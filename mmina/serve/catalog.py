"""What the server reads from the store, and how it keeps reading it cheap.

One DuckDB connection holds the store's views for the server's life (each request queries
through a cursor of its own); it is made again when the store's files change (the SQL
sandbox gives a connection the files listed when it was made, and no others). What concerns
one episode is read through a connection whose views see that episode's run only (a few
runs' are kept), so it costs the same in a store of one run or of a thousand. Committed episodes
never change (the store is append-only), so an episode's rows, steps and requests are kept for a
while once read, and so are recent blobs and painted set-of-marks images; verdicts, which a
rescore may add, are always read afresh.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mmina.analysis.data import query
from mmina.analysis.viewer import EPISODES_SQL, STEPS_SQL, VERDICTS_SQL, step_image
from mmina.errors import MminaError, not_found
from mmina.serve.params import NotFound
from mmina.store import Store
from mmina.store.blobs import pack_directory, read_row_group
from mmina.store.views import StoreConnection, connect

EPISODES_KEPT = 64
RUNS_KEPT = 16
WARMED_AT_ONCE = 4
"""Runs whose connections a page of episodes makes ahead (fewer than ``RUNS_KEPT``)."""
RUN_VIEWS = ("tasks", "episodes", "steps", "requests", "scores", "latest_scores")
"""The views a run's connection makes (each costs its binding): what the viewer reads."""
BLOB_BYTES_KEPT = 96 << 20
DIRECTORY_BYTES_KEPT = 64 << 20
"""Pack directories kept, at about 150 bytes a blob (a hash, its row group, the dict's share)."""
REQUESTS_SQL = """
SELECT seq, step_index, method, url, status, mime_type, time_ms, request_headers, response_headers, request_body,
       request_body_size, response_body, response_body_size, redirect_url, replay_match, replay_source_episode,
       replay_source_seq
FROM requests WHERE episode_id = $episode ORDER BY seq
"""
RUN_OF_SQL = "SELECT run_id FROM episodes WHERE episode_id = $episode"
Key = TypeVar("Key")
Value = TypeVar("Value")


class Kept(Generic[Key, Value]):
    """A least-recently-used map bounded by a total size (each value's ``weight``)."""

    def __init__(self, budget: int) -> None:
        self.budget, self.used = budget, 0
        self._items: OrderedDict[Key, tuple[Value, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Key) -> Value | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def drop(self, key: Key) -> None:
        with self._lock:
            found = self._items.pop(key, None)
            if found is not None:
                self.used -= found[1]

    def put(self, key: Key, value: Value, weight: int = 1) -> Value:
        with self._lock:
            if key not in self._items and weight <= self.budget:
                self._items[key] = (value, weight)
                self.used += weight
            while self.used > self.budget:
                _, (_, dropped) = self._items.popitem(last=False)
                self.used -= dropped
        return value


@dataclass(frozen=True)
class StoredEpisode:
    """An episode as the viewer reads it: its row, its steps in order, its requests."""

    row: dict[str, Any]
    steps: list[dict[str, Any]]
    requests: list[dict[str, Any]]

    @property
    def run_id(self) -> str:
        return self.row["run_id"]

    def step(self, index: int) -> dict[str, Any]:
        found = next((s for s in self.steps if s["step_index"] == index), None)
        if found is None:
            raise NotFound(f"episode {self.row['episode_id']} has no step {index} (it has {len(self.steps)})")
        return found


class Catalog:
    """The server's reading side over one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._db = connect(store)
        self._runs: Kept[str, StoreConnection] = Kept(RUNS_KEPT)
        self._warming = ThreadPoolExecutor(1, thread_name_prefix="mmina-serve-warm")
        self._episodes: Kept[str, StoredEpisode] = Kept(EPISODES_KEPT)
        self._blobs: Kept[str, bytes] = Kept(BLOB_BYTES_KEPT)
        self._packs: Kept[str, dict[str, int]] = Kept(DIRECTORY_BYTES_KEPT)

    def refresh(self) -> None:
        """Views made again over the files the store holds now. Queries under way finish on
        the old connection."""
        self._db = connect(self.store)

    def forget(self, run_id: str) -> None:
        """The run's files changed: its connection is made again when next needed."""
        self._runs.drop(run_id)

    def warm(self, runs: Sequence[str]) -> None:
        """Make the runs' connections in the background (one at a time), so that opening an
        episode listed on a page does not wait for its run's views."""
        for run in list(dict.fromkeys(runs))[:WARMED_AT_ONCE]:
            if self._runs.get(run) is None:
                self._warming.submit(self._connection, run)

    def _connection(self, run_id: str | None) -> StoreConnection:
        if run_id is None:
            return self._db
        found = self._runs.get(run_id)
        return found or self._runs.put(run_id, connect(self.store, [run_id], RUN_VIEWS))

    @contextmanager
    def cursor(self, run_id: str | None = None) -> Iterator[StoreConnection]:
        """A cursor for one request (DuckDB cursors are per thread), over the whole store or,
        with ``run_id``, over that run only."""
        current = self._connection(run_id)
        cursor = StoreConnection(current.connection.cursor(), current.broken)
        try:
            yield cursor
        finally:
            cursor.close()

    def rows(
        self, sql: str, params: dict[str, Any] | None = None, run_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Rows of one query over the store's views (or over one run's). A query that fails is
        tried once more on new views: the store may have changed under the old ones (an
        object store's listings, kept a few seconds, may name a file its lookups miss)."""
        try:
            with self.cursor(run_id) as db:
                return query(db, sql, params or {})
        except MminaError:
            self.forget(run_id) if run_id else self.refresh()
            with self.cursor(run_id) as db:
                return query(db, sql, params or {})

    def run_of(self, episode_id: str) -> str:
        found = self.rows(RUN_OF_SQL, {"episode": episode_id})
        if not found:
            raise NotFound(not_found("episode", episode_id, str(self.store.root)))
        return found[0]["run_id"]

    def episode(self, episode_id: str, run_id: str | None = None) -> StoredEpisode:
        """The episode's rows; ``run_id``, when known, saves looking it up."""
        kept = self._episodes.get(episode_id)
        if kept is not None:
            return kept
        run = run_id or self.run_of(episode_id)
        listed = {"episodes": [episode_id]}
        episodes = {e["episode_id"]: e for e in self.rows(EPISODES_SQL, listed, run)}
        steps, requests = (
            self.rows(STEPS_SQL, listed, run),
            self.rows(REQUESTS_SQL, {"episode": episode_id}, run),
        )
        if episode_id not in episodes:
            raise NotFound(not_found("episode", episode_id, str(self.store.root)))
        return self._episodes.put(episode_id, StoredEpisode(episodes[episode_id], steps, requests))

    def verdicts(self, episode: StoredEpisode) -> list[dict[str, Any]]:
        """The episode's current verdicts (read each time: a rescore adds new ones)."""
        return self.rows(VERDICTS_SQL, {"episodes": [episode.row["episode_id"]]}, episode.run_id)

    def blobs(self, digests: Sequence[str], packs: Sequence[str] | None) -> dict[str, bytes]:
        """Blobs by hash. With the packs known, a blob costs one row group of its pack (whose
        other blobs are kept too: often the next steps'); else every pack is searched."""
        found = {d: b for d in digests if (b := self._blobs.get(d)) is not None}
        missing = [d for d in digests if d not in found]
        if missing and packs is None:
            for digest, data in self.store.read_blobs(missing).items():
                found[digest] = self._blobs.put(digest, data, len(data))
        for pack in packs or ():
            missing = [d for d in missing if d not in found]
            directory = self._directory(pack) if missing else {}
            for group in sorted({directory[d] for d in missing if d in directory}):
                for digest, data in read_row_group(self.store.backend, pack, group).items():
                    self._blobs.put(digest, data, len(data))
                    if digest in missing:
                        found[digest] = data
        return found

    def _directory(self, pack: str) -> dict[str, int]:
        """The pack's row group of each of its blobs (kept: packs are written once)."""
        kept = self._packs.get(pack)
        if kept is None:
            kept = pack_directory(self.store.backend, pack)
            self._packs.put(pack, kept, 150 * len(kept))
        return kept

    def step_image(self, episode: StoredEpisode, index: int) -> tuple[bytes, str] | None:
        """The step's set-of-marks image (stored, else painted again from its marks), else its
        screenshot, with an ETag naming what it was made from; None without a screenshot."""
        row = episode.step(index)
        digests = [d for d in (row["screenshot_som"], row["screenshot"]) if d]
        if not digests:
            return None
        tag = hashlib.sha256(json.dumps([digests, row["marks"]], default=str).encode()).hexdigest()[:32]
        painted = self._blobs.get(f"painted:{tag}")
        if painted is None:
            image = step_image(row, self.blobs(digests, episode.row["blob_packs"]))
            if image is None:
                return None
            painted = self._blobs.put(f"painted:{tag}", image, len(image))
        return painted, tag
