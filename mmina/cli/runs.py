"""``mmina runs``: the runs of a store, the latest first."""

from __future__ import annotations

import click

from mmina.analysis.names import DEFAULT_EVALUATOR
from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import print_json, print_tables, write_csv


@click.command()
@click.option(
    "--evaluator",
    default=DEFAULT_EVALUATOR,
    show_default=True,
    metavar="NAME",
    help="Whose verdicts give the task and hop SR (the latest batch per episode).",
)
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Only the N latest runs.")
@store_option
@format_option()
def runs(evaluator: str, limit: int | None, store_path: str | None, fmt: str) -> None:
    """List the runs of the store, the latest first. Each shows its id, start, agent, model, tasks
    (done of the run's), episodes, errors, task SR and hop SR with 95% intervals, and status
    (complete, partial or empty; "unscored" when the evaluator has no verdict on it; what the model
    endpoint's faults cost: attempts retried, seconds waited). Tasks whose episode an infrastructure
    error ended are not done (record --resume records them again), and an episode a re-run
    superseded counts in no column but episodes.

    Any command that takes --run accepts a run's id, an unambiguous prefix of it, or latest.

    \b
    Examples:
      mmina runs
      mmina runs --limit 5 --format json
      mmina runs --evaluator mmina_official --format csv
      mmina report --run latest
    """
    from dataclasses import replace

    from mmina.analysis.run_list import list_runs

    table = list_runs(open_store(store_path), evaluator)
    table = replace(table, rows=table.rows[:limit] if limit else table.rows)
    if fmt == "json":
        print_json(table.records())
    elif fmt == "csv":
        write_csv(table.columns, table.rows)
    else:
        print_tables([table])
