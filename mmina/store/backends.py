"""Where a store lives: a local folder, or a prefix of an object store (``s3://bucket/prefix``).

The store's code reads and writes only through a :class:`Backend`, so one commit protocol
serves both. Its one primitive for writing is :meth:`Backend.create`: a :class:`NewFile` that
becomes visible whole at ``commit``, never replacing a file of the same name, and leaves
nothing visible when aborted or when its process dies. On a local disk that is a hidden
temporary file, fsynced and renamed; on an object store, where there is no rename, a
conditional PUT of the whole object at its final key (see :mod:`mmina.store.objects`).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import re
import socket
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Protocol, TypeVar

from mmina.errors import AlreadyExistsError, NotAStoreError, StoreError, first_line

Result = TypeVar("Result")
_TMP_NAME = re.compile(r"^\.(?P<final>.+)\.(?P<host>[^.]+)\.(?P<pid>\d+)\.(?P<nonce>[0-9a-f]+)\.tmp$")
HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]) or "host"


def worker_name() -> str:
    """``host:pid`` of this process, recorded with what it writes."""
    return f"{HOST}:{os.getpid()}"


class NewFile(Protocol):
    """A file being written: invisible until :meth:`commit`, gone after :meth:`abort`."""

    sink: Any
    """What pyarrow writes to: a local path, or a binary stream."""

    def write(self, data: bytes) -> None:
        """Append bytes (for files that are not written by pyarrow)."""

    def commit(self) -> int:
        """Make the file visible whole and return its size in bytes; :class:`AlreadyExistsError`
        when its name is taken."""

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
    def remove(self, path: PurePath) -> None:
        """Delete a file (``store verify --repair`` and the removal of leftovers only)."""

    @abstractmethod
    def age_s(self, path: PurePath) -> float:
        """Seconds since the file was last written."""

    @abstractmethod
    def unfinished(self) -> list[Unfinished]:
        """What writers started and have not committed: in progress, or left by a writer that is gone."""

    @abstractmethod
    def drop_unfinished(self, item: Unfinished) -> bool:
        """Remove a leftover of a writer that is gone (checked again first); False if it was not."""

    def check_folder(self, path: PurePath) -> None:  # noqa: B027 (a no-op where folders exist)
        """Refuse a file where the store keeps a folder (object stores have no folders)."""

    def try_lock(self, name: str) -> AbstractContextManager[bool]:
        """The exclusive lock ``name`` if it is free now (yields True), else nothing (False);
        True on backends without locks."""
        return nullcontext(True)

    @abstractmethod
    def reading_filesystem(self) -> tuple[Any, str]:
        """The fsspec filesystem to read the store's files through (DuckDB's sandbox does), and
        the store's root as that filesystem names it."""

    def listing(self) -> dict[str, dict[str, Any]]:
        """Details (size, date) of every file, by that filesystem's name, where one listing is
        cheaper than asking file by file; empty where it is not (a local disk)."""
        return {}


def write_error(root: PurePath, exc: OSError) -> StoreError:
    """A failed write to a local store as one line: a read-only store, a folder replaced by
    a file, a full disk."""
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    read_only = isinstance(exc, PermissionError) or exc.errno == errno.EROFS
    hint = ": the store can be read but not written" if read_only else ""
    return StoreError(f"cannot write to the store {root}: {exc.strerror or first_line(exc)}{where}{hint}")


def _on_disk(method: Callable[..., Result]) -> Callable[..., Result]:
    """Turn what the local disk raises while writing into one clear :class:`StoreError`."""

    @functools.wraps(method)
    def call(self: LocalBackend, *args: Any, **kwargs: Any) -> Result:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise write_error(self.root, exc) from None

    return call


class LocalBackend(Backend):
    """A folder on a local disk: write to a hidden name, fsync, rename; ``flock`` for locks."""

    local = True
    root: Path

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

    def check_folder(self, path: PurePath) -> None:
        if Path(path).exists() and not Path(path).is_dir():
            raise StoreError(
                f"{path} is a file where the store keeps a folder: the store is damaged "
                f"(move the file away; see `mmina store verify`)"
            )

    def files(self, base: PurePath, depth: int) -> list[PurePath]:
        self.check_folder(base)
        folders = [Path(base)]
        for _ in range(depth - 1):
            folders = _scan(folders, folders=True)
        return [*_scan(folders, folders=False)]

    def size(self, path: PurePath) -> int:
        return Path(path).stat().st_size

    def read_bytes(self, path: PurePath) -> bytes:
        return Path(path).read_bytes()

    @_on_disk
    def create(self, path: PurePath) -> NewFile:
        return LocalNewFile(Path(path))

    @_on_disk
    def replace(self, path: PurePath, data: bytes) -> None:
        new = LocalNewFile(Path(path))
        new.write(data)
        new.publish(os.replace)

    @contextmanager
    def lock(self, name: str, exclusive: bool) -> Iterator[None]:
        """An ``flock`` on a file in the store folder (made first: the store may be new)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle = open(self.root / name, "a")
        except OSError as exc:
            raise write_error(self.root, exc) from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def reading_filesystem(self) -> tuple[Any, str]:
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem(), os.path.realpath(self.root)

    @_on_disk
    def remove(self, path: PurePath) -> None:
        Path(path).unlink(missing_ok=True)

    def age_s(self, path: PurePath) -> float:
        return time.time() - Path(path).stat().st_mtime

    def unfinished(self) -> list[Unfinished]:
        """The hidden temporary files of writers, each with whether its writer still holds it."""
        found = []
        for path in sorted(self.root.rglob(".*.tmp")):
            match = _TMP_NAME.match(path.name)
            if match:
                writer = f"{match['host']}:{match['pid']}"
                found.append(Unfinished(path, writer, _held(path, match["host"], int(match["pid"]))))
        return found

    @_on_disk
    def drop_unfinished(self, item: Unfinished) -> bool:
        """Delete a temporary file while holding its lock, so that no writer can hold it then."""
        try:
            fd = os.open(item.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        try:
            match = _TMP_NAME.match(Path(item.path).name)
            if match is None or _held(Path(item.path), match["host"], int(match["pid"]), locked_by_us=True):
                return False
            os.unlink(item.path)
            return True
        finally:
            os.close(fd)

    @contextmanager
    def try_lock(self, name: str) -> Iterator[bool]:
        try:
            handle = open(self.root / name, "a")
        except OSError:
            yield False  # a read-only store: nothing can be repaired there
            return
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


TMP_GRACE_S = 30.0
"""A temporary file this young may be one whose writer has created it and not locked it yet."""


def _held(path: Path, host: str, pid: int, locked_by_us: bool = False) -> bool:
    """Whether a writer may still be writing ``path``. Every writer holds the file's lock
    from just after it creates the file until it commits or aborts, and the kernel drops
    the lock when the process dies, however it dies. On this host the writer's process is
    asked too (in the instant between creating and locking, or for a writer of an older
    mmina that did not lock); from another host, a file too young to tell is left alone."""
    try:
        if not locked_by_us and _locked(path):
            return True
        young = time.time() - path.stat().st_mtime < TMP_GRACE_S
    except FileNotFoundError:
        return True  # committed or removed meanwhile: not a leftover
    return _process_runs(pid) if host == HOST else young


def _locked(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalNewFile:
    """A hidden temporary file next to its final name, renamed into place at commit. The
    writer holds an ``flock`` on it until then: a file nobody holds is a leftover."""

    def __init__(self, final: Path) -> None:
        self.final = final
        final.parent.mkdir(parents=True, exist_ok=True)
        self.sink = tmp_path(final)
        self._fd: int | None = os.open(self.sink, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def write(self, data: bytes) -> None:
        try:
            with open(self.sink, "ab") as handle:
                handle.write(data)
        except OSError as exc:
            raise write_error(self.final.parent, exc) from None

    def commit(self) -> int:
        """Make the file durable before it becomes visible, then rename (atomic on POSIX)."""
        if self.final.exists():
            self.abort()
            raise AlreadyExistsError(f"refusing to overwrite {self.final}: the store is append-only")
        return self.publish(os.rename)

    def publish(self, move: Callable[[Path, Path], None]) -> int:
        """fsync, ``move`` into place, release the lock; the size in bytes."""
        assert self._fd is not None
        try:
            os.fsync(self._fd)
            size = os.fstat(self._fd).st_size
            move(self.sink, self.final)
        except OSError as exc:
            self.abort()
            raise write_error(self.final.parent, exc) from None
        self._release()
        return size

    def abort(self) -> None:
        self.sink.unlink(missing_ok=True)
        self._release()

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def tmp_path(final: Path) -> Path:
    """A hidden name next to ``final``, unique to this process, never matched by view globs."""
    return final.parent / f".{final.name}.{HOST}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"


@dataclass(frozen=True)
class Unfinished:
    """A file a writer started and has not committed: a hidden temporary file on a disk, an
    incomplete multipart upload on an object store."""

    path: PurePath
    writer: str
    """Who started it: ``host:pid``, or the upload's id."""
    alive: bool
    """Its writer may still be at work (or it is too young to tell): not to be touched."""


def _scan(parents: list[Path], folders: bool) -> list[Path]:
    """The folders (or the files) directly in each of ``parents`` that exists."""
    return [
        Path(e.path)
        for parent in parents
        if parent.is_dir()
        for e in os.scandir(parent)
        if e.is_dir() == folders
    ]
