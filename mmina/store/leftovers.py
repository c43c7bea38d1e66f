"""Leftovers of writers that are gone, and their removal.

A writer killed at the wrong moment leaves:

* on a local disk, a hidden temporary file (``.<name>.<host>.<pid>.<nonce>.tmp``). Every
  writer holds an ``flock`` on its temporary file until it commits or aborts, and the
  kernel drops it when the process dies, however it dies: a temporary file nobody holds
  (and whose process, on this host, no longer runs) is a leftover (``backends.py``);
* on S3, an incomplete multipart upload (a pack larger than the client's part size), a
  leftover once older than ``UPLOAD_GRACE_S``: object stores know no processes;
* between its renames or PUTs, whole steps, requests or pack files of a stem that has no
  ``episodes`` file: orphans. On a disk every commit holds the store's commit lock
  (shared), so while this module holds it exclusively no commit is under way and every
  orphan is one; on an object store an orphan older than ``ORPHAN_GRACE_S`` is one, since a
  writer gives up a commit that took longer than ``COMMIT_DEADLINE_S`` (``writers.py``).

Leftovers are removed by ``mmina store verify --repair``, and automatically whenever a
process starts writing to a store (:func:`remove_leftovers` from ``Store.ensure_writable``).
Orphans are kept while an ``episodes`` batch file cannot be read: the episodes it holds
are unknown, and their files may be among what looks orphaned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from mmina.errors import StoreError
from mmina.store.layout import COMMIT_LOCK, data_files, file_stem, is_batch
from mmina.store.schema import BLOBS, EPISODES, REQUESTS, STEPS
from mmina.store.writable import WritableStore
from mmina.store.writers import ORPHAN_GRACE_S

EPISODE_FILES = (STEPS, REQUESTS, BLOBS)
"""Tables whose files count only when an ``episodes`` file of their stem exists."""


@dataclass(frozen=True)
class Leftover:
    path: str
    kind: str
    """``partial`` (a temporary file), ``upload`` (a multipart upload) or ``orphan``."""
    message: str


def orphans(store: WritableStore) -> tuple[list[PurePath], bool]:
    """Files of the episode tables whose stem is not committed, and whether they are surely
    orphans (False while a batch ``episodes`` file cannot be read)."""
    committed = store.committed_stems()
    unknown = any(is_batch(p) and str(p) in store.skipped for p in data_files(store.backend, EPISODES))
    found = [
        p
        for table in EPISODE_FILES
        for p in data_files(store.backend, table)
        if file_stem(p) not in committed
    ]
    return found, not unknown


def remove_leftovers(store: WritableStore, wait: bool) -> list[Leftover]:
    """Remove what writers that are gone left behind; what was removed. On a disk, orphans
    are removed under the exclusive commit lock: ``wait`` waits for it (``verify --repair``),
    otherwise orphans are left alone while a commit holds it."""
    removed = [
        Leftover(
            str(item.path),
            "upload" if not store.backend.local else "partial",
            f"left by {item.writer}, which is gone",
        )
        for item in store.backend.unfinished()
        if not item.alive and store.backend.drop_unfinished(item)
    ]
    if store.backend.local and wait:
        with store.commit_lock(exclusive=True):
            return removed + _remove_orphans(store, grace_s=0)
    if store.backend.local:
        with store.backend.try_lock(COMMIT_LOCK) as locked:
            return removed + (_remove_orphans(store, grace_s=0) if locked else [])
    return removed + _remove_orphans(store, grace_s=ORPHAN_GRACE_S)


def _remove_orphans(store: WritableStore, grace_s: float) -> list[Leftover]:
    found, sure = orphans(store)
    if not sure:
        return []
    removed = []
    for path in found:
        if grace_s and store.backend.age_s(path) < grace_s:
            continue
        try:
            store.backend.remove(path)
        except StoreError:
            continue  # e.g. a read-only store: verify still reports it
        removed.append(
            Leftover(str(path), "orphan", f"a file of {file_stem(path)}, which was never committed")
        )
    return removed
