"""``store info`` and ``store verify``: what a store holds, and whether every file reads."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmina.errors import MminaError, SchemaVersionError
from mmina.store.schema import BLOBS, REQUESTS, SCHEMA_VERSION, STEPS, TABLES, Table
from mmina.store.files import read_version
from mmina.store.layout import file_stem, file_version
from mmina.store.migrations import check_readable
from mmina.store.store import Store


@dataclass(frozen=True)
class TableInfo:
    name: str
    files: int
    rows: int
    bytes: int


@dataclass(frozen=True)
class StoreInfo:
    root: str
    schema_version: int
    runs: int
    episodes: int
    steps: int
    tables: list[TableInfo]

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.tables)


def store_info(store: Store) -> StoreInfo:
    """Counts from Parquet footers (no data read); steps count committed episodes only."""
    committed = store.committed_stems()
    tables = [_table_info(store, table, committed) for table in TABLES.values()]
    rows = {t.name: t.rows for t in tables}
    return StoreInfo(str(store.root), store.marker_version(), rows["runs"], rows["episodes"], rows["steps"], tables)


def _table_info(store: Store, table: Table, committed: set[str]) -> TableInfo:
    files = store.files(table.name)
    if table in (STEPS, REQUESTS):
        files = [f for f in files if file_stem(f) in committed]
    rows = sum(pq.read_metadata(str(f), filesystem=store.backend.arrow).num_rows for f in files)
    return TableInfo(table.name, len(files), rows, sum(store.backend.size(f) for f in files))


@dataclass(frozen=True)
class Problem:
    path: str
    kind: str
    message: str


@dataclass
class VerifyReport:
    root: str
    files_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(store: Store) -> VerifyReport:
    """Read every file completely; report partial, corrupt, orphaned and dangling data.

    Never raises for a bad file: every failure becomes a :class:`Problem` with its path.
    """
    report = VerifyReport(str(store.root))
    for tmp in store.backend.unfinished():
        if tmp.writer_alive:
            report.in_progress.append(str(tmp.path))
        else:
            report.problems.append(Problem(str(tmp.path), "partial",
                                           f"unfinished file of a writer that is gone ({tmp.host}:{tmp.pid}); ignored by readers"))
    readable: dict[str, list[PurePath]] = {}
    filesystem = store.backend.arrow
    for table in TABLES.values():
        readable[table.name] = [p for p in store.files(table.name) if _check_file(p, table, report, filesystem)]
    committed = _committed_episodes(readable["episodes"], filesystem)
    _check_orphans(readable, committed, report)
    _check_blob_refs(readable, report, filesystem)
    return report


def _check_file(path: PurePath, table: Table, report: VerifyReport, filesystem: Any) -> bool:
    report.files_checked += 1
    try:
        _read_fully(path, table, filesystem)
    except SchemaVersionError as exc:
        report.problems.append(Problem(str(path), "newer_version", str(exc)))
        return False
    except Exception as exc:  # noqa: BLE001 - verify must report every failure, never crash
        message = str(exc) if isinstance(exc, MminaError) else f"{type(exc).__name__}: {exc}"
        report.problems.append(Problem(str(path), "corrupt", message))
        return False
    return True


def _read_fully(path: PurePath, table: Table, filesystem: Any) -> None:
    """Decode every page of the file and check its declared version and columns."""
    version = read_version(path, filesystem)
    check_readable(version, str(path))
    if version != file_version(path):
        raise MminaError(f"file name says version {file_version(path)} but its metadata says {version}")
    data = pq.read_table(str(path), filesystem=filesystem)
    missing = set(table.column_names) - set(data.column_names)
    if version == SCHEMA_VERSION and missing:
        raise MminaError(f"missing column(s) {', '.join(sorted(missing))}")


def _committed_episodes(paths: list[PurePath], filesystem: Any) -> set[str]:
    """Committed episode ids and the stems of ``episodes`` files (batch files hold many)."""
    ids: set[str] = {file_stem(path) for path in paths}
    for path in paths:
        ids.update(pq.read_table(str(path), columns=["episode_id"], filesystem=filesystem).column("episode_id").to_pylist())
    return ids


def _check_orphans(readable: dict[str, list[PurePath]], committed: set[str], report: VerifyReport) -> None:
    """Files of an episode whose ``episodes`` row never landed (writer killed between renames)."""
    for table in (STEPS, REQUESTS, BLOBS):
        for path in readable[table.name]:
            if file_stem(path) not in committed:
                report.problems.append(Problem(str(path), "orphan",
                                               f"{table.name} of {file_stem(path)}, which was never committed; ignored by readers"))


def _check_blob_refs(readable: dict[str, list[PurePath]], report: VerifyReport, filesystem: Any) -> None:
    """Every blob a step or request refers to must be in some pack."""
    stored: set[str] = set()
    for path in readable["blobs"]:
        stored.update(pq.read_table(str(path), columns=["sha256"], filesystem=filesystem).column("sha256").to_pylist())
    for table, columns in ((STEPS, ("screenshot", "screenshot_som")), (REQUESTS, ("request_body", "response_body"))):
        for path in readable[table.name]:
            missing = set(_refs(path, columns, filesystem)) - stored
            if missing:
                report.problems.append(Problem(str(path), "missing_blob",
                                               f"{len(missing)} referenced blob(s) not in any pack, e.g. {min(missing)}"))


def _refs(path: PurePath, columns: tuple[str, ...], filesystem: Any) -> Iterator[str]:
    """Blob hashes a file refers to; older files may lack some reference columns."""
    present = pq.read_schema(str(path), filesystem=filesystem).names
    columns = tuple(c for c in columns if c in present)
    data = pq.read_table(str(path), columns=list(columns), filesystem=filesystem)
    for name in columns:
        yield from (v for v in pc.drop_null(data.column(name)).to_pylist() if v)
    if "images" in present:
        images = pq.read_table(str(path), columns=["images"], filesystem=filesystem).column("images")
        flat = pc.list_flatten(images)
        if len(flat):
            yield from (v for v in pc.struct_field(flat, "blob").to_pylist() if v)
