"""Which files the DuckDB views read: every table's files whose footer says they are what
their place in the store says, found by reading all footers in one DuckDB query.

A file that cannot be read (truncated, random bytes, empty), that holds another table's
rows (an ``episodes`` file replaced by a ``steps`` file) or that is not an mmina file is
left out with a warning naming it (:meth:`Store.skip_file`), so the rest of its table
still reads; a file of a newer schema version stops the connection, as everywhere.
Steps and requests count only when their stem is committed. When the one query
fails, the files are halved until the unreadable ones are found, so a healthy store costs
one query and a damaged one a few more. Errors that are not about a file's bytes (a
network failure) are raised, never taken for damage.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import PurePath

import duckdb

from mmina.errors import StoreError
from mmina.store.files import META_TABLE, META_VERSION
from mmina.store.layout import file_stem, file_version
from mmina.store.migrations import check_readable
from mmina.store.sandbox import Sandbox
from mmina.store.schema import EPISODES, TABLES, Table
from mmina.store.sqlcheck import one_line
from mmina.store.store import EPISODE_CHILDREN, Store

Footer = dict[str, str]
GLOB_CHARACTERS = frozenset("*?[{")
"""A path DuckDB would expand rather than open (store writers never make such names)."""


def candidates(store: Store, runs: Collection[str] | None = None) -> dict[Table, list[PurePath]]:
    """Every table's files that a view may read; with ``runs``, of those runs only (for the
    tables partitioned by run). Steps and requests count only when their stem is committed."""
    listed = {table: _files(store, table, runs) for table in TABLES.values()}
    committed = store.committed_in(listed[EPISODES])
    for table in EPISODE_CHILDREN:
        listed[table] = [p for p in listed[table] if file_stem(p) in committed]
    for table, paths in listed.items():
        for path in [p for p in paths if GLOB_CHARACTERS & set(p.name)]:
            store.skip_file(path, "its name has glob characters ( * ? [ { ), which no mmina writer makes")
        listed[table] = [p for p in paths if not GLOB_CHARACTERS & set(p.name)]
    return listed


def _files(store: Store, table: Table, runs: Collection[str] | None) -> list[PurePath]:
    if runs is None or not table.partitioned_by_run:
        return store.files(table.name)
    return [path for run in sorted(runs) for path in store.files(table.name, run)]


def table_files(
    store: Store, sandbox: Sandbox, listed: dict[Table, list[PurePath]], checked: Collection[Table]
) -> dict[str, dict[int, list[str]]]:
    """For each table, the names DuckDB reads the files of its view by, by schema version.
    Only the files of ``checked`` tables have their footers read (the tables a query uses);
    the others are routed by the version in their names, as they are written."""
    names = {
        sandbox.filesystem.uri(path, store.root): (table, path)
        for table, paths in listed.items()
        for path in paths
    }
    for uri, (_, path) in list(names.items()):
        if not sandbox.filesystem.reachable(path, store.root):
            store.skip_file(path, "it leads out of the store (a symbolic link)")
            del names[uri]
    footers = read_footers(sandbox.connection, [uri for uri, (table, _) in names.items() if table in checked])
    chosen: dict[str, dict[int, list[str]]] = {name: {} for name in TABLES}
    for uri, (table, path) in names.items():
        version = _version(store, table, path, footers[uri]) if uri in footers else _named_version(path)
        if version is not None:
            chosen[table.name].setdefault(version, []).append(uri)
    return chosen


def _named_version(path: PurePath) -> int:
    version = file_version(path)
    assert version is not None  # listed files are data files
    check_readable(version, str(path))
    return version


def _version(store: Store, table: Table, path: PurePath, footer: Footer | str) -> int | None:
    """The file's schema version, or None (after a warning) when the view must not read it."""
    if isinstance(footer, str):
        store.skip_file(path, footer)
        return None
    version, owner = footer.get(META_VERSION.decode()), footer.get(META_TABLE.decode())
    if version is None or not version.isdigit():
        store.skip_file(path, "it is not an mmina store file (no schema version in its metadata)")
        return None
    if owner is not None and owner != table.name:
        store.skip_file(path, f"it holds {owner} rows, not {table.name} rows")
        return None
    check_readable(int(version), str(path))
    return int(version)


def read_footers(connection: duckdb.DuckDBPyConnection, uris: Sequence[str]) -> dict[str, Footer | str]:
    """Each file's mmina metadata, or why it cannot be read."""
    if not uris:
        return {}
    try:
        return _query_footers(connection, uris)
    except duckdb.Error as exc:
        if len(uris) == 1:
            return {uris[0]: _unreadable(exc, uris[0])}
    half = len(uris) // 2
    return read_footers(connection, uris[:half]) | read_footers(connection, uris[half:])


def _query_footers(connection: duckdb.DuckDBPyConnection, uris: Sequence[str]) -> dict[str, Footer | str]:
    listing = "[" + ", ".join("'" + uri.replace("'", "''") + "'" for uri in uris) + "]"
    rows = connection.execute(
        f"SELECT file_name, decode(key), decode(value) FROM parquet_kv_metadata({listing}) "
        f"WHERE decode(key) IN ('{META_VERSION.decode()}', '{META_TABLE.decode()}')"
    ).fetchall()
    found: dict[str, Footer | str] = {uri: {} for uri in uris}
    for name, key, value in rows:
        footer = found.setdefault(name, {})
        assert isinstance(footer, dict)
        footer[key] = value
    return found


def _unreadable(exc: duckdb.Error, uri: str) -> str:
    """Why one file cannot be read; raised instead when the failure is not the file's bytes."""
    message = one_line(exc)
    if isinstance(exc, duckdb.IOException) or "Traceback" in str(exc):
        raise StoreError(f"cannot read {uri}: {message}")
    return f"it is not a readable Parquet file ({message})"
