"""The ``mmina`` command line: a thin layer over the library (one module per command group)."""
from __future__ import annotations

import click

from mmina import __version__
from mmina.cli.common import MminaGroup


@click.group(cls=MminaGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="mmina")
def cli() -> None:
    """Record, replay, re-score and analyse web agents on multihop, multimodal (MMInA) tasks.

    \b
    Example (record the built-in suite with the oracle agent, then query it):
      mmina record
      mmina sql "select task_id, live_hops, n_hops from episodes"
    """


def _register() -> None:
    from mmina.cli import eval_steps, fixtures, imports, record, replay, report, rescore, sql, store, tasks

    for command in (record.record, sql.sql, store.store, tasks.tasks, fixtures.fixtures, rescore.rescore,
                    replay.replay, imports.imports, report.report, report.compare, report.view,
                    eval_steps.eval_steps):
        cli.add_command(command)


_register()


def main() -> None:
    cli(prog_name="mmina")
