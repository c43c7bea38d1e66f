"""``mmina sql``: read-only DuckDB SQL over the store."""
from __future__ import annotations

import click

from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import render_rows
from mmina.store.defaults import DEFAULT_TIMEOUT_S


@click.command()
@click.argument("query", required=False)
@click.option("--schema", is_flag=True, help="Show the tables and views with their columns instead of querying.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=DEFAULT_TIMEOUT_S, show_default=True,
              metavar="SECONDS", help="Stop the query after this long (0: no limit). Ctrl-C stops it too.")
@store_option
@format_option()
def sql(query: str | None, schema: bool, timeout_s: float, store_path: str | None, fmt: str) -> None:
    """Run a read-only SQL QUERY (DuckDB) over the store's tables, in a sandbox.

    Views named after the tables (runs, tasks, episodes, steps, requests, scores,
    judge_cache, blobs) and convenience views (episode_hops, hop_buckets, latest_scores, ...)
    are defined. Only reads run: SELECT (with WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE,
    PIVOT) and EXPLAIN [ANALYZE] of a read. Anything that writes is refused, however wrapped
    (COPY, EXPORT, ATTACH, INSERT in a WITH ...), and the query can read the store's own files
    only (as mmina://PATH, e.g. read_text('mmina://mmina-store.json')), nothing else on the
    machine or the network. A damaged file is skipped with a warning naming it.

    \b
    Examples:
      mmina sql "select count(*) from steps"
      mmina sql "select task_id, live_hops, n_hops from episodes" --format json
      mmina sql --schema
      mmina sql "select count(*) from episodes" --store s3://my-bucket/mmina
      mmina sql "explain analyze select count(*) from steps" --timeout 30
    """
    from mmina.store.sql import run_query

    if schema:
        _print_schema(fmt)
        return
    if query is None:
        raise click.UsageError("give a QUERY, or --schema to see the tables")
    result = run_query(open_store(store_path), query, timeout_s=timeout_s or None)
    render_rows(result.columns, result.rows, fmt)


def _print_schema(fmt: str) -> None:
    from mmina.store.docs import column_rows
    from mmina.store.schema import TABLES
    from mmina.store.views import CONVENIENCE_VIEWS

    rows = [(t.name, *column) for t in TABLES.values() for column in column_rows(t)]
    rows += [(name, "", "view", doc) for name, (doc, _) in CONVENIENCE_VIEWS.items()]
    render_rows(["table", "column", "type", "meaning"], rows, fmt)
