"""Reading and writing single Parquet files of the store, atomically and versioned, through its backend."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from mmina.errors import CorruptFileError, StoreError
from mmina.store.schema import SCHEMA_VERSION, Table
from mmina.store.migrations import MIGRATIONS, Migration, check_readable, upgrade

if TYPE_CHECKING:
    from mmina.store.backends import Backend

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


def write_new(backend: Backend, path: PurePath, table: Table, data: pa.Table,
              row_group_size: int | None = None) -> PurePath:
    """Write ``data`` as a new file that appears whole (see :meth:`Backend.create`), never
    replacing one: the store is append-only."""
    new = backend.create(path)
    try:
        pq.write_table(data.replace_schema_metadata(with_metadata(table, data.schema).metadata), new.sink,
                       row_group_size=row_group_size, compression="zstd")
        new.commit()
    except BaseException:
        new.abort()
        raise
    return path


def read_version(path: PurePath, filesystem: Any = None) -> int:
    """The schema version recorded in a file's Parquet metadata."""
    try:
        metadata = pq.read_schema(str(path), filesystem=filesystem).metadata
    except (OSError, pa.ArrowException) as exc:
        raise CorruptFileError(f"corrupt Parquet file {path}: {exc}") from None
    return _version(metadata, path)


def _version(metadata: dict[bytes, bytes] | None, path: PurePath) -> int:
    if META_VERSION not in (metadata or {}):
        raise CorruptFileError(f"{path} is not an mmina store file (no schema version in its metadata)")
    return int(metadata[META_VERSION])  # type: ignore[index]


def read_file(path: PurePath, table: Table, columns: Sequence[str] | None = None,
              migrations: Sequence[Migration] = MIGRATIONS, filesystem: Any = None) -> pa.Table:
    """Read one store file, rejecting newer versions and upgrading older ones; ``filesystem``
    is the store backend's ``arrow`` (None for a local store). The file is opened once (on
    an object store each open costs requests)."""
    try:
        with pq.ParquetFile(str(path), filesystem=filesystem) as parquet:
            version = _version(parquet.schema_arrow.metadata, path)
            check_readable(version, str(path))
            current = version == SCHEMA_VERSION
            data = parquet.read(columns=list(columns) if columns and current else None)
    except (OSError, pa.ArrowException) as exc:
        raise CorruptFileError(f"corrupt Parquet file {path}: {exc}") from None
    data = data.replace_schema_metadata(None)
    if not current:
        data = upgrade(table, data, version, migrations)
    return data.select(list(columns)) if columns else data
