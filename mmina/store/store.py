"""The store: a directory or object-store prefix of versioned Parquet datasets plus blob
packs (see docs/store.md).

Episodes are written by the writers of ``writers.py``, whose commit point is the
``episodes`` file: views and readers only show steps and requests of committed episodes.
Every file access goes through the store's backend (``backends.py``: a local folder, or an
object store through fsspec).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from mmina import __version__
from mmina.errors import (
    DAMAGED_RUN_HINT,
    AlreadyExistsError,
    CorruptFileError,
    NotAStoreError,
    SchemaVersionError,
    StoreError,
    StoreNotFoundError,
    StoreWarning,
    UnknownRunError,
    unreadable_file,
)
from mmina.store.backends import Backend, LocalBackend
from mmina.store.blobs import BlobIndex, read_blobs
from mmina.store.files import read_file, replace_file, to_arrow, write_new
from mmina.store.layout import (
    BATCH_PREFIX,
    COMMIT_LOCK,
    LOCK,
    MARKER,
    check_id,
    data_files,
    data_name,
    file_stem,
    is_batch,
    run_of,
    table_dir,
)
from mmina.store.leftovers import remove_leftovers
from mmina.store.migrations import MIGRATIONS, Migration, check_readable
from mmina.store.run_refs import resolve_run_ref
from mmina.store.schema import BLOBS, EPISODES, REQUESTS, RUNS, SCHEMA_VERSION, STEPS, TABLES, TASKS, Table
from mmina.store.writers import BatchWriter, EpisodeWriter

EPISODE_CHILDREN = (STEPS, REQUESTS)
READERS = min(8, os.cpu_count() or 1)
"""Files read at once by :meth:`Store.read`."""
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+)://")


def utcnow() -> datetime:
    return datetime.now(UTC)


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


class Store:
    """A store directory or object-store prefix. ``open`` validates it; nothing is written until
    a write method runs. ``root`` is its location: a ``Path``, or an ``ObjectPath`` whose
    ``str()`` is the URL (``s3://bucket/prefix``)."""

    def __init__(
        self, location: Backend | str | os.PathLike[str], migrations: Sequence[Migration] = MIGRATIONS
    ) -> None:
        self.backend = location if isinstance(location, Backend) else open_backend(location)
        self.root = self.backend.root
        self.migrations = tuple(migrations)
        self._blob_index: BlobIndex | None = None
        self._batch_ids: dict[PurePath, frozenset[str]] = {}
        self._writable = False
        self.skipped: dict[str, str] = {}
        """Files left out of reads because they cannot be read (path → why), each warned about once."""

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str],
        create: bool = False,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> Store:
        """Open an existing store (a folder, or a URL such as ``s3://bucket/prefix``); with
        ``create``, also one still to be made (a missing or empty folder or prefix), which its
        first write creates — so a command that fails before writing leaves nothing behind.
        Never touches a folder that is not a store."""
        backend = open_backend(location)
        names = backend.names()
        if names is None and not create:
            raise StoreNotFoundError(
                f"no store at {backend.root} (record one with `mmina record`, or pass --store)"
            )
        if names is not None and MARKER not in names and (not create or _foreign(names)):
            raise NotAStoreError(f"{backend.root} is not an mmina store (no {MARKER}); refusing to use it")
        store = cls(backend, migrations)
        if names is not None and MARKER in names:
            check_readable(store.marker_version(), f"store {backend.root}")
        return store

    @property
    def location(self) -> str:
        """Where another process or machine opens this store: its object-store URL, or its
        folder as an absolute path."""
        return str(self.root.absolute()) if isinstance(self.root, Path) else str(self.root)

    @property
    def exists(self) -> bool:
        """False for a store opened with ``create`` that nothing has been written to yet."""
        return self.backend.exists(self.root / MARKER)

    # -- marker and locking -------------------------------------------------

    def marker(self) -> dict[str, Any]:
        if not self.exists:  # a store to be created by its first write
            return {"format": "mmina-store", "schema_version": SCHEMA_VERSION}
        try:
            return json.loads(self.backend.read_bytes(self.root / MARKER))
        except (OSError, ValueError) as exc:
            raise NotAStoreError(f"{self.root / MARKER} is unreadable: {exc}") from None

    def marker_version(self) -> int:
        version = self.marker().get("schema_version")
        if not isinstance(version, int):
            raise NotAStoreError(f"{self.root / MARKER} has no schema_version")
        return version

    def _init_marker(self) -> None:
        """Create the marker once, even when several processes (or machines) create the store
        together: the marker is written create-only, and the loser of a race keeps the winner's."""
        with self.lock():
            names = self.backend.names() or []
            if MARKER in names:
                return  # another process made it first, maybe writing its first files already
            if _foreign(names):
                raise NotAStoreError(f"{self.root} is not an mmina store (no {MARKER}); refusing to use it")
            content = {
                "format": "mmina-store",
                "schema_version": SCHEMA_VERSION,
                "created_at": utcnow().isoformat(),
                "created_by": f"mmina {__version__}",
            }
            try:
                self.backend.put(self.root / MARKER, _marker_bytes(content))
            except AlreadyExistsError:
                pass  # another process created the store at the same moment

    def lock(self) -> AbstractContextManager[None]:
        """An exclusive lock shared by all processes writing this store (run creation, marker);
        none on object stores, whose create-only writes settle those races."""
        return self.backend.lock(LOCK, exclusive=True)

    def commit_lock(self, exclusive: bool) -> AbstractContextManager[None]:
        """Held shared by every commit and exclusively by compaction while it swaps files."""
        return self.backend.lock(COMMIT_LOCK, exclusive)

    def ensure_writable(self) -> None:
        """Create the store on its first write; refuse to write a store of a newer version; mark
        an older one as upgraded; remove what writers that are gone left behind (see
        ``leftovers.py``). Checked once per open store (each check reads the marker)."""
        if self._writable:
            return
        for table in TABLES.values():  # a damaged layout is refused before anything is written
            self.backend.check_folder(self.root / table.name)
        if not self.exists:
            self._init_marker()
        version = self.marker_version()
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(f"store {self.root} was written by a newer mmina; refusing to write")
        if version < SCHEMA_VERSION:
            with self.lock():
                self.backend.replace(
                    self.root / MARKER, _marker_bytes({**self.marker(), "schema_version": SCHEMA_VERSION})
                )
        self._writable = True
        remove_leftovers(self, wait=False)

    # -- writing ------------------------------------------------------------

    def begin_run(self, run_id: str, run_row: dict[str, Any], task_rows: list[dict[str, Any]]) -> bool:
        """Write the run's ``runs`` and ``tasks`` files once; False when the run already existed.

        Re-opening a run (``--resume``) must use the same task suite, or results would mix.
        Processes beginning one run at the same moment (on object stores no lock orders them)
        are settled by the create-only writes: the ``runs`` file lands once, the others reopen.
        """
        self.ensure_writable()
        with self.lock():
            if self._run_exists(run_id, run_row):
                return False
            self._write_tasks(run_id, task_rows)
            try:
                write_new(
                    self.backend,
                    table_dir(self.root, RUNS, run_id) / data_name("run", SCHEMA_VERSION),
                    RUNS,
                    to_arrow(RUNS, [run_row]),
                )
            except AlreadyExistsError:
                return not self._run_exists(run_id, run_row)
        return True

    def _run_exists(self, run_id: str, run_row: dict[str, Any]) -> bool:
        """True when the run exists with the same task suite; an error when with another, or
        when its ``runs`` file is there but cannot be read (it is not a new run either)."""
        existing = self.read("runs", run_id=run_id)
        if not existing.num_rows:
            unreadable = self.unreadable("runs", run_id)
            if unreadable:
                path, reason = unreadable[0]
                raise StoreError(
                    f"run {run_id} cannot be reopened: its runs file {path} cannot be read ({reason}); "
                    f"{DAMAGED_RUN_HINT}"
                )
            return False
        if existing.column("task_suite_sha256")[0].as_py() != run_row.get("task_suite_sha256"):
            raise StoreError(f"run {run_id} was recorded with a different task suite; use a new run id")
        return True

    def _write_tasks(self, run_id: str, task_rows: list[dict[str, Any]]) -> None:
        """The run's tasks, once: a process beginning the same run at the same moment may have
        written them first, which is fine when they are the same tasks."""
        path = table_dir(self.root, TASKS, run_id) / data_name("tasks", SCHEMA_VERSION)
        try:
            write_new(self.backend, path, TASKS, to_arrow(TASKS, task_rows))
        except AlreadyExistsError:
            written = read_file(path, TASKS, ["task_id", "task_sha256"], self.migrations, self.backend.arrow)
            if sorted(zip(written["task_id"].to_pylist(), written["task_sha256"].to_pylist())) != sorted(
                (row["task_id"], row["task_sha256"]) for row in task_rows
            ):
                raise StoreError(
                    f"run {run_id} is being created by another process with other tasks; use a new run id"
                ) from None

    def redact_tasks(self, run_id: str, redact: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
        """Apply ``redact`` to every row of the run's ``tasks`` and rewrite the files it changed;
        the number of rows changed. An episode calls it when it learned a secret its task's text
        holds (the password an intent gives): the tasks were written before any episode ran.
        The one rewrite in an append-only store: whole files, replaced at once, under the store's
        lock (object stores have none; two episodes of one run finishing together there may
        each rewrite from the same old file, see docs/redaction.md)."""
        changed = 0
        with self.lock():
            for path in self.files(TASKS.name, run_id):
                rows = read_file(path, TASKS, None, self.migrations, self.backend.arrow).to_pylist()
                redacted = [redact(row) for row in rows]
                differ = sum(new != old for new, old in zip(redacted, rows))
                if differ:
                    replace_file(self.backend, path, TASKS, to_arrow(TASKS, redacted))
                    changed += differ
        return changed

    def episode_writer(self, run_id: str, episode_id: str) -> EpisodeWriter[Store]:
        self.ensure_writable()
        check_id("run id", run_id)
        if check_id("episode id", episode_id).startswith(BATCH_PREFIX):
            raise StoreError(
                f"invalid episode id {episode_id!r}: ids starting with {BATCH_PREFIX!r} are reserved"
            )
        if self.episode_exists(episode_id):
            raise StoreError(f"episode {episode_id} already exists in {self.root}: the store is append-only")
        return EpisodeWriter(self, run_id, episode_id)

    def batch_writer(self, run_id: str) -> BatchWriter[Store]:
        """A writer committing many episodes of ``run_id`` at once (one file per table)."""
        self.ensure_writable()
        return BatchWriter(self, check_id("run id", run_id))

    def episode_exists(self, episode_id: str) -> bool:
        """True when any file of that episode id landed (its commit row, or a pack), or a
        batch holds it."""
        if self.backend.exists(self.root / BLOBS.name / data_name(episode_id, SCHEMA_VERSION)):
            return True
        return episode_id in self._committed(data_files(self.backend, EPISODES))[0]

    def committed_episode_ids(self) -> set[str]:
        """Every committed episode id: per-episode files by name, batch files by content."""
        return self._committed(data_files(self.backend, EPISODES))[0]

    def committed_stems(self) -> set[str]:
        """File stems that count as committed: every committed episode id and every batch
        stem with an ``episodes`` file (packs, steps and requests files are named by one)."""
        return self.committed_in(data_files(self.backend, EPISODES))

    def committed_in(self, episode_files: list[PurePath]) -> set[str]:
        """:meth:`committed_stems` from these ``episodes`` files (e.g. of some runs only)."""
        ids, batches = self._committed(episode_files)
        return ids | batches

    def _committed(self, episode_files: list[PurePath]) -> tuple[set[str], set[str]]:
        """The committed episode ids and batch stems, from one listing of the ``episodes`` files."""
        batches = [path for path in episode_files if is_batch(path)]
        ids = {file_stem(path) for path in episode_files if not is_batch(path)}
        for path in batches:
            ids |= self._ids_in_batch(path)
        return ids, {file_stem(path) for path in batches}

    def _ids_in_batch(self, path: PurePath) -> frozenset[str]:
        if path not in self._batch_ids:
            try:
                ids = read_file(path, EPISODES, ["episode_id"], self.migrations, self.backend.arrow).column(
                    "episode_id"
                )
            except CorruptFileError as exc:
                self.skip_file(path, exc.reason)
                return frozenset()
            self._batch_ids[path] = frozenset(ids.to_pylist())
        return self._batch_ids[path]

    def append(
        self, table_name: str, rows: Sequence[dict[str, Any]], stem: str, run_id: str | None = None
    ) -> PurePath:
        """Append rows as one new file of a table (used for scores and the judge cache)."""
        return self.append_arrow(table_name, to_arrow(TABLES[table_name], rows), stem, run_id)

    def holds(self, table_name: str, stem: str, run_id: str | None = None) -> bool:
        """Whether the store has the file :meth:`append` writes for ``stem`` (and ``run_id``):
        files appear whole or not at all, so a writer that died left none."""
        return self.backend.exists(
            table_dir(self.root, TABLES[table_name], run_id) / data_name(stem, SCHEMA_VERSION)
        )

    def append_arrow(self, table_name: str, data: pa.Table, stem: str, run_id: str | None = None) -> PurePath:
        """:meth:`append` for rows already in Arrow, with exactly the table's columns and types."""
        self.ensure_writable()
        table = TABLES[table_name]
        if not data.schema.equals(table.schema):
            raise StoreError(f"rows for table {table.name} do not have its schema: {data.schema}")
        path = table_dir(self.root, table, run_id) / data_name(stem, SCHEMA_VERSION)
        return write_new(self.backend, path, table, data).path

    @property
    def blob_index(self) -> BlobIndex:
        if self._blob_index is None:
            self._blob_index = BlobIndex(self.backend, self.skip_file)
        self._blob_index.refresh(self.committed_stems())
        return self._blob_index

    # -- reading ------------------------------------------------------------

    def skip_file(self, path: PurePath, reason: str) -> None:
        """Leave a damaged file out of what is read, and say so once (a :class:`StoreWarning`):
        one bad file must not hide the rest of its table."""
        if str(path) not in self.skipped:
            self.skipped[str(path)] = reason
            warnings.warn(
                StoreWarning(f"skipped {path}: {reason}; the rest is read (see `mmina store verify`)"),
                stacklevel=2,
            )

    def unreadable(self, table_name: str, run_id: str | None = None) -> list[tuple[PurePath, str]]:
        """The table's files (of ``run_id``) that reading skipped so far, with why."""
        return [
            (path, self.skipped[str(path)])
            for path in self.files(table_name, run_id)
            if str(path) in self.skipped
        ]

    def why_no_episode(self, episode_id: str) -> str:
        """Why the store shows no episode ``episode_id`` when its ``episodes`` file is there but
        cannot be read ("" otherwise): a clause for an "unknown episode" message (error path only:
        it reads the table's files)."""
        self.read("episodes", columns=["episode_id"])
        damaged = [(path, why) for path, why in self.unreadable("episodes") if file_stem(path) == episode_id]
        if not damaged:
            return ""
        path, why = damaged[0]
        return (
            f": {unreadable_file('episodes', path, why)}; `mmina record --resume --run-id "
            f"{run_of(path)}` records that episode again, and `mmina store verify` lists every damaged file"
        )

    def files(self, table_name: str, run_id: str | None = None) -> list[PurePath]:
        return data_files(self.backend, TABLES[table_name], run_id)

    def run_ids(self) -> list[str]:
        return sorted(self.read("runs", columns=["run_id"]).column("run_id").to_pylist())

    def select_runs(self, runs: Sequence[str] = ()) -> list[str]:
        """The runs named by ``runs`` (references, see :meth:`resolve_run`) in the order given,
        repeats dropped; every run of the store when none are named."""
        if not runs:
            chosen = self.run_ids()
            if not chosen:
                self._check_lost_runs(None)
            return chosen
        created = self._runs_by_creation()
        return list(dict.fromkeys(self._resolve(ref, created) for ref in runs))

    def resolve_run(self, ref: str) -> str:
        """The id of the run ``ref`` names: a run id, an unambiguous prefix of one, or
        ``latest`` (the run created last). The one place a run reference is read, so that every
        command accepts the same references and words a bad one the same way
        (:class:`UnknownRunError`)."""
        return self._resolve(ref, self._runs_by_creation())

    def _resolve(self, ref: str, created: list[str]) -> str:
        try:
            return resolve_run_ref(ref, created, self.root)
        except UnknownRunError:
            self._check_lost_runs(ref)
            raise

    def _check_lost_runs(self, ref: str | None) -> None:
        """Raise, naming the file and what to do, when the run ``ref`` (None: any run, as the
        store seems to hold none) is unknown because its ``runs`` file cannot be read."""
        lost = [(path, reason) for path, reason in self.unreadable("runs") if ref in (None, run_of(path))]
        if lost:
            path, reason = lost[0]
            what = f"run {ref} cannot be used" if ref else f"{self.root} holds no readable run"
            more = f" (and {len(lost) - 1} more runs file(s))" if len(lost) > 1 else ""
            raise StoreError(f"{what}: {unreadable_file('runs', path, reason)}{more}; {DAMAGED_RUN_HINT}")

    def _runs_by_creation(self) -> list[str]:
        """Run ids, the earliest created first (ties by id)."""
        rows = self.read("runs", columns=["run_id", "created_at"]).to_pylist()
        return [
            r["run_id"]
            for r in sorted(
                rows, key=lambda r: (r["created_at"] is not None, r["created_at"] or 0, r["run_id"])
            )
        ]

    def read(
        self,
        table_name: str,
        run_id: str | None = None,
        columns: Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> pa.Table:
        """A whole table as Arrow (committed episodes only), with ``run_id`` for run tables;
        ``where``: only the rows whose columns equal these values (see :func:`read_file`)."""
        table = TABLES[table_name]
        wanted = [c for c in columns if c != "run_id"] if columns else None
        parts = self._read_parts(table, self._readable_candidates(table, run_id), wanted, where)
        schema = _output_schema(table, wanted)
        data = pa.concat_tables(parts).select(schema.names) if parts else schema.empty_table()
        if table is EPISODES:
            data = _first_of_each(data, "episode_id")
        if table in EPISODE_CHILDREN and data.num_rows:
            committed = self.read("episodes", run_id=run_id, columns=["episode_id"]).column("episode_id")
            data = data.filter(pc.is_in(data.column("episode_id"), committed))
        return data.select(list(columns)) if columns else data

    def _readable_candidates(self, table: Table, run_id: str | None) -> list[PurePath]:
        """The table's files; for steps and requests only those of committed stems (a copy of
        an episode's file under another name is not read twice)."""
        paths = self.files(table.name, run_id)
        if table in EPISODE_CHILDREN and paths:
            committed = self.committed_stems()
            paths = [path for path in paths if file_stem(path) in committed]
        return paths

    def _read_parts(
        self, table: Table, paths: list[PurePath], columns: list[str] | None, where: Mapping[str, Any] | None
    ) -> list[pa.Table]:
        """The files in order, read side by side (Arrow decodes without holding the GIL, and a
        table of many runs is many small files, whose fixed costs would otherwise add up);
        an unreadable file is skipped with a warning."""
        if len(paths) < 2:
            results = [self._read_part(table, path, columns, where) for path in paths]
        else:
            with ThreadPoolExecutor(min(READERS, len(paths))) as pool:
                results = list(pool.map(lambda path: self._read_part(table, path, columns, where), paths))
        for path, result in zip(paths, results):
            if isinstance(result, CorruptFileError):
                self.skip_file(path, result.reason)
        return [result for result in results if isinstance(result, pa.Table)]

    def _read_part(
        self, table: Table, path: PurePath, columns: list[str] | None, where: Mapping[str, Any] | None = None
    ) -> pa.Table | CorruptFileError:
        needed = (
            columns
            if columns is None or table not in (*EPISODE_CHILDREN, EPISODES)
            else sorted({*columns, "episode_id"})
        )
        try:
            data = read_file(path, table, needed, self.migrations, self.backend.arrow, where)
        except CorruptFileError as exc:
            return exc
        if table.partitioned_by_run:
            data = data.append_column("run_id", pa.array([run_of(path)] * data.num_rows, pa.string()))
        return data

    def read_blobs(self, digests: Sequence[str], packs: Sequence[str] | None = None) -> dict[str, bytes]:
        return read_blobs(self.backend, digests, packs, self.skip_file)


def _foreign(names: list[str]) -> bool:
    """Anything but the locks and a marker being written means the folder is someone else's."""
    return any(name not in (LOCK, COMMIT_LOCK) and not name.startswith(f".{MARKER}.") for name in names)


def _marker_bytes(content: dict[str, Any]) -> bytes:
    return (json.dumps(content, indent=2) + "\n").encode()


def _output_schema(table: Table, columns: list[str] | None) -> pa.Schema:
    schema = table.schema if columns is None else pa.schema([table.schema.field(c) for c in columns])
    if table.partitioned_by_run:
        schema = schema.append(pa.field("run_id", pa.string()))
    if table in (*EPISODE_CHILDREN, EPISODES) and "episode_id" not in schema.names:
        schema = schema.append(pa.field("episode_id", pa.string()))
    return schema


def _first_of_each(data: pa.Table, key: str) -> pa.Table:
    """The first row of each ``key`` (files are read in a stable order): an episode whose
    row was copied into a second file is counted once."""
    seen: set[Any] = set()
    keep = []
    for value in data.column(key).to_pylist():
        keep.append(value not in seen)
        seen.add(value)
    return data if all(keep) else data.filter(pa.array(keep))
