"""The DuckDB sandbox: a connection that can read the store's files and nothing else.

DuckDB runs SQL with the rights of the process (it reads and writes files, loads
extensions, reaches the network), and it has write paths that no statement filter sees
coming (``WITH x AS (COPY ... TO ...) SELECT 1`` writes). So the sandbox does not rely on
the filter in ``sqlcheck.py`` alone. DuckDB's own access to the machine is switched off
(``enable_external_access``) and the configuration locked before any SQL from outside
runs; extensions are neither installed nor loaded. What stays reachable:

* the :class:`StoreFileSystem` below, registered as ``mmina://`` and confined to the
  store's root: it refuses every write, delete and rename, and every path that leads out
  of the store (``..``, a symbolic link pointing elsewhere). An object store is read only
  this way, so there nothing can write whatever the statement;
* on a local disk, also the store's data files themselves by their exact paths
  (``allowed_paths``: no folder, so no new file can be made there), read by DuckDB's own
  filesystem, since going through Python costs some 25 times as much on a store of many
  small files. Overwriting one of them would need a statement that the filter missed;
* a private temporary folder DuckDB spills to, removed when the connection closes.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import duckdb
from fsspec.spec import AbstractFileSystem

from mmina.store.backends import Backend

PROTOCOL = "mmina"
SETTINGS: dict[str, Any] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_persistent_secrets": False,
    "python_enable_replacements": False,
}
"""DuckDB settings given when the connection opens (the rest is set, then locked, by SQL)."""


def _refuse(*_args: Any, **_kwargs: Any) -> None:
    raise PermissionError("the store is read-only here")


class StoreFileSystem(AbstractFileSystem):
    """A store's files as ``mmina://<path in the store>``: read-only, and nothing outside it.

    Paths are normalised before they reach the store's own filesystem, so ``..`` cannot
    climb out; on a local disk a path whose real location (symlinks resolved) is outside
    the store is refused as well. Each open file keeps one position per thread (see
    :class:`PerThreadFile`): DuckDB reads one file from several threads at once.
    """

    protocol = PROTOCOL
    root_marker = ""
    cachable = False  # one per connection: fsspec would hand back an earlier one, with its old listing
    mkdir = makedirs = rm = rm_file = _rm = rmdir = mv = cp_file = touch = pipe_file = put_file = _refuse

    def __init__(self, backend: Backend) -> None:
        super().__init__(skip_instance_cache=True)
        self.inner, self.base = backend.reading_filesystem()
        self.local = backend.local
        self._known = backend.listing()
        self._folders: dict[str, str] = {}

    def uri(self, path: PurePath, root: PurePath) -> str:
        """The name DuckDB reads a store file by (``path`` under the store's ``root``): its real
        path on a local disk, ``mmina://<path in the store>`` on an object store."""
        relative = _relative(path, root)
        return f"{self.base}/{relative}" if self.local else f"{PROTOCOL}://{relative}"

    def reachable(self, path: PurePath, root: PurePath) -> bool:
        """False for a listed store file (``path`` under ``root``) whose real location is outside."""
        return self._inside(f"{self.base}/{_relative(path, root)}")

    def _inner_path(self, path: str) -> str:
        relative = posixpath.normpath("/" + self._strip_protocol(path)).lstrip("/")
        inner = self.base if relative in ("", ".") else f"{self.base}/{relative}"
        if not self._inside(inner):
            raise PermissionError(f"{path} leads out of the store")
        return inner

    def _inside(self, inner: str) -> bool:
        """On a local disk: whether a path's real location (symbolic links followed) is in the
        store; folders are resolved once each, a file costs one ``lstat``."""
        if not self.local:
            return True
        folder, _, name = inner.rpartition("/")
        if folder not in self._folders:
            self._folders[folder] = os.path.realpath(folder)
        real = os.path.realpath(inner) if os.path.islink(inner) else f"{self._folders[folder]}/{name}"
        return _within(real, self.base)

    def _outer(self, entry: dict[str, Any]) -> dict[str, Any] | None:
        """An entry of the inner filesystem as seen from here; None when it lies outside."""
        name = self.inner._strip_protocol(entry["name"])
        if not _within(name, self.base) or not self._inside(name):
            return None
        return {**entry, "name": name[len(self.base) :].lstrip("/")}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        entries = [e for e in map(self._outer, self.inner.ls(self._inner_path(path), detail=True)) if e]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        inner = self._inner_path(path)
        entry = self._outer(self._known.get(inner) or self.inner.info(inner))
        if entry is None:
            raise FileNotFoundError(path)
        return entry

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        """One listing of the inner filesystem (on an object store, a flat listing)."""
        found = self.inner.find(self._inner_path(path), maxdepth=maxdepth, withdirs=withdirs, detail=True)
        entries = {e["name"]: e for e in map(self._outer, found.values()) if e}
        return entries if detail else sorted(entries)

    def modified(self, path: str) -> Any:
        inner = self._inner_path(path)
        known = self._known.get(inner, {}).get("LastModified")
        return known or self.inner.modified(inner)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> PerThreadFile:
        if mode != "rb":
            raise PermissionError(f"the store is read-only here: cannot open {path} to write")
        inner = self._inner_path(path)
        known = (
            {"size": self._known[inner]["size"]} if inner in self._known else {}
        )  # no request for the size
        return PerThreadFile(lambda: self.inner.open(inner, "rb", **known))


class PerThreadFile:
    """One open file with a handle, and so a position, per thread.

    DuckDB reads a Parquet file from several threads through one handle, as ``seek`` then
    ``read``; with one shared position, another thread's ``seek`` can land in between
    (a local file's ``seek`` releases the GIL) and a read returns the wrong bytes.
    """

    def __init__(self, opener: Callable[[], Any]) -> None:
        self._opener = opener
        self._local = threading.local()
        self._handles: list[Any] = []
        self._lock = threading.Lock()

    def _handle(self) -> Any:
        handle = getattr(self._local, "handle", None)
        if handle is None:
            handle = self._local.handle = self._opener()
            with self._lock:
                self._handles.append(handle)
        return handle

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._handle().seek(offset, whence)

    def tell(self) -> int:
        return self._handle().tell()

    def read(self, size: int = -1) -> bytes:
        return self._handle().read(size)

    def close(self) -> None:
        with self._lock:
            handles, self._handles = self._handles, []
        for handle in handles:
            handle.close()


def _relative(path: PurePath, root: PurePath) -> str:
    """``path`` relative to ``root``, with ``/`` (string work: it runs for every file of a store)."""
    text, prefix = str(path), str(root).rstrip("/") + "/"
    return text[len(prefix) :] if text.startswith(prefix) else path.relative_to(root).as_posix()


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


@dataclass
class Sandbox:
    """An open sandboxed connection, its filesystem and its private temporary folder."""

    connection: duckdb.DuckDBPyConnection
    filesystem: StoreFileSystem
    workdir: Path

    def close(self) -> None:
        self.connection.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def open_sandbox(backend: Backend, files: Sequence[PurePath] = ()) -> Sandbox:
    """A new in-memory DuckDB connection that can read ``backend``'s files only (on a local
    disk, ``files`` by their paths as well), with its configuration locked; close it with
    :meth:`Sandbox.close`."""
    workdir = Path(tempfile.mkdtemp(prefix="mmina-sql-"))
    connection = duckdb.connect(":memory:", config={**SETTINGS, "temp_directory": str(workdir)})
    try:
        filesystem = StoreFileSystem(backend)
        connection.register_filesystem(filesystem)
        paths = [filesystem.uri(path, backend.root) for path in files] if backend.local else []
        connection.execute("LOAD parquet")  # built in: nothing is read or fetched
        connection.execute(
            "SET parquet_metadata_cache = true"
        )  # footers checked once, then reused by the query
        connection.execute("SET allowed_directories = $1", [[f"{PROTOCOL}://"]])
        connection.execute("SET allowed_paths = $1", [paths])
        connection.execute("SET enable_external_access = false")
        connection.execute("SET lock_configuration = true")
    except BaseException:
        connection.close()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return Sandbox(connection, filesystem, workdir)
