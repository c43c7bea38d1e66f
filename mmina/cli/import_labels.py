"""``mmina import labels``: a person's labels made elsewhere (CSV or JSON), as ``human`` verdicts."""

from __future__ import annotations

import click

from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import echo, print_json


@click.command(name="labels")
@click.argument("path", type=click.Path(path_type=str))
@click.option(
    "--labeller",
    metavar="NAME",
    help="Who labelled, for rows without a labeller column (default: the operating-system user).",
)
@store_option
@format_option("table", "json")
def labels(path: str, labeller: str | None, fmt: str, store_path: str | None) -> None:
    """Import pass / fail / unsure labels made outside mmina serve. A label is per hop or per task.

    PATH is CSV (with a header) or JSON (a list of objects): episode_id, hop (1-based; empty
    or "task" for the task), label (pass, fail or unsure), and optionally labeller and note.
    Every row is checked before anything is written. Each labeller's labels become one batch
    of the human evaluator, replacing that labeller's earlier labels of the episodes the file
    names (earlier batches stay in the store). Compare them with a judge with mmina agreement.

    \b
    Examples:
      mmina import labels labels.csv --labeller alice
      mmina import labels team-labels.json --format json
      mmina agreement --run nightly --evaluator fuzzy --reference human
    """
    from mmina.evaluators.labelling import default_labeller
    from mmina.importers.label_files import import_labels

    saved = import_labels(open_store(store_path), path, labeller or default_labeller())
    if fmt == "json":
        print_json(
            [
                {
                    "batch_id": s.batch_id,
                    "labeller": s.labeller,
                    "labels": s.labels,
                    "episodes": s.episodes,
                    "runs": list(s.runs),
                }
                for s in saved
            ]
        )
        return
    for batch in saved:
        echo(
            f"{batch.labeller}: {batch.labels} label(s) of {batch.episodes} episode(s) in run(s) "
            f"{', '.join(batch.runs)} — batch {batch.batch_id}"
        )
