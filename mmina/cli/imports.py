"""``mmina import``: bring results recorded elsewhere into a store (one module per source format)."""

from __future__ import annotations

import click

from mmina.cli.common import LazyGroup

IMPORTERS = {
    "harness": "mmina.cli.import_harness:harness",
    "mind2web": "mmina.cli.import_mind2web:mind2web",
    "warc": "mmina.cli.import_warc:warc",
    "labels": "mmina.cli.import_labels:labels",
    "dataset": "mmina.cli.import_dataset:dataset",
}
"""Each source format: its subcommand and where it is (imported only when it is used)."""


@click.group(name="import", cls=LazyGroup, lazy=IMPORTERS)
def imports() -> None:
    """Import other tools' results or outside labels into a store.

    \b
    Examples:
      mmina import harness path/to/official/results --store ./mmina-store
      mmina import mind2web path/to/multimodal-mind2web/test_task --store ./mmina-store
      mmina import warc capture.warc.gz --tasks my-tasks/ --run-id captured
      mmina import labels labels.csv --labeller alice
      mmina import dataset my-dataset/ --store ./mmina-store
    """
