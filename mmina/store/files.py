"""Reading and writing single Parquet files of the store, atomically and versioned."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mmina.errors import CorruptFileError, StoreError
from mmina.store.schema import SCHEMA_VERSION, Table
from mmina.store.layout import tmp_path
from mmina.store.migrations import MIGRATIONS, Migration, check_readable, upgrade

META_VERSION = b"mmina.schema_version"
META_TABLE = b"mmina.table"


def to_arrow(table: Table, rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Rows (dicts) as an Arrow table of ``table``'s schema; unknown keys are a bug, not data."""
    known = set(table.column_names)
    for row in rows:
        extra = set(row) - known
        if extra:
            raise StoreError(f"unknown column(s) for table {table.name}: {', '.join(sorted(extra))}")
    return pa.Table.from_pylist(list(rows), schema=table.schema)


def with_metadata(table: Table, schema: pa.Schema) -> pa.Schema:
    return schema.with_metadata({META_VERSION: str(SCHEMA_VERSION).encode(), META_TABLE: table.name.encode()})


def write_atomic(path: Path, table: Table, data: pa.Table, row_group_size: int | None = None) -> Path:
    """Write ``data`` to a hidden temporary name, flush it to disk, then rename it into place."""
    if path.exists():
        raise StoreError(f"refusing to overwrite {path}: the store is append-only")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        pq.write_table(data.replace_schema_metadata(with_metadata(table, data.schema).metadata), tmp,
                       row_group_size=row_group_size, compression="zstd")
        fsync_and_rename(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def fsync_and_rename(tmp: Path, final: Path) -> None:
    """Make the file durable before it becomes visible, then rename (atomic on POSIX)."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, final)


def read_version(path: Path) -> int:
    """The schema version recorded in a file's Parquet metadata."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException) as exc:
        raise CorruptFileError(f"corrupt Parquet file {path}: {exc}") from None
    if META_VERSION not in metadata:
        raise CorruptFileError(f"{path} is not an mmina store file (no schema version in its metadata)")
    return int(metadata[META_VERSION])


def read_file(path: Path, table: Table, columns: Sequence[str] | None = None,
              migrations: Sequence[Migration] = MIGRATIONS) -> pa.Table:
    """Read one store file, rejecting newer versions and upgrading older ones."""
    version = read_version(path)
    check_readable(version, str(path))
    current = version == SCHEMA_VERSION
    try:
        data = pq.read_table(path, columns=list(columns) if columns and current else None)
    except (OSError, pa.ArrowException) as exc:
        raise CorruptFileError(f"corrupt Parquet file {path}: {exc}") from None
    data = data.replace_schema_metadata(None)
    if not current:
        data = upgrade(table, data, version, migrations)
    return data.select(list(columns)) if columns else data
