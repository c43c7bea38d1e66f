"""``mmina import harness``: runs of the official MMInA / WebArena harness as episodes of a new run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import echo, print_json, progress_bar

if TYPE_CHECKING:
    from mmina.importers.harness import ImportResult


@click.command(name="harness")
@click.argument("path", type=click.Path(path_type=str))
@click.option(
    "--run-id",
    metavar="NAME",
    help="Run to import into (default: time and 'harness'); the same "
    "folder into the same run skips the episodes already there.",
)
@click.option(
    "--log",
    "logs",
    multiple=True,
    metavar="FILE",
    help="A harness log with [Result] lines kept elsewhere (repeatable). Logs under PATH and those "
    "listed in PATH/log_files.txt are found by themselves.",
)
@store_option
@format_option("table", "json")
def harness(path: str, logs: tuple[str, ...], fmt: str, run_id: str | None, store_path: str | None) -> None:
    """Import a result folder of the official MMInA / WebArena harness. Its run.py writes such folders.

    PATH is the harness's --result_dir: one render_<task_id>.html per task (the URL,
    observation, screenshot and prediction of every step), its config.json, and the logs
    with the `[Result] (PASS|FAIL) <config_file>` lines (log_files/*.log, found through
    log_files.txt). Each task becomes an episode with its steps — the action converted to
    mmina's grammar, the raw prediction kept as model output — and the log's verdict becomes
    scores of the evaluator `harness` (hop rows too when MMInA's `[Result] success rate: a/b`
    line is there), so `mmina report --evaluator harness` runs on it. Files that cannot be
    read are listed and skipped; nothing is written unless something can be imported.

    \b
    Example:
      mmina import harness cache/results_20240415 --run-id gpt4v-normal
      mmina report --run gpt4v-normal --evaluator harness
      mmina rescore --run gpt4v-normal --evaluator hops
    """
    from mmina.importers.harness import import_harness

    with _progress() as progress:
        result = import_harness(open_store(store_path, create=True), path, run_id, logs, progress)
    if fmt == "json":
        print_json(result.as_json())
        return
    _print_summary(result)


def _print_summary(result: ImportResult) -> None:
    verdicts = result.passed + result.failed
    sr = f"{result.task_sr:.1%} ({result.passed}/{verdicts})" if result.task_sr is not None else "-"
    echo(
        f"run {result.run_id}: {result.imported} episode(s) imported from {result.files} render file(s) "
        f"({result.already} already there, {len(result.skipped)} skipped); task SR by the harness log {sr}, "
        f"{len(result.without_result)} without a [Result] line; stored in {result.store}"
    )
    for task_id in result.without_result:
        echo(f"  no verdict in the logs: {task_id} (scored unclear)")
    for file, reason in result.skipped:
        echo(f"  skipped {file}: {reason}")


@contextmanager
def _progress() -> Iterator[Callable[[str, int, int], None] | None]:
    """A transient bar over the files, checked then imported (on a terminal only)."""
    with progress_bar() as bar:
        if bar is None:
            yield None
            return
        files = bar.add_task("checking", total=None)

        def update(phase: str, done: int, total: int) -> None:
            bar.update(files, description=phase, completed=done, total=total)

        yield update
