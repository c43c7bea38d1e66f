"""MkDocs hook: the CLI reference page is rendered from the click commands at build time.

The page ``cli.md`` holds the marker below; every build replaces it with
``mmina.cli.reference.render()`` (each command's ``--help``, verbatim), so the reference
cannot drift from the code.
"""

from __future__ import annotations

from typing import Any

from mmina.cli.reference import render

MARKER = "<!-- cli-reference: generated at build time from --help -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    """Fill the marker of the page that has it; leave every other page alone."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
