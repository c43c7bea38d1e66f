"""Where a store lives: a local folder, or a prefix of an object store (``s3://bucket/prefix``).

The store's code reads and writes only through a :class:`Backend`, so one commit protocol
serves both. Its one primitive for writing is :meth:`Backend.create`: a :class:`NewFile` that
becomes visible whole at ``commit``, never replacing a file of the same name, and leaves
nothing visible when aborted or when its process dies. On a local disk that is a hidden
temporary file, fsynced and renamed; on an object store, where there is no rename, a
conditional PUT of the whole object at its final key (see :mod:`mmina.store.objects`).
"""
from __future__ import annotations

import fcntl
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Protocol
from urllib.parse import urlsplit

from mmina.errors import AlreadyExistsError, NotAStoreError
from mmina.store.layout import HOST

_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+)://")
_TMP_NAME = re.compile(r"^\.(?P<final>.+\.parquet)\.(?P<host>[^.]+)\.(?P<pid>\d+)\.(?P<nonce>[0-9a-f]+)\.tmp$")


class NewFile(Protocol):
    """A file being written: invisible until :meth:`commit`, gone after :meth:`abort`."""

    sink: Any
    """What pyarrow writes to: a local path, or a binary stream."""

    def write(self, data: bytes) -> None:
        """Append bytes (for files that are not written by pyarrow)."""

    def commit(self) -> None:
        """Make the file visible whole; :class:`AlreadyExistsError` when its name is taken."""

    def abort(self) -> None:
        """Drop what was written."""


class Backend(ABC):
    """File access of one store: listing, reading, and writing files that appear whole."""

    root: PurePath
    local: bool
    arrow: Any = None
    """The pyarrow filesystem to read files through (None: the local one)."""

    @abstractmethod
    def names(self) -> list[str] | None:
        """Names directly under the root; None when there is nothing there yet."""

    @abstractmethod
    def exists(self, path: PurePath) -> bool: ...

    @abstractmethod
    def files(self, base: PurePath, depth: int) -> list[PurePath]:
        """The files exactly ``depth`` levels below ``base`` (1: in it), in no set order."""

    @abstractmethod
    def size(self, path: PurePath) -> int: ...

    @abstractmethod
    def read_bytes(self, path: PurePath) -> bytes: ...

    @abstractmethod
    def create(self, path: PurePath) -> NewFile: ...

    def put(self, path: PurePath, data: bytes) -> None:
        """Write a small file whole, never replacing one (:class:`AlreadyExistsError` if it exists)."""
        new = self.create(path)
        try:
            new.write(data)
            new.commit()
        except BaseException:
            new.abort()
            raise

    @abstractmethod
    def replace(self, path: PurePath, data: bytes) -> None:
        """Write a small file whole, replacing the old one (only the store marker is rewritten)."""

    @abstractmethod
    def lock(self, name: str, exclusive: bool) -> AbstractContextManager[None]:
        """A lock held across processes, or no lock where the backend needs none."""

    @abstractmethod
    def unfinished(self) -> list[TmpFile]:
        """Files a writer started and has not committed (in progress, or left by a killed one)."""

    def duckdb_filesystem(self) -> Any | None:
        """The fsspec filesystem DuckDB must read the files through (None: its own)."""
        return None


def open_backend(location: str | os.PathLike[str]) -> Backend:
    """A path (or ``file://`` URL) is a local folder; any other URL an object-store prefix."""
    text = os.fspath(location)
    found = _URL.match(text)
    if found is None:
        return LocalBackend(Path(text))
    if found["scheme"].lower() == "file":
        return LocalBackend(Path(urlsplit(text).path))
    from mmina.store.objects import ObjectBackend

    return ObjectBackend.from_url(text)


class LocalBackend(Backend):
    """A folder on a local disk: write to a hidden name, fsync, rename; ``flock`` for locks."""

    local = True

    def __init__(self, root: Path) -> None:
        self.root = root

    def names(self) -> list[str] | None:
        if not self.root.exists():
            return None
        if not self.root.is_dir():
            raise NotAStoreError(f"{self.root} is a file, not an mmina store directory")
        return [p.name for p in self.root.iterdir()]

    def exists(self, path: PurePath) -> bool:
        return Path(path).exists()

    def files(self, base: PurePath, depth: int) -> list[PurePath]:
        folders = [Path(base)]
        for _ in range(depth - 1):
            folders = _scan(folders, folders=True)
        return [*_scan(folders, folders=False)]

    def size(self, path: PurePath) -> int:
        return Path(path).stat().st_size

    def read_bytes(self, path: PurePath) -> bytes:
        return Path(path).read_bytes()

    def create(self, path: PurePath) -> NewFile:
        return LocalNewFile(Path(path))

    def replace(self, path: PurePath, data: bytes) -> None:
        tmp = tmp_path(Path(path))
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def lock(self, name: str, exclusive: bool) -> AbstractContextManager[None]:
        """An ``flock`` on a file in the store folder (made first: the store may be new)."""
        self.root.mkdir(parents=True, exist_ok=True)
        return _flock(self.root / name, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)

    def unfinished(self) -> list[TmpFile]:
        found = []
        for path in sorted(self.root.rglob(".*.tmp")):
            match = _TMP_NAME.match(path.name)
            if match:
                found.append(TmpFile(path, match["final"], match["host"], int(match["pid"])))
        return found


class LocalNewFile:
    """A hidden temporary file next to its final name, renamed into place at commit."""

    def __init__(self, final: Path) -> None:
        self.final = final
        final.parent.mkdir(parents=True, exist_ok=True)
        self.sink = tmp_path(final)

    def write(self, data: bytes) -> None:
        with open(self.sink, "ab") as handle:
            handle.write(data)

    def commit(self) -> None:
        """Make the file durable before it becomes visible, then rename (atomic on POSIX)."""
        if self.final.exists():
            self.abort()
            raise AlreadyExistsError(f"refusing to overwrite {self.final}: the store is append-only")
        fd = os.open(self.sink, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(self.sink, self.final)

    def abort(self) -> None:
        self.sink.unlink(missing_ok=True)


def tmp_path(final: Path) -> Path:
    """A hidden name next to ``final``, unique to this process, never matched by view globs."""
    return final.parent / f".{final.name}.{HOST}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"


@dataclass(frozen=True)
class TmpFile:
    path: PurePath
    final_name: str
    host: str
    pid: int

    @property
    def writer_alive(self) -> bool:
        """True when the writing process still runs on this host (its file is in progress)."""
        if self.host != HOST:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _scan(parents: list[Path], folders: bool) -> list[Path]:
    """The folders (or the files) directly in each of ``parents`` that exists."""
    return [Path(e.path) for parent in parents if parent.is_dir() for e in os.scandir(parent) if e.is_dir() == folders]


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
