"""Reading and writing single Parquet files of the store, atomically and versioned."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
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
    return _version_in(metadata, path)


def _version_in(metadata: Mapping[bytes, bytes] | None, path: Path) -> int:
    if not metadata or META_VERSION not in metadata:
        raise CorruptFileError(f"{path} is not an mmina store file (no schema version in its metadata)")
    return int(metadata[META_VERSION])


def read_file(path: Path, table: Table, columns: Sequence[str] | None = None,
              migrations: Sequence[Migration] = MIGRATIONS, where: Mapping[str, Any] | None = None) -> pa.Table:
    """Read one store file, rejecting newer versions and upgrading older ones.

    The file is opened once (its footer gives the version, then only ``columns`` are read).
    ``where`` keeps the rows whose columns equal the given values; row groups whose
    statistics rule a value out are not read at all.
    """
    where = where or {}
    try:
        with pq.ParquetFile(path) as parquet:
            version = _version_in(parquet.schema_arrow.metadata, path)
            check_readable(version, str(path))
            current = version == SCHEMA_VERSION
            data = _read_current(parquet, columns, where) if current else parquet.read().replace_schema_metadata(None)
    except (OSError, pa.ArrowException) as exc:
        raise CorruptFileError(f"corrupt Parquet file {path}: {exc}") from None
    if not current:
        data = _matching(upgrade(table, data, version, migrations), where)
    return data.select(list(columns)) if columns else data


def _read_current(parquet: pq.ParquetFile, columns: Sequence[str] | None, where: Mapping[str, Any]) -> pa.Table:
    """The columns asked for (and those ``where`` tests), from the row groups that may match."""
    wanted = None if columns is None else list(dict.fromkeys([*columns, *where]))
    if wanted == []:  # only the row count (a table without columns loses it when its metadata is replaced)
        return pa.table({"rows": pa.nulls(parquet.metadata.num_rows)}).drop_columns(["rows"])
    if not where:
        return parquet.read(columns=wanted).replace_schema_metadata(None)
    metadata = parquet.metadata
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    tested = {leaves[name]: value for name, value in where.items() if name in leaves}
    groups = [g for g in range(metadata.num_row_groups) if _may_match(metadata.row_group(g), tested)]
    return _matching(parquet.read_row_groups(groups, columns=wanted).replace_schema_metadata(None), where)


def _may_match(group: pq.RowGroupMetaData, tested: Mapping[int, Any]) -> bool:
    """False when the min/max statistics of a tested (flat) column exclude its value
    (statistics that cannot be compared with it exclude nothing)."""
    for column, value in tested.items():
        stats = group.column(column).statistics
        try:
            if stats is not None and stats.has_min_max and not stats.min <= value <= stats.max:
                return False
        except TypeError:
            continue
    return True


def _matching(data: pa.Table, where: Mapping[str, Any]) -> pa.Table:
    for name, value in where.items():
        data = data.filter(pc.equal(data.column(name), value))
    return data
