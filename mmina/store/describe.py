"""What SQL over a store can read: every table and convenience view with its columns, their
DuckDB types and their meaning (``mmina sql --schema``, docs/store.md).

The types are DuckDB's own, from ``DESCRIBE`` of the views created over empty tables: what a
user's ``describe episode_scores`` shows, whatever the view's SQL computes, so they cannot
drift from the SQL. The meanings come from ``schema.py`` (tables) and ``convenience.py`` (views).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import duckdb

from mmina.errors import QueryError
from mmina.store.convenience import CONVENIENCE_VIEWS
from mmina.store.schema import TABLES, Table
from mmina.store.views import empty_table_sql

TABLE, VIEW = "table", "view"


@dataclass(frozen=True)
class ColumnInfo:
    """One column as SQL sees it, with what it means."""

    name: str
    type: str
    """DuckDB type, as ``DESCRIBE`` shows it."""
    meaning: str
    source: str = ""
    """For a view's column passed through from a table: that table's name."""


@dataclass(frozen=True)
class Relation:
    """A table or a convenience view as SQL sees it."""

    name: str
    kind: str
    """``table`` or ``view``."""
    doc: str
    columns: tuple[ColumnInfo, ...]


class UnknownRelationError(QueryError):
    """A name given to ``mmina sql --schema`` that is neither a table nor a view."""


def relation_names() -> list[str]:
    """Every table, then every convenience view, in the order the store defines them."""
    return [*TABLES, *CONVENIENCE_VIEWS]


def describe(names: Sequence[str] = ()) -> list[Relation]:
    """The tables and views named (all when none; names as SQL reads them, in any case), in the
    order given; an unknown name raises :class:`UnknownRelationError` listing those there are."""
    wanted = list(dict.fromkeys(name.lower() for name in names)) or relation_names()
    unknown = [name for name in wanted if name not in relation_names()]
    if unknown:
        raise UnknownRelationError(
            f"no table or view named {', '.join(map(repr, unknown))} (tables: "
            f"{', '.join(TABLES)}; views: {', '.join(CONVENIENCE_VIEWS)})"
        )
    types = column_types()
    return [_relation(name, types[name]) for name in wanted]


@cache
def column_types() -> dict[str, tuple[tuple[str, str], ...]]:
    """(column, DuckDB type) of every table and view, from views over empty tables: no store
    needed, and the same for every store (older ones are upgraded to these columns on read)."""
    connection = duckdb.connect()
    try:
        for table in TABLES.values():
            connection.execute(f"CREATE VIEW {table.name} AS {empty_table_sql(table)}")
        for name, view in CONVENIENCE_VIEWS.items():
            connection.execute(f"CREATE VIEW {name} AS {view.sql}")
        return {
            name: tuple((row[0], row[1]) for row in connection.execute(f"DESCRIBE {name}").fetchall())
            for name in relation_names()
        }
    finally:
        connection.close()


def _relation(name: str, types: tuple[tuple[str, str], ...]) -> Relation:
    """A table's columns mean what ``schema.py`` says; a view's what ``convenience.py`` says,
    or what the table they pass through from says."""
    if name in TABLES:
        docs = TABLES[name].column_docs
        return Relation(name, TABLE, TABLES[name].doc, tuple(ColumnInfo(c, t, docs[c]) for c, t in types))
    view = CONVENIENCE_VIEWS[name]
    return Relation(
        name,
        VIEW,
        view.doc,
        tuple(ColumnInfo(c, t, view.column_doc(c), _name(view.source(c))) for c, t in types),
    )


def _name(table: Table | None) -> str:
    return table.name if table is not None else ""
