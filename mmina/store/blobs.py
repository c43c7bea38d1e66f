"""Content-addressed blobs, packed many to a Parquet file and stored once per content.

A writer streams the blobs of one episode into one pack (a row group per flush, so one
step's screenshot is cheap to fetch) and skips every blob whose hash the store already
holds. Two writers that see the same new content at the same moment may both pack it;
the copies are identical by construction, so readers take any.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import PurePath

import pyarrow as pa
import pyarrow.parquet as pq

from mmina.errors import CorruptFileError
from mmina.store.backends import Backend, NewFile
from mmina.store.files import Written, decode_threads, read_failure, read_file, with_metadata
from mmina.store.layout import data_files, file_stem
from mmina.store.schema import BLOBS

ROW_GROUP_BYTES = 1 << 20
Skip = Callable[[PurePath, str], None]
"""Called with a pack that cannot be read and why (``Store.skip_file``)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobIndex:
    """Which pack holds each blob; refreshed incrementally by reading only new packs' hashes.

    Only packs of committed episodes count: a pack whose episode never committed (writer
    killed between renames) is never referenced, so ``store verify`` may call it an orphan.
    """

    def __init__(self, backend: Backend, skip: Skip) -> None:
        self.backend, self.skip = backend, skip
        self.location: dict[str, str] = {}
        self._seen: set[PurePath] = set()

    def refresh(self, committed: set[str]) -> None:
        """Index the packs not seen yet whose stem is committed (see ``Store.committed_stems``);
        an unreadable pack is skipped (its blobs are stored again when met again)."""
        for path in data_files(self.backend, BLOBS):
            if path not in self._seen and file_stem(path) in committed:
                try:
                    hashes = read_file(path, BLOBS, columns=["sha256"], filesystem=self.backend.arrow).column(
                        "sha256"
                    )
                except CorruptFileError as exc:
                    self.skip(path, exc.reason)
                    self._seen.add(path)
                    continue
                self.add_pack(path, hashes.to_pylist())

    def add_pack(self, path: PurePath, hashes: Iterable[str]) -> None:
        relative = path.relative_to(self.backend.root).as_posix()
        for digest in hashes:
            self.location.setdefault(digest, relative)
        self._seen.add(path)

    def __contains__(self, digest: str) -> bool:
        return digest in self.location


class PackWriter:
    """Streams new blobs into a pack that stays invisible until ``commit`` (see ``Backend.create``)."""

    def __init__(self, backend: Backend, final: PurePath) -> None:
        self.backend, self.final = backend, final
        self.hashes: list[str] = []
        self._buffer: list[tuple[str, str, bytes]] = []
        self._buffered_bytes = 0
        self._file: NewFile | None = None
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
            self._file = self.backend.create(self.final)
            self._writer = pq.ParquetWriter(
                self._file.sink, with_metadata(BLOBS, BLOBS.schema), compression="zstd"
            )
        digests, types, blobs = zip(*self._buffer)
        batch = pa.table(
            [list(digests), list(types), [len(b) for b in blobs], list(blobs)], schema=BLOBS.schema
        )
        self._writer.write_table(batch)
        self._buffer, self._buffered_bytes = [], 0

    def commit(self) -> Written | None:
        """Finish the pack and make it visible; None when the episode had no new blob."""
        self.flush()
        if self._writer is None or self._file is None:
            return None
        self._writer.close()
        return Written(self.final, len(self.hashes), self._file.commit())

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None:
            self._file.abort()
            self._file = None


def read_blobs(
    backend: Backend, digests: Iterable[str], packs: Iterable[str] | None, skip: Skip
) -> dict[str, bytes]:
    """Fetch blobs by hash; ``packs`` (relative paths) narrows the search when known. Only the
    row groups that may hold them are read (range reads, on a disk or an object store). An
    unreadable pack is skipped (``skip``): its blobs are missing from the result."""
    wanted = set(digests)
    paths = [backend.root / p for p in packs] if packs is not None else data_files(backend, BLOBS)
    found: dict[str, bytes] = {}
    for path in paths:
        if not wanted - found.keys():
            break
        try:
            table = pq.read_table(
                str(path),
                columns=["sha256", "data"],
                filesystem=backend.arrow,
                filters=[("sha256", "in", list(wanted - found.keys()))],
            )
        except (OSError, pa.ArrowException) as exc:
            failure = read_failure(path, exc)
            if not isinstance(failure, CorruptFileError) or isinstance(exc, FileNotFoundError):
                raise failure from None
            skip(path, failure.reason)
            continue
        found.update(zip(table.column("sha256").to_pylist(), table.column("data").to_pylist()))
    return found


def pack_directory(backend: Backend, pack: str) -> dict[str, int]:
    """Which row group of a pack (a path relative to the store) holds each of its blobs. Only
    the hashes are read: with it, one blob costs one row group, where a filter on the hash
    (random, so no row group's statistics exclude it) reads them all."""
    file = pq.ParquetFile(str(backend.root / pack), filesystem=backend.arrow)
    found: dict[str, int] = {}
    for group in range(file.num_row_groups):
        hashes = file.read_row_group(group, columns=["sha256"], use_threads=decode_threads(backend.arrow))
        for digest in hashes.column("sha256").to_pylist():
            found.setdefault(digest, group)
    return found


def read_row_group(backend: Backend, pack: str, group: int) -> dict[str, bytes]:
    """Every blob of one row group of a pack (what one flush of its writer put there: often
    one step's images, so the next steps' are in hand too)."""
    file = pq.ParquetFile(str(backend.root / pack), filesystem=backend.arrow)
    table = file.read_row_group(group, columns=["sha256", "data"], use_threads=decode_threads(backend.arrow))
    return dict(zip(table.column("sha256").to_pylist(), table.column("data").to_pylist()))


class PackReader:
    """Blobs by hash out of known packs, one row group at a time: each pack's directory (which
    row group holds which blob, :func:`pack_directory`) is read once and kept for the last
    ``keep`` packs, so reading an episode's blobs costs their row groups, never a scan of the
    whole pack (a filter on random hashes reads every row group). For readers that go through
    many episodes (exports); a pack that cannot be read is left to :func:`read_blobs`."""

    def __init__(self, backend: Backend, skip: Skip, keep: int = 8) -> None:
        self.backend, self.skip, self.keep = backend, skip, keep
        self._directories: dict[str, dict[str, int]] = {}

    def read(self, digests: Iterable[str], packs: Iterable[str]) -> dict[str, bytes]:
        wanted, found = set(digests), dict[str, bytes]()
        for pack in packs:
            missing = wanted - found.keys()
            if not missing:
                break
            try:
                directory = self._directory(pack)
                for group in sorted({directory[d] for d in missing if d in directory}):
                    found.update(
                        (d, b) for d, b in read_row_group(self.backend, pack, group).items() if d in wanted
                    )
            except (OSError, pa.ArrowException):
                found.update(read_blobs(self.backend, missing, [pack], self.skip))
        return found

    def _directory(self, pack: str) -> dict[str, int]:
        if pack not in self._directories:
            if len(self._directories) >= self.keep:
                self._directories.pop(next(iter(self._directories)))
            self._directories[pack] = pack_directory(self.backend, pack)
        return self._directories[pack]
