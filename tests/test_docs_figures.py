"""Figures of the benchmarks in the documentation (issue 52, item 7): written once, by the
benchmarks, into the pages that mark them (``docs/hooks/bench_figures.py``), and a fact with one
figure — memory per episode in flight — is given nowhere else by hand."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.docs_pages import DOCS, ROOT

HOOK = DOCS / "hooks" / "bench_figures.py"
MEMORY = "concurrency 32, MMInA-length tasks: memory per episode in flight beyond the first"
HAND_WRITTEN_MEMORY = re.compile(
    r"\b\d+(–\d+)?\s?MB each"
    r"|(browser context|episode in flight)( adds| of)? about \d+(–\d+)?\s?MB"
    r"|memory per episode in flight[^\n|]{0,30}?\|\s*\**\d+"
)
"""A memory-per-episode figure written by hand, in the ways the pages wrote it before."""


def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_figures", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_marked_figure_is_one_of_the_results() -> None:
    figures = hook()
    known = figures.figures()
    pages = {path.name: path.read_text() for path in DOCS.glob("*.md")}
    marked = {name: figures.MARKER.findall(text) for name, text in pages.items()}
    assert {"benchmarks.md", "performance.md", "scale.md"} <= {
        name for name, found in marked.items() if found
    }
    for name, text in pages.items():
        filled = figures.fill(text, known)
        assert "<!-- bench:" not in filled, name
    assert f"**{known[('epoch', MEMORY)]['value']:g} MB**" in figures.fill(pages["benchmarks.md"], known)


def test_a_marker_naming_no_figure_fails(tmp_path: Path) -> None:
    figures = hook()
    results = tmp_path / "results.json"
    results.write_text(
        '{"figures": [{"section": "epoch", "name": "memory", "value": 42.5, "unit": "MB"},'
        ' {"section": "epoch", "name": "ratio", "value": 0.5, "unit": "×"}]}'
    )
    known = figures.figures(results)
    assert (
        figures.fill("<!-- bench: epoch | memory --> and <!-- bench: epoch | ratio -->", known)
        == "**42.5 MB** and **0.5×**"
    )
    with pytest.raises(figures.UnknownFigure, match="no figure 'memori' in section 'epoch'"):
        figures.fill("<!-- bench: epoch | memori -->", known)


def test_memory_per_episode_is_one_figure_given_by_the_benchmarks() -> None:
    texts = {
        path.relative_to(ROOT): path.read_text()
        for path in [ROOT / "README.md", *DOCS.glob("*.md"), *(ROOT / "mmina").rglob("*.py")]
        if path.name not in ("changelog.md", "benchmarks.md")
    }
    by_hand = {
        str(path): found.group(0)
        for path, text in texts.items()
        for found in HAND_WRITTEN_MEMORY.finditer(text)
    }
    assert by_hand == {}
    assert HAND_WRITTEN_MEMORY.search("in one Chromium (about 50–60 MB each)")
    assert HAND_WRITTEN_MEMORY.search("a browser context of about 70 MB")
    assert HAND_WRITTEN_MEMORY.search("Each episode in flight adds about 50–60 MB")
    assert HAND_WRITTEN_MEMORY.search("| memory per episode in flight | 48 MB | 59 MB |")
