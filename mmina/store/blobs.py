"""Content-addressed blobs, packed many to a Parquet file and stored once per content.

A writer streams the blobs of one episode into one pack (a row group per flush, so one
step's screenshot is cheap to fetch) and skips every blob whose hash the store already
holds. Two writers that see the same new content at the same moment may both pack it;
the copies are identical by construction, so readers take any.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mmina.errors import StoreError
from mmina.store.schema import BLOBS
from mmina.store.files import fsync_and_rename, read_file, with_metadata
from mmina.store.layout import data_files, file_stem, tmp_path

ROW_GROUP_BYTES = 1 << 20


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobIndex:
    """Which pack holds each blob; refreshed incrementally by reading only new packs' hashes.

    Only packs of committed episodes count: a pack whose episode never committed (writer
    killed between renames) is never referenced, so ``store verify`` may call it an orphan.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location: dict[str, str] = {}
        self._seen: set[Path] = set()

    def refresh(self, committed: set[str]) -> None:
        """Index the packs not seen yet whose stem is committed (see ``Store.committed_stems``)."""
        for path in data_files(self.root, BLOBS):
            if path not in self._seen and file_stem(path) in committed:
                self.add_pack(path, read_file(path, BLOBS, columns=["sha256"]).column("sha256").to_pylist())

    def add_pack(self, path: Path, hashes: Iterable[str]) -> None:
        relative = path.relative_to(self.root).as_posix()
        for digest in hashes:
            self.location.setdefault(digest, relative)
        self._seen.add(path)

    def __contains__(self, digest: str) -> bool:
        return digest in self.location


class PackWriter:
    """Streams new blobs into a hidden pack file; ``commit`` renames it into place."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.tmp = tmp_path(final)
        self.hashes: list[str] = []
        self._buffer: list[tuple[str, str, bytes]] = []
        self._buffered_bytes = 0
        self._writer: pq.ParquetWriter | None = None

    def add(self, digest: str, media_type: str, data: bytes) -> None:
        self.hashes.append(digest)
        self._buffer.append((digest, media_type, data))
        self._buffered_bytes += len(data)
        if self._buffered_bytes >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the buffered blobs as one row group (the unit a reader fetches)."""
        if not self._buffer:
            return
        if self._writer is None:
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.tmp, with_metadata(BLOBS, BLOBS.schema), compression="zstd")
        digests, types, blobs = zip(*self._buffer)
        batch = pa.table(
            [list(digests), list(types), [len(b) for b in blobs], list(blobs)], schema=BLOBS.schema
        )
        self._writer.write_table(batch)
        self._buffer, self._buffered_bytes = [], 0

    def commit(self) -> Path | None:
        """Finish the pack and make it visible; None when the episode had no new blob."""
        self.flush()
        if self._writer is None:
            return None
        self._writer.close()
        if self.final.exists():
            self.tmp.unlink(missing_ok=True)
            raise StoreError(f"refusing to overwrite {self.final}: the store is append-only")
        fsync_and_rename(self.tmp, self.final)
        return self.final

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.tmp.unlink(missing_ok=True)


def read_blobs(root: Path, digests: Iterable[str], packs: Iterable[str] | None = None) -> dict[str, bytes]:
    """Fetch blobs by hash; ``packs`` (relative paths) narrows the search when known."""
    wanted = set(digests)
    paths = [root / p for p in packs] if packs is not None else data_files(root, BLOBS)
    found: dict[str, bytes] = {}
    for path in paths:
        if not wanted - found.keys():
            break
        table = pq.read_table(path, columns=["sha256", "data"], filters=[("sha256", "in", list(wanted - found.keys()))])
        found.update(zip(table.column("sha256").to_pylist(), table.column("data").to_pylist()))
    return found
