"""``mmina import``: bring results recorded elsewhere into a store (one module per source format)."""
from __future__ import annotations

import click

from mmina.cli.common import LazyGroup

IMPORTERS = {
    "harness": "mmina.cli.import_harness:harness",
    "mind2web": "mmina.cli.import_mind2web:mind2web",
}
"""Each source format: its subcommand and where it is (imported only when it is used)."""


@click.group(name="import", cls=LazyGroup, lazy=IMPORTERS)
def imports() -> None:
    """Import results recorded by other tools into a store, so the same analyses run over them.

    \b
    Examples:
      mmina import harness path/to/official/results --store ./mmina-store
      mmina import mind2web path/to/multimodal-mind2web/test_task --store ./mmina-store
    """
