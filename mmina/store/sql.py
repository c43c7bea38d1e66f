"""Read-only SQL over a store, in a sandbox, with a deadline: the one entry point for any SQL
that comes from outside (``mmina sql``, and the query box of ``mmina serve``).

Each call opens its own sandboxed connection (``sandbox.py``: the store's files, read-only,
and nothing else), checks that every statement only reads (``sqlcheck.py``), and runs them
on a worker thread while the caller waits: past ``timeout_s``, or on Ctrl-C in the caller,
the query is interrupted (DuckDB checks for that between steps of its work) and the call
ends with a one-line error (or the ``KeyboardInterrupt``). Nothing is shared between calls,
so a server may run several at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from mmina.errors import MminaError, QueryError
from mmina.store.defaults import DEFAULT_TIMEOUT_S
from mmina.store.sqlcheck import check_text, read_statements
from mmina.store.store import Store
from mmina.store.views import StoreConnection, connect, read_error
from mmina.unicode import valid_text

STOP_GRACE_S = 30.0
"""How long an interrupted query is given to stop before the caller stops waiting for it."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False
    """True when ``max_rows`` cut the result short."""


class QueryTimeoutError(QueryError):
    """A query ran past its deadline and was stopped."""


def run_query(
    store: Store, query: str, timeout_s: float | None = DEFAULT_TIMEOUT_S, max_rows: int | None = None
) -> QueryResult:
    """Run ``query`` (one read statement) and return its result, at most ``max_rows`` rows of
    it. Raises :class:`QueryError` for SQL that is not a read, holds several statements, is
    invalid or failing, and :class:`QueryTimeoutError` past ``timeout_s`` seconds."""
    check_text(query)
    db = connect(store, sql=query)
    job: Job | None = None
    try:
        statements = read_statements(db.connection, query)
        job = Job(lambda: _execute(db, statements, max_rows))
        return job.wait(db, timeout_s)
    finally:
        if job is None or not job.running:
            db.close()  # a query that would not stop still uses it: the process' end frees it


def query_text(data: bytes) -> str:
    """The text of a query read as bytes (a file, standard input), a UTF-8 byte order mark
    dropped; a byte that is not UTF-8 is kept as a surrogate, so :func:`run_query` refuses it
    in one line naming the byte, as it does for a query given on the command line."""
    return data.decode("utf-8-sig", "surrogateescape")


def read_query_file(path: str | Path) -> str:
    """The query kept in the file ``path`` (a pipe such as ``<(...)`` too); a path that cannot
    be read is one line of :class:`QueryError` saying why."""
    try:
        with open(path, "rb") as file:
            return query_text(file.read())
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise QueryError(f"cannot read the query file {valid_text(str(path))}: {reason}") from None


def _execute(db: StoreConnection, statements: list[duckdb.Statement], max_rows: int | None) -> QueryResult:
    try:
        result = None
        for statement in statements:
            result = db.connection.execute(statement)
        assert result is not None
        columns = [d[0] for d in result.description or []]
        if max_rows is None:
            return QueryResult(columns, result.fetchall())
        rows = result.fetchmany(max_rows + 1)
        return QueryResult(columns, rows[:max_rows], truncated=len(rows) > max_rows)
    except duckdb.Error as exc:
        raise _broken_view(db, exc) or read_error(exc) from None


class Job:
    """Work on a thread of its own, so that the caller stays free to stop it: the caller's
    thread is the one that receives Ctrl-C, and a server's request its deadline."""

    def __init__(self, work: Callable[[], QueryResult]) -> None:
        self._work = work
        self._outcome: dict[str, Any] = {}
        self._done = threading.Event()  # not Thread.join: a join cut short by Ctrl-C may say the thread ended
        threading.Thread(target=self._run, name="mmina-sql", daemon=True).start()

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def _run(self) -> None:
        try:
            self._outcome["result"] = self._work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._outcome["error"] = exc
        finally:
            self._done.set()

    def wait(self, db: StoreConnection, timeout_s: float | None) -> QueryResult:
        """The result; past ``timeout_s`` (or on KeyboardInterrupt) the query is interrupted."""
        try:
            self._done.wait(timeout_s or None)
        except KeyboardInterrupt:
            self._interrupt(db)
            raise
        if self.running:
            self._interrupt(db)
            raise QueryTimeoutError(
                f"the query ran longer than {timeout_s:g} s and was stopped "
                f"(give it more time with --timeout SECONDS, or --timeout 0 for no limit)"
            )
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome["result"]

    def _interrupt(self, db: StoreConnection) -> None:
        """Ask DuckDB to stop, and give it ``STOP_GRACE_S`` to do so."""
        db.connection.interrupt()
        self._done.wait(STOP_GRACE_S)


def _broken_view(db: StoreConnection, exc: duckdb.Error) -> MminaError | None:
    """A query on a view that could not be created fails with the view's own reason."""
    message = str(exc)
    return next((error for name, error in db.broken.items() if f"{name} does not exist" in message), None)
