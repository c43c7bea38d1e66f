"""``mmina import mind2web``: Multimodal-Mind2Web samples as single-step episodes of a new run."""

from __future__ import annotations

import click

from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import echo, print_json, stderr_is_terminal


@click.command(name="mind2web")
@click.argument("path", type=click.Path(path_type=str))
@click.option(
    "--run-id",
    metavar="NAME",
    help="Run to import into (default: time and 'mind2web'); the same "
    "files into the same run skip the samples already there.",
)
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Import at most N samples.")
@store_option
@format_option("table", "json")
def mind2web(path: str, fmt: str, run_id: str | None, limit: int | None, store_path: str | None) -> None:
    """Import Multimodal-Mind2Web samples (Parquet or JSON). Then mmina eval-steps can score them.

    PATH is a file or a folder of the data set's files, e.g. one split of
    https://huggingface.co/datasets/osunlp/Multimodal-Mind2Web downloaded with
    `huggingface-cli download osunlp/Multimodal-Mind2Web --repo-type dataset --local-dir m2w`.
    Each sample becomes a single-step episode: the cleaned HTML reduced to its interactive
    elements ([backend_node_id] role "name"), the screenshot, and the recorded action
    (CLICK, TYPE, SELECT) in mmina's action grammar. Every sample is checked before
    anything is written.

    \b
    Examples:
      mmina import mind2web m2w/data/test_website-00000-of-00004.parquet --run-id m2w-website
      mmina import mind2web m2w/data --limit 200 --run-id m2w-sample
      mmina eval-steps --run m2w-sample --agent openai --model gpt-4o --input-mode multimodal
    """
    from mmina.importers.mind2web import import_mind2web

    progress = (
        (lambda done, total: echo(f"imported {done}/{total}\r", err=True, nl=False))
        if stderr_is_terminal()
        else None
    )
    result = import_mind2web(open_store(store_path, create=True), path, run_id, limit, progress)
    if fmt == "json":
        print_json(result.as_json())
        return
    echo(
        f"run {result.run_id}: {result.imported} sample(s) imported as single-step episodes of "
        f"{result.tasks} task(s) ({result.already} already there, {result.without_screenshot} without "
        f"screenshot, {len(result.skipped)} skipped); stored in {result.store}"
    )
    for uid, reason in result.skipped:
        echo(f"  skipped {uid}: {reason}")
