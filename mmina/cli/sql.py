"""``mmina sql``: read-only DuckDB SQL over the store."""
from __future__ import annotations

import click

from mmina.cli.common import format_option, open_store, render_rows, store_option
from mmina.store.schema import TABLES
from mmina.store.sql import run_query
from mmina.store.docs import column_rows
from mmina.store.views import CONVENIENCE_VIEWS


@click.command()
@click.argument("query", required=False)
@click.option("--schema", is_flag=True, help="Show the tables and views with their columns instead of querying.")
@store_option
@format_option()
def sql(query: str | None, schema: bool, store_path: str | None, fmt: str) -> None:
    """Run a read-only SQL QUERY (DuckDB) over the store's tables.

    Views named after the tables (runs, tasks, episodes, steps, requests, scores,
    judge_cache, blobs) and convenience views (episode_hops, hop_buckets, latest_scores) are defined.
    Only SELECT and EXPLAIN are accepted; nothing in the store can be changed.

    \b
    Examples:
      mmina sql "select count(*) from steps"
      mmina sql "select task_id, live_hops, n_hops from episodes" --format json
      mmina sql --schema
      mmina sql "select count(*) from episodes" --store s3://my-bucket/mmina
    """
    if schema:
        _print_schema(fmt)
        return
    if not query:
        raise click.UsageError("give a QUERY, or --schema to see the tables")
    result = run_query(open_store(store_path), query)
    render_rows(result.columns, result.rows, fmt)


def _print_schema(fmt: str) -> None:
    rows = [(t.name, *column) for t in TABLES.values() for column in column_rows(t)]
    rows += [(name, "", "view", doc) for name, (doc, _) in CONVENIENCE_VIEWS.items()]
    render_rows(["table", "column", "type", "meaning"], rows, fmt)
