"""The ``mmina`` command line: a thin layer over the library (one module per command group)."""

from __future__ import annotations

import gc
import os
import signal
import sys

import click

from mmina import __version__
from mmina.cli.common import MminaGroup, ctrl_c_interrupts
from mmina.errors import first_line

COMMANDS = {
    "record": "mmina.cli.record:record",
    "replay": "mmina.cli.replay:replay",
    "rescore": "mmina.cli.rescore:rescore",
    "eval-steps": "mmina.cli.eval_steps:eval_steps",
    "runs": "mmina.cli.runs:runs",
    "report": "mmina.cli.report:report",
    "compare": "mmina.cli.report:compare",
    "view": "mmina.cli.report:view",
    "sql": "mmina.cli.sql:sql",
    "store": "mmina.cli.store:store",
    "tasks": "mmina.cli.tasks:tasks",
    "fixtures": "mmina.cli.fixtures:fixtures",
    "import": "mmina.cli.imports:imports",
    "serve": "mmina.cli.serve:serve",
    "export": "mmina.cli.export:export",
    "agreement": "mmina.cli.agreement:agreement",
    "rankings": "mmina.cli.rankings:rankings",
    "doctor": "mmina.cli.doctor:doctor",
}
"""Every command: its name and where it is (``module:attribute``), imported only when it is
used, so ``mmina --help`` starts fast. A new command is one line here."""


@click.group(
    cls=MminaGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="mmina")
def cli() -> None:
    """Record, replay, re-score and analyse web agents on multihop, multimodal (MMInA) tasks.

    \b
    Example (record one task with the oracle agent, a few seconds, then look at it):
      mmina record --task normal/1
      mmina runs
      mmina report --run latest

    `mmina record` alone records the whole built-in suite: 100 tasks, 3-6 minutes.
    """


TRACEBACK_ENV = "MMINA_TRACEBACK"


def main(args: list[str] | None = None, prog_name: str = "mmina") -> None:
    """The ``mmina`` script (``args``: the command line's, by default). Ctrl-C interrupts it
    however it was started (``ctrl_c_interrupts``). Library errors are one line already
    (``MminaGroup``); anything else is a bug in mmina, and still one line with its type
    (``MMINA_TRACEBACK=1`` re-raises it, traceback and all, for a bug report)."""
    ctrl_c_interrupts()
    try:
        cli(args, prog_name=prog_name)
    except Exception as exc:  # noqa: BLE001 - the last line of defence against a traceback
        if os.environ.get(TRACEBACK_ENV):
            raise
        message = first_line(exc).encode("utf-8", "backslashreplace").decode("utf-8")
        click.echo(
            f"Error: unexpected {type(exc).__name__}: {message} (a bug in mmina; set {TRACEBACK_ENV}=1 "
            "to see where)",
            err=True,
        )
        sys.exit(1)
    finally:
        # The command is done: its output is written (or "Interrupted." said). A Ctrl-C from now
        # on would only end the process by the signal during the teardown, its exit code and any
        # output still buffered lost (a run's summary among them), with a stray KeyboardInterrupt.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # Arrow objects (files read through fsspec, e.g. from s3://) freed while Arrow is still
        # whole: freed in the interpreter's final teardown instead, their threads can abort the
        # process after the command succeeded ("terminate called without an active exception",
        # apache/arrow#34314, #39162); then the object stores' connections and fsspec's event
        # loop are ended here, not by the teardown (mmina.store.objects.close_filesystems).
        gc.collect()
        if "mmina.store.objects" in sys.modules:  # an object store may have been used (--help never loads it)
            from mmina.store.objects import close_filesystems

            close_filesystems()
