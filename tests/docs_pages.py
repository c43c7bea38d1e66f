"""The documentation pages as text, for tests that check what the documentation says.

The README is a short tour; the reference lives in the pages of ``docs/`` (the MkDocs site),
so tests that keep documented SQL or commands honest read the pages.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def page(name: str) -> str:
    """One page of the site, e.g. ``page("analysis.md")``."""
    return (DOCS / name).read_text()


def all_pages() -> str:
    """Every page of the site, one after another (what "the documentation says")."""
    return "\n".join(path.read_text() for path in sorted(DOCS.glob("*.md")))
