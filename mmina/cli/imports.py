"""``mmina import``: bring results recorded elsewhere into a store (one module per source format)."""
from __future__ import annotations

import click


@click.group(name="import")
def imports() -> None:
    """Import results recorded by other tools into a store, so the same analyses run over them.

    \b
    Examples:
      mmina import harness path/to/official/results --store ./mmina-store
      mmina import mind2web path/to/multimodal-mind2web/test_task --store ./mmina-store
      mmina import warc capture.warc.gz --tasks my-tasks/ --run-id captured
    """


def _register() -> None:
    """Each source format is one module with one subcommand."""
    from mmina.cli.import_harness import harness
    from mmina.cli.import_mind2web import mind2web
    from mmina.cli.import_warc import warc

    for command in (harness, mind2web, warc):
        imports.add_command(command)


_register()
