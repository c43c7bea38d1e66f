"""``mmina import dataset``: a folder written by ``mmina export dataset`` back into a store (thin:
the work is ``mmina.interchange.dataset_import``, imported when the command runs)."""

from __future__ import annotations

from pathlib import Path

import click

from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import echo, print_json, stderr_is_terminal


@click.command(name="dataset")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@store_option
@format_option("table", "json")
def dataset(folder: Path, fmt: str, store_path: str | None) -> None:
    """Import a dataset folder written by `mmina export dataset`. One downloaded from the Hub works
    too.

    Its runs, tasks, episodes, steps, scores and, when it has them, requests become runs of
    the store again, with the same ids; screenshots and every other blob are checked against
    their hashes. A run the store already has is refused before anything is written.

    \b
    Example:
      mmina import dataset my-dataset/ --store ./restored
      mmina report --run latest --store ./restored
    """
    from mmina.interchange.dataset_import import import_dataset

    progress = (
        (lambda done: click.echo(f"\rimported {done} episode(s)", err=True, nl=False))
        if stderr_is_terminal()
        else None
    )
    result = import_dataset(open_store(store_path, create=True), folder, progress)
    if fmt == "json":
        print_json(result.as_json())
        return
    echo(
        f"imported {', '.join(result.runs)}: {result.episodes} episode(s), {result.steps} step(s), "
        f"{result.requests} request(s), {result.scores} score(s), {result.blobs} blob(s); stored in {result.store}"
    )
