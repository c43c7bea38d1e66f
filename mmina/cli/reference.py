"""The command-line reference as Markdown, rendered from the click commands themselves.

The documentation site's CLI page is this rendering, made at build time by the MkDocs hook
``docs/hooks/cli_reference.py``: each command's section is exactly what ``--help`` prints, so
the reference cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

WIDTH = 100
"""Help is rendered as ``--help`` prints it at a terminal this wide (the most the ``mmina``
group asks for); click leaves two columns free, hence ``WIDTH - 2`` below."""


def walk(
    command: click.Command, parent: click.Context | None = None, name: str = "mmina"
) -> Iterator[tuple[click.Context, click.Command]]:
    """Every command under ``command`` (itself first), each with the context ``--help`` would get,
    so usage lines read ``mmina store verify [OPTIONS]``."""
    settings = {**command.context_settings, "terminal_width": WIDTH - 2, "max_content_width": WIDTH}
    ctx = click.Context(command, info_name=name, parent=parent, **settings)
    yield ctx, command
    if isinstance(command, click.Group):
        for sub in command.list_commands(ctx):
            child = command.get_command(ctx, sub)
            if child is not None and not child.hidden:
                yield from walk(child, ctx, sub)


def section(ctx: click.Context, command: click.Command) -> str:
    """One command's heading (commands of a group one level down), its one-line summary and
    its ``--help`` verbatim."""
    path = ctx.command_path
    level = "#" * (2 + max(0, path.count(" ") - 1))
    summary = command.get_short_help_str(WIDTH)
    return f"{level} `{path}`\n\n{summary}\n\n```text\n{command.get_help(ctx).rstrip()}\n```\n"


def render(root: click.Command | None = None) -> str:
    """The whole reference: one section per command, in the order ``--help`` lists them."""
    if root is None:
        from mmina.cli import cli

        root = cli
    return "\n".join(section(ctx, command) for ctx, command in walk(root))
