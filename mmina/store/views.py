"""DuckDB views named after the store's tables, in a sandboxed connection (``sandbox.py``).

Each view reads an explicit list of files, the ones ``footers.py`` found readable and of
the right table, routed by the schema version in their footer: current files are read as
they are, older ones through their migrations' SQL, and all are unioned by column name.
Steps and requests of uncommitted episodes (a writer killed between renames) are filtered
out, and an episode whose row is in two files (a copied file) is shown once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import PurePath

import duckdb

from mmina.errors import CorruptFileError, MminaError, QueryError
from mmina.store.convenience import CONVENIENCE_VIEWS
from mmina.store.footers import candidates, table_files
from mmina.store.migrations import chain
from mmina.store.sandbox import Sandbox, open_sandbox
from mmina.store.schema import EPISODES, TABLES, Table
from mmina.store.sqlcheck import one_line
from mmina.store.sqltypes import duckdb_type
from mmina.store.store import EPISODE_CHILDREN, Store


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _read_parquet(table: Table, uris: list[str]) -> str:
    hive = (
        ", hive_partitioning = true, hive_types = {'run_id': 'VARCHAR'}" if table.partitioned_by_run else ""
    )
    filename = ", filename = true" if table is EPISODES else ""
    return f"SELECT * FROM read_parquet([{', '.join(map(_quote, uris))}]{hive}{filename})"


def empty_table_sql(table: Table) -> str:
    """A SELECT of no rows with the columns and types of ``table``'s view."""
    columns = [f'NULL::{duckdb_type(c.type)} AS "{c.name}"' for c in table.columns]
    if table.partitioned_by_run:
        columns.append('NULL::VARCHAR AS "run_id"')
    return f"SELECT {', '.join(columns)} WHERE false"


def table_sql(table: Table, files: dict[int, list[str]], store: Store) -> str:
    """The SELECT behind one table's view over ``files`` (``mmina://`` names by schema version)."""
    if not files:
        return empty_table_sql(table)
    parts = []
    for version, uris in sorted(files.items()):
        sql = _read_parquet(table, uris)
        for migration in chain(table, version, store.migrations):
            sql = migration.view_sql.format(inner=sql)
        parts.append(sql)
    body = " UNION ALL BY NAME ".join(f"({p})" for p in parts)
    columns = ", ".join(f'"{name}"' for name in _view_columns(table))
    if table is EPISODES:  # one row per episode, the first file's, even if a file was copied
        return (
            f"SELECT {columns} FROM ({body}) "
            "QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY filename) = 1"
        )
    where = " WHERE episode_id IN (SELECT episode_id FROM episodes)" if table in EPISODE_CHILDREN else ""
    return f"SELECT {columns} FROM ({body}){where}"


def _view_columns(table: Table) -> list[str]:
    """The schema's column order, whichever versions of files are present."""
    return [*table.column_names, *(["run_id"] if table.partitioned_by_run else [])]


def views_sql(
    store: Store, sandbox: Sandbox, listed: dict[Table, list[PurePath]], checked: Collection[Table]
) -> dict[str, str]:
    """CREATE VIEW statements for every table and convenience view, over the ``listed`` files
    (those of ``checked`` tables found readable)."""
    files = table_files(store, sandbox, listed, checked)
    statements = {
        t.name: f"CREATE OR REPLACE VIEW {t.name} AS {table_sql(t, files[t.name], store)}"
        for t in TABLES.values()
    }
    statements |= {
        name: f"CREATE OR REPLACE VIEW {name} AS {view.sql.strip()}"
        for name, view in CONVENIENCE_VIEWS.items()
    }
    return statements


@dataclass
class StoreConnection:
    """A sandboxed DuckDB connection (or a cursor of one) with the store's views; ``broken``
    maps views that could not be created to the reason, so only queries that use them fail."""

    connection: duckdb.DuckDBPyConnection
    broken: dict[str, MminaError] = field(default_factory=dict)
    sandbox: Sandbox | None = None
    """The sandbox this connection owns (None for a cursor), closed with it."""

    def close(self) -> None:
        if self.sandbox is None:
            self.connection.close()
        else:
            self.sandbox.close()


def used_tables(sql: str) -> list[Table]:
    """The tables ``sql`` may read, directly or through the views: every name of a view among
    its tokens (identifiers, keywords, strings: ``query_table('steps')``), so a name too many
    at worst, with the tables those views read (the convenience views' tables; ``episodes``
    for ``steps`` and ``requests``, whose views keep committed episodes only: left unchecked,
    an unreadable ``episodes`` file broke them); all tables when it does not tokenize."""
    try:
        tokens = {text.strip().strip("'\"").lower() for text in _token_texts(sql)}
    except (duckdb.Error, TypeError):  # not SQL, or not UTF-8: refused later, whatever it reads
        return list(TABLES.values())
    names = {name for name in [*TABLES, *CONVENIENCE_VIEWS] if name in tokens}
    for name in [n for n in CONVENIENCE_VIEWS if n in names]:
        names |= {t.name for t in used_tables(CONVENIENCE_VIEWS[name].sql)}
    if any(t.name in names for t in EPISODE_CHILDREN):  # their views keep the committed episodes' rows
        names.add(EPISODES.name)
    return [table for table in TABLES.values() if table.name in names]


def _token_texts(sql: str) -> list[str]:
    tokens = duckdb.tokenize(sql)
    ends = [start for start, _ in tokens[1:]] + [len(sql)]
    return [sql[start:end] for (start, _), end in zip(tokens, ends)]


def connect(
    store: Store,
    runs: Collection[str] | None = None,
    only: Collection[str] | None = None,
    sql: str | None = None,
) -> StoreConnection:
    """An in-memory DuckDB connection over the store that can read its files and nothing else
    (see ``sandbox.py``); an object store is read through the same fsspec filesystem mmina
    uses (credentials from the environment), so DuckDB needs no httpfs extension.

    With ``runs``, the run-partitioned views read only those runs' folders: the same rows for
    those runs as an unscoped connection gives (every row of a run lives in its folder), at
    a cost that no longer grows with the rest of the store. With ``only``, just the views named
    are made (e.g. for a server that keeps a connection per run). With ``sql`` (what will run),
    only the tables it uses have every file's footer checked (see ``footers.py``)."""
    listed = candidates(store, runs)
    checked = (
        used_tables(sql)
        if sql is not None
        else used_tables(" ".join(only))
        if only is not None
        else list(TABLES.values())
    )
    sandbox = open_sandbox(store.backend, [path for paths in listed.values() for path in paths])
    db = StoreConnection(sandbox.connection, sandbox=sandbox)
    try:
        for name, statement in views_sql(store, sandbox, listed, checked).items():
            if only is not None and name not in only:
                continue
            try:
                db.connection.execute(statement)
            except duckdb.Error as exc:
                db.broken[name] = read_error(exc)
    except BaseException:
        db.close()
        raise
    return db


def read_error(exc: duckdb.Error) -> MminaError:
    """A DuckDB error as one line: unreadable store files point to ``store verify``."""
    message = one_line(exc)
    lowered = message.lower()
    if "parquet" in lowered and any(
        w in lowered for w in ("corrupt", "magic", "too small", "no magic", "invalid")
    ):
        return CorruptFileError(f"cannot read the store: {message} (run `mmina store verify`)")
    if isinstance(exc, duckdb.PermissionException) or message.startswith("PermissionError"):
        return QueryError(f"mmina sql reads the store's own files only, and never writes: {message}")
    if isinstance(exc, (duckdb.CatalogException, duckdb.BinderException)):
        return QueryError(
            f"{message}{_nearest_relation(message)} (`mmina sql --schema` lists every table and view "
            "with its columns)"
        )
    return QueryError(message)


MISSING_RELATION = re.compile(r"(?:Table|View) with name (\S+) does not exist", re.IGNORECASE)


def _nearest_relation(message: str) -> str:
    """`` Did you mean "episodes"?`` for a table or view named nearly as one of the store's, else ""."""
    missing = MISSING_RELATION.search(message)
    if missing is None or "did you mean" in message.lower():
        return ""
    close = difflib.get_close_matches(missing.group(1).strip('"').lower(), [*TABLES, *CONVENIENCE_VIEWS], n=1)
    return f' Did you mean "{close[0]}"?' if close else ""
