"""Stores on object storage: any fsspec URL (``s3://bucket/prefix``, ``gs://…``, ``memory://…``).

Object stores have no rename, so nothing is ever written under a temporary key: a file is
spooled on this machine (in memory, then on local disk past ``SPOOL_BYTES``) and PUT whole
at its final key when its writer commits. A PUT, like a completed multipart upload, appears
whole or not at all, so a writer killed at any moment leaves only whole objects. Every PUT
is create-only (``pipe_file(mode="create")``): on S3 and S3-compatible servers s3fs sends it
with ``If-None-Match: *``, so a key that exists is never replaced, even by a writer on
another machine at the same instant; other filesystems check that the key is free just
before the PUT, and the random part of every stem keeps writers apart. No lock is taken:
commits need none, and compaction, the one operation that would, is refused here.

Credentials and the endpoint come from where the filesystem's own client looks (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` or
``AWS_ENDPOINT_URL_S3``, ``AWS_DEFAULT_REGION``, ``AWS_PROFILE``, ``~/.aws``), never from the
URL: a URL carrying credentials is refused, so none can reach a message, a log or the store.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager, nullcontext
from pathlib import PurePath, PurePosixPath
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pyarrow.fs import FSSpecHandler, PyFileSystem

from mmina.errors import AlreadyExistsError, MminaError, StoreError, StoreNotFoundError, first_line
from mmina.store.backends import Backend, NewFile, Unfinished

UPLOAD_GRACE_S = 6 * 3600
"""An incomplete multipart upload younger than this may belong to a writer still uploading."""
SPOOL_BYTES = 32 << 20
"""A file being written stays in memory up to this size, then spills to a local temporary file."""
BUCKETED = {"s3", "s3a", "gs", "gcs"}
"""Schemes whose first path part is a bucket that must exist before a store is made in it."""
EXTRA = {
    "s3": "pip install 'mmina[s3]'",
    "s3a": "pip install 'mmina[s3]'",
    "gs": "pip install gcsfs",
    "gcs": "pip install gcsfs",
}
CREDENTIALS_HINT = (
    "credentials and endpoint come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
    "AWS_ENDPOINT_URL, AWS_DEFAULT_REGION) or ~/.aws"
)
Result = TypeVar("Result")


class ObjectPath(PurePosixPath):
    """A key under an object-store URL. Its first part is the scheme (``s3:``), so ``str()``
    gives the URL back (``s3://bucket/key``), whatever path operation made it."""

    def __str__(self) -> str:
        text = super().__str__()
        scheme, slash, rest = text.partition("/")
        return f"{scheme}//{rest}" if slash and scheme.endswith(":") else text


def _remote(method: Callable[..., Result]) -> Callable[..., Result]:
    """Turn whatever the filesystem's client raises into one clear :class:`StoreError` line."""

    @functools.wraps(method)
    def call(self: ObjectBackend, *args: Any, **kwargs: Any) -> Result:
        try:
            return method(self, *args, **kwargs)
        except MminaError:
            raise
        except Exception as exc:  # noqa: BLE001 - network, credentials, endpoint: all reported alike
            raise self.access_error(exc) from None

    return call


class ObjectBackend(Backend):
    """A prefix of an object store, read and written through an fsspec filesystem."""

    local = False
    root: ObjectPath

    def __init__(self, fs: Any, root: ObjectPath) -> None:
        self.fs, self.root = fs, root
        self.scheme = root.parts[0].rstrip(":")
        self.arrow = PyFileSystem(FSSpecHandler(fs))
        self._root_key = fs._strip_protocol(str(root)).rstrip("/")

    @classmethod
    def from_url(cls, url: str) -> ObjectBackend:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            raise StoreError(f"the store URL must not carry credentials: {CREDENTIALS_HINT}")
        if parts.query or parts.fragment:
            raise StoreError(
                f"the store URL {parts.scheme}://{parts.netloc}{parts.path} takes no '?' or '#' part"
            )
        location = f"{parts.netloc}{parts.path}".strip("/")
        if not location:
            raise StoreError(
                f"the store URL {url!r} names no bucket: use e.g. {parts.scheme}://bucket/prefix"
            )
        scheme = parts.scheme.lower()
        return cls(_filesystem(scheme), ObjectPath(f"{scheme}:", location))

    def access_error(self, exc: BaseException) -> StoreError:
        if isinstance(exc, PermissionError):
            return StoreError(f"access to {self.root} denied: {first_line(exc)} ({CREDENTIALS_HINT})")
        return StoreError(
            f"cannot reach {self.root}: {type(exc).__name__}: {first_line(exc)} ({CREDENTIALS_HINT})"
        )

    @_remote
    def names(self) -> list[str] | None:
        try:
            entries = self.fs.ls(str(self.root), detail=False)
        except FileNotFoundError:
            entries = []
        if entries:
            return [PurePosixPath(entry).name for entry in entries]
        self._check_bucket()
        return None

    def _check_bucket(self) -> None:
        bucket = self.root.parts[1]
        if self.scheme in BUCKETED and not self.fs.exists(bucket):
            raise StoreNotFoundError(
                f"no bucket {bucket} for {self.root} (create it first; {CREDENTIALS_HINT})"
            )

    @_remote
    def exists(self, path: PurePath) -> bool:
        return self.fs.exists(str(path))

    @_remote
    def files(self, base: PurePath, depth: int) -> list[PurePath]:
        found = (self._path(key) for key in self.fs.find(str(base)))
        return [p for p in found if base in p.parents and len(p.relative_to(base).parts) == depth]

    def _path(self, key: str) -> ObjectPath:
        relative = self.fs._strip_protocol(key)[len(self._root_key) :].strip("/")
        return self.root / relative if relative else self.root

    @_remote
    def size(self, path: PurePath) -> int:
        return int(self.fs.size(str(path)))

    @_remote
    def read_bytes(self, path: PurePath) -> bytes:
        return self.fs.cat_file(str(path))

    def create(self, path: PurePath) -> NewFile:
        return ObjectNewFile(self, path)

    @_remote
    def put_new(self, path: PurePath, data: bytes) -> None:
        """One create-only PUT of the whole object (conditional where the filesystem can)."""
        try:
            self.fs.pipe_file(str(path), data, mode="create")
        except FileExistsError:
            raise AlreadyExistsError(f"refusing to overwrite {path}: the store is append-only") from None

    @_remote
    def replace(self, path: PurePath, data: bytes) -> None:
        self.fs.pipe_file(str(path), data)

    def lock(self, name: str, exclusive: bool) -> AbstractContextManager[None]:
        return nullcontext()

    @_remote
    def remove(self, path: PurePath) -> None:
        self.fs.rm_file(str(path))

    @_remote
    def age_s(self, path: PurePath) -> float:
        return time.time() - self.fs.modified(str(path)).timestamp()

    @_remote
    def unfinished(self) -> list[Unfinished]:
        """Incomplete multipart uploads under the prefix (a writer killed while uploading a pack
        larger than the client's part size); S3 only. Alive while younger than ``UPLOAD_GRACE_S``."""
        if not hasattr(self.fs, "call_s3"):
            return []
        bucket, _, prefix = self._root_key.partition("/")
        uploads = self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=f"{prefix}/").get(
            "Uploads", []
        )
        return [
            Unfinished(
                self._path(f"{bucket}/{u['Key']}"),
                f"upload {u['UploadId']}",
                time.time() - u["Initiated"].timestamp() < UPLOAD_GRACE_S,
            )
            for u in uploads
        ]

    @_remote
    def drop_unfinished(self, item: Unfinished) -> bool:
        if item.alive:
            return False
        bucket, _, key = self.fs._strip_protocol(str(item.path)).partition("/")
        self.fs.call_s3(
            "abort_multipart_upload", Bucket=bucket, Key=key, UploadId=item.writer.removeprefix("upload ")
        )
        return True

    def reading_filesystem(self) -> tuple[Any, str]:
        return self.fs, self._root_key

    @_remote
    def listing(self) -> dict[str, dict[str, Any]]:
        """Every object under the prefix with its size and date, in one (paginated) listing: a
        DuckDB connection then opens files without asking for their size and date again (two
        requests fewer per file). Files that appear later are asked for one by one."""
        try:
            return self.fs.find(self._root_key, detail=True)
        except FileNotFoundError:
            return {}


class ObjectNewFile:
    """A file spooled on this machine and PUT whole at its final key on commit."""

    def __init__(self, backend: ObjectBackend, path: PurePath) -> None:
        self.backend, self.path = backend, path
        self.sink = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)

    def write(self, data: bytes) -> None:
        self.sink.write(data)

    def commit(self) -> int:
        self.sink.seek(0)
        data = self.sink.read()
        self.sink.close()
        self.backend.put_new(self.path, data)
        return len(data)

    def abort(self) -> None:
        self.sink.close()


def _filesystem(scheme: str, **options: Any) -> Any:
    """A new filesystem for the scheme (never a cached one: the environment's credentials may
    have changed), whose listings are not cached unless ``options`` say so (other writers add
    files all the time)."""
    import fsspec

    try:
        filesystem = fsspec.get_filesystem_class(scheme)
    except ValueError:
        raise StoreError(
            f"unknown store URL scheme {scheme}:// (use a local path, s3://, gs://, memory://, "
            f"or another fsspec protocol)"
        ) from None
    except ImportError as exc:
        hint = EXTRA.get(scheme, "install its fsspec implementation")
        raise StoreError(f"{scheme}:// stores need an extra package ({hint}): {first_line(exc)}") from None
    made = filesystem(**{"skip_instance_cache": True, "use_listings_cache": False, **options})
    _MADE.add(made)
    return made


_MADE: weakref.WeakSet[Any] = weakref.WeakSet()
"""The filesystems this process made (see :func:`close_filesystems`)."""
CLOSE_S = 5.0
"""How long closing a filesystem's connections, or fsspec's event loop, may take at exit."""


def close_filesystems() -> None:
    """End what object-store access leaves running, before the interpreter exits: each
    filesystem's client (its connections, on fsspec's event loop), then that loop and its
    thread (``fsspecIO``) and the loop's executor thread. Left to the interpreter's teardown,
    they are stopped mid-way (daemon threads); nothing else of this process may use them after
    (the ``mmina`` command calls this as it ends). Never waits more than ``CLOSE_S`` on each."""
    asyn = sys.modules.get("fsspec.asyn")
    if asyn is None:
        return  # no object store was used
    loop, thread = asyn.loop[0], asyn.iothread[0]
    if loop is None or not loop.is_running():
        return
    for filesystem in list(_MADE):
        client = getattr(filesystem, "_s3", None)  # s3fs's aiobotocore client, once it connected
        if client is not None:
            _on_loop(loop, client.__aexit__(None, None, None))
    _on_loop(loop, loop.shutdown_default_executor())
    loop.call_soon_threadsafe(loop.stop)
    if thread is not None:
        thread.join(CLOSE_S)


def _on_loop(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, Any]) -> None:
    """Run ``work`` on the loop, waiting at most ``CLOSE_S``; its failure is no reason not to go on."""
    try:
        asyncio.run_coroutine_threadsafe(work, loop).result(CLOSE_S)
    except Exception:  # noqa: BLE001 - closing at exit: a connection that fails to close is closed anyway
        pass
