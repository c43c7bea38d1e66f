"""``mmina import warc``: a WARC made by any tool as a run an agent can be replayed against (thin:
the work is ``mmina.interchange.warc_import``, imported when the command runs)."""

from __future__ import annotations

from pathlib import Path

import click

from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import echo, print_json, stderr_is_terminal


@click.command(name="warc")
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--tasks",
    "tasks_path",
    metavar="PATH",
    help="The tasks to run on the archive: an MMInA task file or folder (their start URLs must be in it). "
    "Without it, a WARC from `mmina export warc` is restored as the run it was.",
)
@click.option(
    "--task", "task_ids", multiple=True, metavar="ID", help="Only this task of --tasks (repeatable)."
)
@click.option(
    "--run-id",
    metavar="NAME",
    help="Run to create (default: time and 'warc'; restoring: the exported run's id).",
)
@store_option
@format_option("table", "json")
def warc(
    paths: tuple[Path, ...],
    tasks_path: str | None,
    task_ids: tuple[str, ...],
    fmt: str,
    run_id: str | None,
    store_path: str | None,
) -> None:
    """Import WARC files as a replayable run. Files written by pywb, Browsertrix, wget
    --warc-file, mmina export warc and others.

    Every response and revisit record becomes an archived exchange (bodies decoded:
    chunked transfer and gzip/deflate/br undone; secrets redacted as the recorder does),
    and every task of --tasks an episode over that archive, so `mmina replay --agent`
    runs an agent on them offline: exact, fuzzy and nearest matching, and the requests
    the archive lacks reported as coverage gaps. A WebSocket archived as IIPC
    warc-specifications #115 proposes (its frames in a resource record) is played by the
    clock. Without --tasks, a WARC written by `mmina export warc` is restored as the run it
    was (tasks, episodes, steps, screenshots, traffic), for `mmina replay --run`. Nothing is
    written unless every file reads.

    \b
    Examples:
      mmina import warc capture.warc.gz --tasks my-tasks/ --run-id captured
      mmina replay --agent openai --model gpt-4o --run captured
      mmina import warc shared-run.warc.gz --store ./restored && mmina replay --run latest --store ./restored
    """
    from mmina.interchange.warc_import import import_warc

    progress = (
        (lambda done: click.echo(f"\rread {done} record(s)", err=True, nl=False))
        if stderr_is_terminal()
        else None
    )
    result = import_warc(
        open_store(store_path, create=True), list(paths), tasks_path, run_id, task_ids, progress
    )
    if fmt == "json":
        print_json(result.as_json())
        return
    skipped = ", ".join(f"{count} {why}" for why, count in sorted(result.skipped.items())) or "none"
    restored = (
        f", {result.restored_episodes} episode(s) restored with their steps"
        if result.restored_episodes
        else ""
    )
    echo(
        f"run {result.run_id}: {result.exchanges} exchange(s) from {result.records} record(s) of "
        f"{result.files} file(s) ({result.revisits} revisit(s), {result.sockets} socket(s), "
        f"{result.undecodable} undecodable body(ies); skipped: {skipped}) for {result.tasks} task(s)"
        f"{restored}; stored in {result.store}"
    )
