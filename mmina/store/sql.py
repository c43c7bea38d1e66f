"""Read-only SQL over a store: only queries that read (SELECT, EXPLAIN) are accepted."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from mmina.errors import MminaError, QueryError
from mmina.store.store import Store
from mmina.store.views import StoreConnection, connect, read_error

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def check_read_only(connection: duckdb.DuckDBPyConnection, query: str) -> None:
    """Refuse anything but reads, before running any of it."""
    try:
        statements = connection.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"invalid SQL: {str(exc).splitlines()[0]}") from None
    if not statements:
        raise QueryError("empty query")
    for statement in statements:
        if statement.type not in ALLOWED:
            kind = str(statement.type).rsplit(".", 1)[-1]
            raise QueryError(f"mmina sql is read-only: {kind} statements are not allowed (only SELECT and EXPLAIN)")


def run_query(store: Store, query: str) -> QueryResult:
    """Run ``query`` (one or more read statements) and return the last statement's result."""
    db = connect(store)
    try:
        check_read_only(db.connection, query)
        db.connection.execute("SET lock_configuration = true")
        result = None
        for statement in db.connection.extract_statements(query):
            result = db.connection.execute(statement)
        assert result is not None
        columns = [d[0] for d in result.description or []]
        return QueryResult(columns, result.fetchall())
    except duckdb.Error as exc:
        raise _broken_view(db, exc) or read_error(exc) from None
    finally:
        db.close()


def _broken_view(db: StoreConnection, exc: duckdb.Error) -> MminaError | None:
    """A query on a view that could not be created fails with the view's own reason."""
    message = str(exc)
    return next((error for name, error in db.broken.items() if f"{name} does not exist" in message), None)
