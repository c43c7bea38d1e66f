"""Writing episodes: one at a time while recording, or many at once (imports, synthetic stores).

Both writers follow one commit protocol. Every file a writer produces shares one stem: the
episode id for an :class:`EpisodeWriter`, a ``batch-…`` name for a :class:`BatchWriter`
(and for compacted files). Blobs stream into a pack that is not visible yet; ``commit``
makes the pack visible, then the ``steps`` and ``requests`` files, then the ``episodes``
file last (each appears whole: renamed into place on a disk, PUT whole and create-only on
an object store). That file is the commit point: a pack, steps or requests file counts only
when an ``episodes`` file of the same stem exists, so readers never see half an episode.
On a disk, commits hold the store's commit lock in shared mode, so compaction (exclusive)
never swaps files under a writer; object stores need no lock (they cannot be compacted).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from mmina.errors import StoreError
from mmina.store.backends import worker_name
from mmina.store.blobs import PackWriter, sha256
from mmina.store.files import to_arrow, write_new
from mmina.store.layout import batch_stem, data_name, table_dir
from mmina.store.manifest import manifest_metadata
from mmina.store.schema import BLOBS, EPISODES, REQUESTS, SCHEMA_VERSION, STEPS, Table
from mmina.store.writable import WritableStore

Row = dict[str, Any]
EPISODE_STEP_ROW_GROUP = 8
"""Rows per row group in one episode's steps file: one step's columns can be fetched alone."""
BATCH_STEP_ROW_GROUP = 256
"""Rows per row group in batch and compacted steps files: small enough to fetch one episode,
large enough that a million steps have a compact footer."""
COMMIT_DEADLINE_S = 600.0
"""An object-store commit slower than this is abandoned (see :func:`_check_deadline`)."""
S = TypeVar("S", bound=WritableStore)
"""The store a writer writes to (a :class:`~mmina.store.store.Store`), as its user holds it."""
ORPHAN_GRACE_S = 3600.0
"""Files of an uncommitted stem on an object store younger than this may be a commit under way."""


class _Writer(Generic[S]):
    """What both writers share: content-addressed blobs, and the ordered commit of files."""

    step_row_group = EPISODE_STEP_ROW_GROUP

    def __init__(self, store: S, run_id: str, stem: str) -> None:
        self.store, self.run_id, self.stem = store, run_id, stem
        self.index = store.blob_index
        self.pack = PackWriter(store.backend, store.root / BLOBS.name / data_name(stem, SCHEMA_VERSION))
        self._pending: set[str] = set()
        self._new_in_episode = False
        self._packs_in_episode: set[str] = set()
        self.closed = False

    def put_blob(self, data: bytes, media_type: str) -> str:
        """Store content once; returns its SHA-256, the reference other tables hold."""
        digest = sha256(data)
        if digest in self.index:
            self._packs_in_episode.add(self.index.location[digest])
            return digest
        if digest not in self._pending:
            self._pending.add(digest)
            self.pack.add(digest, media_type, data)
        self._new_in_episode = True
        return digest

    def _episode_packs(self) -> list[str]:
        """The packs holding the current episode's blobs; resets for the next episode."""
        packs = set(self._packs_in_episode)
        if self._new_in_episode:
            packs.add(self.pack.final.relative_to(self.store.root).as_posix())
        self._packs_in_episode, self._new_in_episode = set(), False
        return sorted(packs)

    def _commit(self, episodes: Sequence[Row], steps: Sequence[Row], requests: Sequence[Row]) -> None:
        """Make every file visible, the ``episodes`` file last (the commit point)."""
        try:
            with self.store.commit_lock(exclusive=False):
                self._write_files(episodes, steps, requests)
        except BaseException:
            self.pack.abort()
            raise
        self.closed = True

    def _write_files(self, episodes: Sequence[Row], steps: Sequence[Row], requests: Sequence[Row]) -> None:
        """The pack, steps and requests files, then the ``episodes`` file with their manifest."""
        backend, name = self.store.backend, data_name(self.stem, SCHEMA_VERSION)
        started, written = time.monotonic(), []
        pack = self.pack.commit()
        if pack is not None:
            self.index.add_pack(pack.path, self.pack.hashes)
            written.append(pack)
        children: tuple[tuple[Table, Sequence[Row], int | None], ...] = (
            (STEPS, steps, self.step_row_group),
            (REQUESTS, requests, None),
        )
        for table, rows, row_group in children:
            if rows:
                written.append(
                    write_new(
                        backend,
                        table_dir(backend.root, table, self.run_id) / name,
                        table,
                        to_arrow(table, rows),
                        row_group,
                    )
                )
        _check_deadline(self.store, self.stem, started)
        write_new(
            backend,
            table_dir(backend.root, EPISODES, self.run_id) / name,
            EPISODES,
            to_arrow(EPISODES, episodes),
            metadata=manifest_metadata(backend.root, written),
        )

    def abort(self) -> None:
        """Drop what was written: nothing of it becomes visible."""
        self.pack.abort()
        self.closed = True


def _check_deadline(store: WritableStore, stem: str, started: float) -> None:
    """On an object store, a commit whose files landed more than ``COMMIT_DEADLINE_S`` ago
    is not completed: ``store verify --repair`` removes the files of an uncommitted stem once
    they are ``ORPHAN_GRACE_S`` old, and must never remove those of a commit under way."""
    elapsed = time.monotonic() - started
    if not store.backend.local and elapsed > COMMIT_DEADLINE_S:
        raise StoreError(
            f"the commit of {stem} took {elapsed:.0f} s, more than {COMMIT_DEADLINE_S:.0f} s: it was not "
            f"completed (its files are left for `mmina store verify --repair`); record it again"
        )


class EpisodeWriter(_Writer[S]):
    """Collects one episode while it is recorded and commits it atomically."""

    def __init__(self, store: S, run_id: str, episode_id: str) -> None:
        super().__init__(store, run_id, episode_id)
        self.episode_id = episode_id
        self.steps: list[Row] = []
        self.requests: list[Row] = []

    def add_step(self, row: Row) -> None:
        self.steps.append({"episode_id": self.episode_id, **row})
        self.pack.flush()

    def add_requests(self, rows: Sequence[Row]) -> None:
        self.requests.extend({"episode_id": self.episode_id, **row} for row in rows)

    def commit(self, episode_row: Row) -> None:
        if self.store.episode_exists(self.episode_id):
            self.abort()
            raise StoreError(
                f"episode {self.episode_id} already exists in {self.store.root}: the store is append-only"
            )
        row = {
            "episode_id": self.episode_id,
            "blob_packs": self._episode_packs(),
            "worker": worker_name(),
            "n_requests": len(self.requests),
            **episode_row,
        }
        self._commit([row], self.steps, self.requests)


class BatchWriter(_Writer[S]):
    """Many episodes committed together as one file per table (imports, synthetic stores).

    Add each episode's blobs with :meth:`put_blob`, then the episode with :meth:`add_episode`;
    :meth:`commit` makes all of them visible at once.
    """

    step_row_group = BATCH_STEP_ROW_GROUP

    def __init__(self, store: S, run_id: str) -> None:
        super().__init__(store, run_id, batch_stem())
        self.episodes: list[Row] = []
        self.steps: list[Row] = []
        self.requests: list[Row] = []
        self._ids: set[str] = set()

    def add_episode(self, episode_row: Row, steps: Sequence[Row] = (), requests: Sequence[Row] = ()) -> None:
        """One episode: its ``episodes`` row (with ``episode_id``) and its step and request rows."""
        episode_id = episode_row["episode_id"]
        if episode_id in self._ids:
            raise StoreError(f"episode {episode_id} appears twice in one batch")
        self._ids.add(episode_id)
        self.episodes.append(
            {
                "blob_packs": self._episode_packs(),
                "worker": worker_name(),
                "n_requests": len(requests),
                **episode_row,
            }
        )
        self.steps.extend({**row, "episode_id": episode_id} for row in steps)
        self.requests.extend({**row, "episode_id": episode_id} for row in requests)

    def __len__(self) -> int:
        return len(self.episodes)

    def commit(self) -> None:
        existing = self._ids & self.store.committed_episode_ids()
        if existing:
            self.abort()
            raise StoreError(
                f"episode {min(existing)} already exists in {self.store.root}: the store is append-only"
            )
        if self.episodes:
            self._commit(self.episodes, self.steps, self.requests)
        else:
            self.abort()
