"""``mmina sql``: read-only DuckDB SQL over the store, and the columns it can read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import echo, print_json, print_table, render_rows
from mmina.store.defaults import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from mmina.store.describe import Relation

STDIN = "-"
"""The query argument (or ``-f`` file) that means standard input."""


@click.command()
@click.argument("args", nargs=-1, metavar="[QUERY | - | NAME...]")
@click.option(
    "-f",
    "--file",
    "query_file",
    metavar="FILE",
    help="Read the query from FILE (-: standard input) instead of the command line.",
)
@click.option(
    "--schema",
    is_flag=True,
    help="Show the tables and views instead of querying: each column's type and meaning (only the "
    "tables and views NAMEd, if any).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Stop the query after this long (0: no limit). Ctrl-C stops it too.",
)
@store_option
@format_option()
def sql(
    args: tuple[str, ...],
    query_file: str | None,
    schema: bool,
    timeout_s: float,
    store_path: str | None,
    fmt: str,
) -> None:
    """Run a read-only SQL QUERY (DuckDB) over the store's tables. It runs in a sandbox.

    The query is the argument, the content of a file (-f FILE), or standard input (-). Views
    named after the tables (runs, tasks, episodes, steps, requests, scores, judge_cache, blobs)
    and convenience views (episode_scores, latest_scores, episode_hops, hop_buckets,
    step_messages) are defined; --schema lists the columns of each, views included, with
    their DuckDB types and meanings (--schema NAME...: only those; no store needed). Only reads
    run: SELECT (with WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, PIVOT) and EXPLAIN
    [ANALYZE] of a read. Anything that writes is refused, however wrapped (COPY, EXPORT,
    ATTACH, INSERT in a WITH ...), and the query can read the store's own files only (as
    mmina://PATH, e.g. read_text('mmina://mmina-store.json')), nothing else on the machine or
    the network. A damaged file is skipped with a warning naming it.

    \b
    Examples:
      mmina sql "select count(*) from steps"
      mmina sql "select task_id, live_hops, n_hops from episodes" --format json
      mmina sql -f table2.sql --format csv
      echo "select * from episode_scores" | mmina sql -
      mmina sql --schema
      mmina sql --schema episode_scores steps --format json
      mmina sql "select count(*) from episodes" --store s3://my-bucket/mmina
      mmina sql "explain analyze select count(*) from steps" --timeout 30
    """
    if schema:
        if query_file is not None:
            raise click.UsageError("--schema takes the NAMEs of tables and views, not a query file")
        _print_schema(args, fmt)
        return
    from mmina.store.sql import run_query

    query = _query(args, query_file)  # before the store: a usage error needs none
    result = run_query(open_store(store_path), query, timeout_s=timeout_s or None)
    render_rows(result.columns, result.rows, fmt)


def _query(args: tuple[str, ...], query_file: str | None) -> str:
    """The query: the one argument, the file of ``-f``, or standard input (``-`` as either)."""
    from mmina.store.sql import query_text, read_query_file

    if len(args) > 1:
        raise click.UsageError('give the QUERY as one argument: quote it, as in mmina sql "select 1"')
    if args and query_file is not None:
        raise click.UsageError("give a QUERY or -f FILE, not both")
    if not args and query_file is None:
        raise click.UsageError(
            "give a QUERY, -f FILE, or - to read it from standard input (--schema shows the tables and views)"
        )
    if args and args[0] != STDIN:
        return args[0]
    if query_file is not None and query_file != STDIN:
        return read_query_file(query_file)
    with click.open_file(STDIN, "rb") as stdin:
        return query_text(stdin.read())


def _print_schema(names: tuple[str, ...], fmt: str) -> None:
    """The tables and views named (all when none): a table per relation for people, one row
    per column in CSV, and a list of relations with their columns in JSON."""
    from mmina.store.describe import describe

    relations = describe(names)
    if fmt == "json":
        print_json([_relation_json(r) for r in relations])
    elif fmt == "csv":
        render_rows(
            ["name", "kind", "column", "type", "meaning", "from"],
            [(r.name, r.kind, c.name, c.type, c.meaning, c.source) for r in relations for c in r.columns],
            "csv",
        )
    else:
        for position, relation in enumerate(relations):
            if position:
                echo()
            _print_relation(relation)


def _print_relation(relation: Relation) -> None:
    """One table or view: its name, kind and meaning above its columns; a view's also say the
    table whose column they pass through (``from``), whose meaning they keep."""
    from mmina.store.describe import VIEW

    view = relation.kind == VIEW
    rows = [[c.name, c.type, c.meaning, *([c.source] if view else [])] for c in relation.columns]
    print_table(
        ["column", "type", "meaning", *(["from"] if view else [])],
        rows,
        title=f"{relation.name} ({relation.kind}): {relation.doc}",
        title_justify="left",
    )


def _relation_json(relation: Relation) -> dict[str, Any]:
    return {
        "name": relation.name,
        "kind": relation.kind,
        "doc": relation.doc,
        "columns": [
            {"name": c.name, "type": c.type, "meaning": c.meaning, "from": c.source or None}
            for c in relation.columns
        ],
    }
