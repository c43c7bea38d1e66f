"""``mmina import``: bring results recorded elsewhere into a store (one module per source format)."""
from __future__ import annotations

import click


@click.group(name="import")
def imports() -> None:
    """Import results recorded by other tools, or labels made elsewhere, into a store.

    \b
    Examples:
      mmina import harness path/to/official/results --store ./mmina-store
      mmina import mind2web path/to/multimodal-mind2web/test_task --store ./mmina-store
      mmina import warc capture.warc.gz --tasks my-tasks/ --run-id captured
      mmina import labels labels.csv --labeller alice
    """


def _register() -> None:
    """Each source format is one module with one subcommand."""
    from mmina.cli.import_harness import harness
    from mmina.cli.import_labels import labels
    from mmina.cli.import_mind2web import mind2web
    from mmina.cli.import_warc import warc

    for command in (harness, mind2web, warc, labels):
        imports.add_command(command)


_register()
