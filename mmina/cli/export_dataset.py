"""``mmina export dataset``: runs as a folder ready to publish on the Hugging Face Hub (thin: the
work is ``mmina.interchange.dataset_export``, imported when the command runs)."""

from __future__ import annotations

from pathlib import Path

import click

from mmina.cli.common import FOLDER, format_option, open_store, output_option, store_option
from mmina.cli.export import _progress, _render


@click.command(name="dataset")
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@output_option("A new (or empty) folder to write; written whole or not at all.", FOLDER, required=True)
@click.option("--task", "tasks", multiple=True, metavar="ID", help="Only episodes of this task (repeatable).")
@click.option(
    "--requests",
    is_flag=True,
    help="Add the network trace: a requests config, and its bodies in blobs (enough to replay).",
)
@click.option(
    "--max-shard-mb",
    default=256.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    metavar="MB",
    help="Start a new Parquet shard before one grows past this size.",
)
@click.option("--title", default="mmina episodes", show_default=True, help="The dataset's name on its card.")
@click.option(
    "--license",
    "license_",
    default="cc-by-4.0",
    show_default=True,
    metavar="ID",
    help="The card's license (a Hugging Face license id).",
)
@click.option(
    "--author", "authors", multiple=True, metavar="NAME", help="An author for CITATION.cff (repeatable)."
)
@store_option
@format_option("table", "json")
def dataset(
    runs: tuple[str, ...],
    output: Path,
    tasks: tuple[str, ...],
    requests: bool,
    max_shard_mb: float,
    title: str,
    license_: str,
    authors: tuple[str, ...],
    fmt: str,
    store_path: str | None,
) -> None:
    """Export runs as a Hugging Face dataset folder. Parquet shards per config and a dataset card.

    Configs: episodes, steps (the screenshot as an Image feature), scores, tasks, runs,
    blobs (the exact model input and other blobs rows name) and, with --requests, the
    network trace. README.md is the dataset card (configs, features, license, versions,
    what was redacted), CITATION.cff the citation; `datasets.load_dataset(DIR, "steps")`
    loads a config, `huggingface-cli upload` publishes the folder, and `mmina import
    dataset` reads it back into a store. Secrets stay as the store keeps them: redacted.

    \b
    Examples:
      mmina export dataset latest -o my-dataset/
      mmina export dataset nightly baseline --requests --max-shard-mb 500 -o release/
      mmina export dataset latest --title "MMInA oracle runs" --author "A. Researcher" -o ds/
      python -c 'import datasets; print(datasets.load_dataset("my-dataset", "steps"))'
    """
    from mmina.interchange.dataset_card import CardText
    from mmina.interchange.dataset_export import DatasetOptions, export_dataset
    from mmina.interchange.stored import Selection, count_episodes

    store = open_store(store_path)
    total = sum(count_episodes(store, Selection(run=run, tasks=tasks)) for run in dict.fromkeys(runs))
    settings = DatasetOptions(tasks, requests, max_shard_mb, CardText(title, license_, authors))
    with _progress(total) as advance:
        result = export_dataset(store, runs, output, settings, advance)
    configs = ", ".join(f"{name} {tally.rows}" for name, tally in result.configs.items())
    shards = sum(len(tally.files) for tally in result.configs.values())
    missing = f"; {result.missing_blobs} blob(s) missing from the store" if result.missing_blobs else ""
    _render(
        result.as_json(),
        fmt,
        f"wrote {result.path}: {result.episodes} episode(s), {result.steps} step(s) in "
        f"{shards} shard(s), {result.bytes / 1e6:.1f} MB (rows: {configs}){missing}",
    )
