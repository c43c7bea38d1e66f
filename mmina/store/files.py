"""Reading and writing single Parquet files of the store, atomically and versioned, through its backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow.fs import PyFileSystem

from mmina.errors import CorruptFileError, StoreError, first_line
from mmina.store.migrations import MIGRATIONS, Migration, check_readable, upgrade
from mmina.store.schema import SCHEMA_VERSION, Table
from mmina.unicode import mapped_text

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
    try:
        return pa.Table.from_pylist(list(rows), schema=table.schema)
    except UnicodeEncodeError:  # a lone surrogate (a page's title, a model's reply): kept, escaped
        return pa.Table.from_pylist([mapped_text(row) for row in rows], schema=table.schema)


@dataclass(frozen=True)
class Written:
    """A file a writer made visible: what a commit's manifest lists (``manifest.py``)."""

    path: PurePath
    rows: int
    bytes: int


def with_metadata(table: Table, schema: pa.Schema, extra: Mapping[bytes, bytes] | None = None) -> pa.Schema:
    return schema.with_metadata(
        {META_VERSION: str(SCHEMA_VERSION).encode(), META_TABLE: table.name.encode(), **(extra or {})}
    )


def write_new(
    backend: Backend,
    path: PurePath,
    table: Table,
    data: pa.Table,
    row_group_size: int | None = None,
    metadata: Mapping[bytes, bytes] | None = None,
) -> Written:
    """Write ``data`` as a new file that appears whole (see :meth:`Backend.create`), never
    replacing one: the store is append-only. ``metadata`` joins the file's key-value metadata."""
    new = backend.create(path)
    try:
        pq.write_table(
            data.replace_schema_metadata(with_metadata(table, data.schema, metadata).metadata),
            new.sink,
            row_group_size=row_group_size,
            compression="zstd",
        )
        size = new.commit()
    except BaseException as exc:
        new.abort()
        if isinstance(exc, OSError):
            raise StoreError(f"cannot write {path}: {type(exc).__name__}: {first_line(exc)}") from None
        raise
    return Written(path, data.num_rows, size)


def replace_file(backend: Backend, path: PurePath, table: Table, data: pa.Table) -> None:
    """Write ``data`` over an existing file, whole and at once (a rename on disk, one PUT on an
    object store). Only a run's ``tasks`` file is ever rewritten (see ``Store.redact_tasks``)."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        data.replace_schema_metadata(with_metadata(table, data.schema).metadata), sink, compression="zstd"
    )
    try:
        backend.replace(path, sink.getvalue().to_pybytes())
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {type(exc).__name__}: {first_line(exc)}") from None


def read_version(path: PurePath, filesystem: Any = None, table: Table | None = None) -> int:
    """The schema version recorded in a file's Parquet metadata (checked to belong to ``table``)."""
    try:
        metadata = pq.read_schema(str(path), filesystem=filesystem).metadata
    except (OSError, pa.ArrowException) as exc:
        raise read_failure(path, exc) from None
    return version_in(metadata, path, table)


def version_in(metadata: Mapping[bytes, bytes] | None, path: PurePath, table: Table | None) -> int:
    """The schema version a file's Parquet metadata records (checked to belong to ``table``)."""
    if not metadata or META_VERSION not in metadata or not metadata[META_VERSION].isdigit():
        raise _corrupt(path, "it is not an mmina store file (no schema version in its metadata)")
    owner = metadata.get(META_TABLE, b"").decode(errors="replace")
    if table is not None and owner and owner != table.name:
        raise _corrupt(path, f"it holds {owner} rows, not {table.name} rows")
    return int(metadata[META_VERSION])


def arrow_buffer(data: bytes) -> pa.Buffer:
    """``data`` copied into memory Arrow owns. A buffer over the Python ``bytes`` (what
    ``pa.BufferReader(data)`` makes) holds a Python reference, which Arrow's decoding threads
    release with the GIL, the interpreter's finalization included; Arrow-owned memory has none."""
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()


def _corrupt(path: PurePath, reason: str) -> CorruptFileError:
    return CorruptFileError(f"cannot read {path}: {reason}", reason)


def read_failure(path: PurePath, exc: BaseException) -> StoreError:
    """A failed read as the error to raise: :class:`CorruptFileError` when the file's bytes
    are bad (readers skip it), a plain :class:`StoreError` when the way to it failed (a
    vanished file, a network or permission failure: nothing to skip, the read fails)."""
    message = f"{type(exc).__name__}: {first_line(exc)}"
    if isinstance(exc, pa.ArrowInvalid) or (isinstance(exc, OSError) and _about_bytes(exc)):
        return _corrupt(path, f"it is not a readable Parquet file ({message})")
    return StoreError(f"cannot read {path}: {message}")


def _about_bytes(exc: OSError) -> bool:
    if isinstance(exc, (FileNotFoundError, PermissionError, ConnectionError, TimeoutError)):
        return False
    text = str(exc).lower()
    return any(word in text for word in ("thrift", "parquet", "magic", "footer", "corrupt", "deserializ"))


def read_file(
    path: PurePath,
    table: Table,
    columns: Sequence[str] | None = None,
    migrations: Sequence[Migration] = MIGRATIONS,
    filesystem: Any = None,
    where: Mapping[str, Any] | None = None,
) -> pa.Table:
    """Read one store file, rejecting newer versions and upgrading older ones; ``filesystem``
    is the store backend's ``arrow`` (None for a local store).

    The file is opened once (its footer gives the version, then only ``columns`` are read; on
    an object store each open costs requests). ``where`` keeps the rows whose columns equal
    the given values; row groups whose statistics rule a value out are not read at all.
    """
    where = where or {}
    try:
        with pq.ParquetFile(str(path), filesystem=filesystem) as parquet:
            version = version_in(parquet.schema_arrow.metadata, path, table)
            check_readable(version, str(path))
            current = version == SCHEMA_VERSION
            threads = decode_threads(filesystem)
            data = (
                _read_current(parquet, columns, where, threads)
                if current
                else parquet.read(use_threads=threads).replace_schema_metadata(None)
            )
    except (OSError, pa.ArrowException) as exc:
        raise read_failure(path, exc) from None
    if not current:
        data = _matching(upgrade(table, data, version, migrations), where)
    return data.select(list(columns)) if columns else data


def decode_threads(filesystem: Any) -> bool:
    """Whether Arrow may decode a file of ``filesystem`` on its own threads: not when the
    filesystem is Python's (fsspec, for object stores), whose reads those threads would make
    through Python; at the interpreter's exit such a thread aborts the process ("terminate
    called without an active exception"). Such a file is decoded on the calling thread."""
    return not isinstance(filesystem, PyFileSystem)


def _read_current(
    parquet: pq.ParquetFile, columns: Sequence[str] | None, where: Mapping[str, Any], threads: bool
) -> pa.Table:
    """The columns asked for (and those ``where`` tests), from the row groups that may match."""
    wanted = None if columns is None else list(dict.fromkeys([*columns, *where]))
    if wanted == []:  # only the row count (a table without columns loses it when its metadata is replaced)
        return pa.table({"rows": pa.nulls(parquet.metadata.num_rows)}).drop_columns(["rows"])
    if not where:
        return parquet.read(columns=wanted, use_threads=threads).replace_schema_metadata(None)
    metadata = parquet.metadata
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    tested = {leaves[name]: value for name, value in where.items() if name in leaves}
    groups = [g for g in range(metadata.num_row_groups) if _may_match(metadata.row_group(g), tested)]
    return _matching(
        parquet.read_row_groups(groups, columns=wanted, use_threads=threads).replace_schema_metadata(None),
        where,
    )


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
