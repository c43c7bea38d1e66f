"""What writing episodes and clearing leftovers ask of a store: the part of
:class:`~mmina.store.store.Store` that ``writers.py`` and ``leftovers.py`` use.

A :class:`~mmina.store.store.Store` is one; the writers and the leftover cleanup take it through
this interface, so the store can build them without their modules importing it back.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import PurePath
from typing import Protocol

from mmina.store.backends import Backend
from mmina.store.blobs import BlobIndex


class WritableStore(Protocol):
    @property
    def backend(self) -> Backend: ...

    @property
    def root(self) -> PurePath: ...

    @property
    def skipped(self) -> dict[str, str]:
        """Files found unreadable, by path, with the reason (they are left alone)."""
        ...

    @property
    def blob_index(self) -> BlobIndex: ...

    def commit_lock(self, exclusive: bool) -> AbstractContextManager[None]: ...

    def episode_exists(self, episode_id: str) -> bool: ...

    def committed_episode_ids(self) -> set[str]: ...

    def committed_stems(self) -> set[str]: ...
