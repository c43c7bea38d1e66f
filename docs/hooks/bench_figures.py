"""MkDocs hook: figures of the benchmarks are written from ``bench/results.json`` at build time.

A page says ``<!-- bench: SECTION | NAME -->`` where a figure goes; every build replaces it with
that figure of ``bench/results.json`` (its value and unit, in bold), so a figure the benchmarks
measure is written down once, by the benchmarks, and a page cannot keep an older one. A marker
naming a figure the file does not hold fails the build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"
MARKER = re.compile(r"<!-- bench: (?P<section>[^|>]+?) \| (?P<name>.+?) -->")


class UnknownFigure(KeyError):
    """A marker names a figure ``bench/results.json`` does not hold."""


def figures(results: Path = RESULTS) -> dict[tuple[str, str], dict[str, Any]]:
    """Every figure of the results file by (section, name)."""
    return {(f["section"], f["name"]): f for f in json.loads(results.read_text())["figures"]}


def shown(figure: dict[str, Any]) -> str:
    """A figure as a page shows it: ``**65.1 MB**``, ``**0.59×**``."""
    value, unit = figure["value"], figure["unit"]
    text = f"{value:,g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    return f"**{text}{'' if not unit or unit.startswith('×') else ' '}{unit}**"


def fill(markdown: str, known: dict[tuple[str, str], dict[str, Any]]) -> str:
    """``markdown`` with every marker replaced by its figure (:class:`UnknownFigure` for a marker
    naming none)."""

    def replace(found: re.Match[str]) -> str:
        key = (found["section"].strip(), found["name"].strip())
        if key not in known:
            raise UnknownFigure(f"bench/results.json holds no figure {key[1]!r} in section {key[0]!r}")
        return shown(known[key])

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    """Fill the markers of a page that has any; leave every other page alone."""
    return fill(markdown, figures()) if MARKER.search(markdown) else markdown
