"""The store: a directory of versioned Parquet datasets plus blob packs (see docs/store.md).

An episode is written by one :class:`EpisodeWriter`: blobs stream into a hidden pack as
they arrive, steps and requests are buffered, and ``commit`` renames the files into
place with the ``episodes`` row last. That row is the commit point: views and readers
only show steps and requests of episodes that have one.
"""
from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mmina import __version__
from mmina.errors import NotAStoreError, SchemaVersionError, StoreError, StoreNotFoundError
from mmina.schema import BLOBS, EPISODES, REQUESTS, RUNS, SCHEMA_VERSION, STEPS, TABLES, TASKS, Table
from mmina.store.blobs import BlobIndex, PackWriter, read_blobs, sha256
from mmina.store.files import read_file, to_arrow, write_atomic
from mmina.store.layout import LOCK, MARKER, check_id, data_files, data_name, run_of, table_dir, worker_name
from mmina.store.migrations import MIGRATIONS, Migration, check_readable

DEFAULT_STORE = "mmina-store"
STORE_ENV = "MMINA_STORE"
EPISODE_CHILDREN = (STEPS, REQUESTS)


def resolve_store_path(option: str | os.PathLike[str] | None) -> Path:
    """``--store``, else ``$MMINA_STORE``, else ``./mmina-store``."""
    return Path(option or os.environ.get(STORE_ENV) or DEFAULT_STORE)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Store:
    """A store directory. ``open`` validates it; nothing is written until a write method runs."""

    def __init__(self, root: Path, migrations: Sequence[Migration] = MIGRATIONS) -> None:
        self.root = root
        self.migrations = tuple(migrations)
        self._blob_index: BlobIndex | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str], create: bool = False,
             migrations: Sequence[Migration] = MIGRATIONS) -> "Store":
        """Open an existing store (or create one when ``create``); never touches a non-store."""
        root = Path(path)
        marker = root / MARKER
        if not root.exists() and not create:
            raise StoreNotFoundError(f"no store at {root} (record one with `mmina record`, or pass --store)")
        if root.exists() and not root.is_dir():
            raise NotAStoreError(f"{root} is a file, not an mmina store directory")
        if root.exists() and not marker.exists() and (not create or _has_foreign_files(root)):
            raise NotAStoreError(f"{root} is not an mmina store (no {MARKER}); refusing to use it")
        store = cls(root, migrations)
        if create and not marker.exists():
            store._init_marker()
        check_readable(store.marker_version(), f"store {root}")
        return store

    # -- marker and locking -------------------------------------------------

    def marker(self) -> dict[str, Any]:
        try:
            return json.loads((self.root / MARKER).read_text())
        except (OSError, ValueError) as exc:
            raise NotAStoreError(f"{self.root / MARKER} is unreadable: {exc}") from None

    def marker_version(self) -> int:
        version = self.marker().get("schema_version")
        if not isinstance(version, int):
            raise NotAStoreError(f"{self.root / MARKER} has no schema_version")
        return version

    def _init_marker(self) -> None:
        """Create the marker once, even when several processes create the store together."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self.lock():
            if not (self.root / MARKER).exists():
                if _has_foreign_files(self.root):
                    raise NotAStoreError(f"{self.root} is not an mmina store (no {MARKER}); refusing to use it")
                self._write_marker({"format": "mmina-store", "schema_version": SCHEMA_VERSION,
                                    "created_at": utcnow().isoformat(), "created_by": f"mmina {__version__}"})

    def _write_marker(self, content: dict[str, Any]) -> None:
        tmp = self.root / f".{MARKER}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(content, indent=2) + "\n")
        os.replace(tmp, self.root / MARKER)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """An exclusive lock shared by all processes writing this store (run creation, marker)."""
        with open(self.root / LOCK, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _ensure_writable(self) -> None:
        if self.marker_version() > SCHEMA_VERSION:
            raise SchemaVersionError(f"store {self.root} was written by a newer mmina; refusing to write")
        if self.marker_version() < SCHEMA_VERSION:
            with self.lock():
                self._write_marker({**self.marker(), "schema_version": SCHEMA_VERSION})

    # -- writing ------------------------------------------------------------

    def begin_run(self, run_id: str, run_row: dict[str, Any], task_rows: list[dict[str, Any]]) -> bool:
        """Write the run's ``runs`` and ``tasks`` files once; False when the run already existed.

        Re-opening a run (``--resume``) must use the same task suite, or results would mix.
        """
        self._ensure_writable()
        with self.lock():
            existing = self.read("runs", run_id=run_id)
            if existing.num_rows:
                recorded = existing.column("task_suite_sha256")[0].as_py()
                if recorded != run_row.get("task_suite_sha256"):
                    raise StoreError(f"run {run_id} was recorded with a different task suite; use a new run id")
                return False
            write_atomic(table_dir(self.root, TASKS, run_id) / data_name("tasks", SCHEMA_VERSION), TASKS,
                         to_arrow(TASKS, task_rows))
            write_atomic(table_dir(self.root, RUNS, run_id) / data_name("run", SCHEMA_VERSION), RUNS,
                         to_arrow(RUNS, [run_row]))
        return True

    def episode_writer(self, run_id: str, episode_id: str) -> "EpisodeWriter":
        self._ensure_writable()
        check_id("run id", run_id)
        if self.episode_exists(check_id("episode id", episode_id)):
            raise StoreError(f"episode {episode_id} already exists in {self.root}: the store is append-only")
        return EpisodeWriter(self, run_id, episode_id)

    def episode_exists(self, episode_id: str) -> bool:
        """True when any file of that episode id landed (its commit row, or a pack)."""
        name = data_name(episode_id, SCHEMA_VERSION)
        return (self.root / BLOBS.name / name).exists() or any(
            (d / name).exists() for d in (self.root / EPISODES.name).glob("run_id=*"))

    def append(self, table_name: str, rows: Sequence[dict[str, Any]], stem: str, run_id: str | None = None) -> Path:
        """Append rows as one new file of a table (used for scores and the judge cache)."""
        self._ensure_writable()
        table = TABLES[table_name]
        path = table_dir(self.root, table, run_id) / data_name(stem, SCHEMA_VERSION)
        return write_atomic(path, table, to_arrow(table, rows))

    @property
    def blob_index(self) -> BlobIndex:
        if self._blob_index is None:
            self._blob_index = BlobIndex(self.root)
        self._blob_index.refresh()
        return self._blob_index

    # -- reading ------------------------------------------------------------

    def files(self, table_name: str, run_id: str | None = None) -> list[Path]:
        return data_files(self.root, TABLES[table_name], run_id)

    def run_ids(self) -> list[str]:
        return sorted(self.read("runs", columns=["run_id"]).column("run_id").to_pylist())

    def read(self, table_name: str, run_id: str | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """A whole table as Arrow (committed episodes only), with ``run_id`` for run tables."""
        table = TABLES[table_name]
        wanted = [c for c in columns if c != "run_id"] if columns else None
        parts = [self._read_part(table, path, wanted) for path in self.files(table_name, run_id)]
        schema = _output_schema(table, wanted)
        data = pa.concat_tables(parts).select(schema.names) if parts else schema.empty_table()
        if table in EPISODE_CHILDREN and data.num_rows:
            committed = self.read("episodes", run_id=run_id, columns=["episode_id"]).column("episode_id")
            data = data.filter(pc.is_in(data.column("episode_id"), committed))
        return data.select(list(columns)) if columns else data

    def _read_part(self, table: Table, path: Path, columns: list[str] | None) -> pa.Table:
        needed = columns if columns is None or table not in EPISODE_CHILDREN else sorted({*columns, "episode_id"})
        data = read_file(path, table, needed, self.migrations)
        if table.partitioned_by_run:
            data = data.append_column("run_id", pa.array([run_of(path)] * data.num_rows, pa.string()))
        return data

    def read_blobs(self, digests: Sequence[str], packs: Sequence[str] | None = None) -> dict[str, bytes]:
        return read_blobs(self.root, digests, packs)


def _has_foreign_files(root: Path) -> bool:
    """Anything but the lock and a marker being written means the folder is someone else's."""
    return any(p.name != LOCK and not p.name.startswith(f".{MARKER}.") for p in root.iterdir())


def _output_schema(table: Table, columns: list[str] | None) -> pa.Schema:
    schema = table.schema if columns is None else pa.schema([table.schema.field(c) for c in columns])
    if table.partitioned_by_run:
        schema = schema.append(pa.field("run_id", pa.string()))
    if table in EPISODE_CHILDREN and "episode_id" not in schema.names:
        schema = schema.append(pa.field("episode_id", pa.string()))
    return schema


class EpisodeWriter:
    """Collects one episode and commits it atomically (see the module docstring)."""

    def __init__(self, store: Store, run_id: str, episode_id: str) -> None:
        self.store, self.run_id, self.episode_id = store, run_id, episode_id
        self.index = store.blob_index
        self.pack = PackWriter(store.root / BLOBS.name / data_name(episode_id, SCHEMA_VERSION))
        self.steps: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self._pending: set[str] = set()
        self._packs: set[str] = set()
        self.closed = False

    def put_blob(self, data: bytes, media_type: str) -> str:
        """Store content once; returns its SHA-256, the reference other tables hold."""
        digest = sha256(data)
        if digest in self.index:
            self._packs.add(self.index.location[digest])
        elif digest not in self._pending:
            self._pending.add(digest)
            self.pack.add(digest, media_type, data)
        return digest

    def add_step(self, row: dict[str, Any]) -> None:
        self.steps.append({"episode_id": self.episode_id, **row})
        self.pack.flush()

    def add_requests(self, rows: Sequence[dict[str, Any]]) -> None:
        self.requests.extend({"episode_id": self.episode_id, **row} for row in rows)

    def commit(self, episode_row: dict[str, Any]) -> None:
        """Rename everything into place, the ``episodes`` row last (the commit point)."""
        if self.store.episode_exists(self.episode_id):
            self.abort()
            raise StoreError(f"episode {self.episode_id} already exists in {self.store.root}: the store is append-only")
        try:
            self._commit(episode_row)
        except BaseException:
            self.pack.abort()
            raise
        self.closed = True

    def _commit(self, episode_row: dict[str, Any]) -> None:
        root, name = self.store.root, data_name(self.episode_id, SCHEMA_VERSION)
        pack = self.pack.commit()
        if pack is not None:
            self.index.add_pack(pack, self.pack.hashes)
            self._packs.add(pack.relative_to(root).as_posix())
        for table, rows in ((STEPS, self.steps), (REQUESTS, self.requests)):
            if rows:
                write_atomic(table_dir(root, table, self.run_id) / name, table, to_arrow(table, rows),
                             row_group_size=_row_group_size(table))
        row = {"episode_id": self.episode_id, "blob_packs": sorted(self._packs), "worker": worker_name(),
               "n_requests": len(self.requests), **episode_row}
        write_atomic(table_dir(root, EPISODES, self.run_id) / name, EPISODES, to_arrow(EPISODES, [row]))

    def abort(self) -> None:
        """Drop the episode: nothing of it becomes visible."""
        self.pack.abort()
        self.closed = True


def _row_group_size(table: Table) -> int | None:
    """Small row groups for steps so one step's columns can be fetched without the rest."""
    return 8 if table is STEPS else None
