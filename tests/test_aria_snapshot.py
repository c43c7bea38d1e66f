"""Playwright's aria snapshot read as YAML: round trips through a port of Playwright's writer
(tests/aria_render.py) over generated trees, and names and texts of generated elements
rendered by a real Chromium read back exactly as the page computed them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Page, sync_playwright

from mmina.observations.aria_snapshot import AriaLine, parse_line, parse_snapshot
from mmina.observations.observation import (
    elements_from_tree,
    flatten_snapshot,
    parse_tree_line,
    render_line,
    tree_lines,
)
from mmina.recorder.browser import find_chromium
from mmina.unicode import has_surrogate
from tests.aria_render import AWKWARD, TEXT, nodes, render
from tests.heavy import sized

# ---------------------------------------------------------------- generated trees, Playwright's writer ported


def expected_lines(node: dict[str, Any], depth: int = 0) -> Iterator[AriaLine]:
    """What the parser must read for a node: the node, its properties, its texts and children."""
    flags = {
        "checked": {True: "checked", "mixed": "checked=mixed"},
        "disabled": {True: "disabled"},
        "expanded": {True: "expanded"},
        "active": {True: "active"},
        "invalid": {True: "invalid", "grammar": "invalid=grammar"},
        "level": {v: f"level={v}" for v in (1, 2, 6)},
        "pressed": {True: "pressed", "mixed": "pressed=mixed"},
        "selected": {True: "selected"},
    }
    attributes = tuple(
        flags[f][node[f]]
        for f in ("checked", "disabled", "expanded", "active", "invalid", "level", "pressed", "selected")
        if f in node
    )
    box = tuple(float(node["box"][k]) for k in ("x", "y", "width", "height")) if "box" in node else None
    props = [p for p in ("url", "placeholder") if p in node]
    inline = node.get("text") if not props else None
    yield AriaLine(
        depth=depth,
        role=node["role"],
        name=node["name"],
        attributes=attributes,
        ref=node["ref"],
        box=box,
        value=None if inline is None else inline,
    )
    for prop in props:
        yield AriaLine(depth=depth + 1, role="/" + prop, value=node[prop])
    children = [node["text"]] if props and "text" in node else node.get("children", [])
    for child in children:
        if isinstance(child, str):
            yield AriaLine(depth=depth + 1, role="text", value=child)
        else:
            yield from expected_lines(child, depth + 1)


@settings(max_examples=sized(100, 400), deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=4))
def test_snapshots_written_as_playwright_writes_them_read_back(tree: list[dict[str, Any]]) -> None:
    assert parse_snapshot(render(tree)) == [line for node in tree for line in expected_lines(node)]


@settings(max_examples=sized(100, 300), deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=4))
def test_the_agent_text_reads_back_line_by_line(tree: list[dict[str, Any]]) -> None:
    """What is stored as ``tree_text`` gives back every line (without refs and boxes) and id."""
    text, elements = flatten_snapshot(render(tree))
    expected = [line._replace(ref=None, box=None) for node in tree for line in expected_lines(node)]
    assert [line for _, line in tree_lines(text)] == expected
    assert [e.id for e in elements_from_tree(text)] == [e.id for e in elements]
    assert len(text.split("\n")) == len(text.splitlines()) == len(expected), "one element, one line"


def test_lines_as_playwright_quotes_them() -> None:
    line = parse_line("""  - 'link "Next: Configuration" [ref=e3] [cursor=pointer] [box=8,67,129,17]':""")
    assert line == AriaLine(
        depth=1, role="link", name="Next: Configuration", attributes=(), ref="e3", box=(8, 67, 129, 17)
    )
    assert parse_line("""- 'button "it''s #1 [ok]" [ref=e5]': "y\"""").name == "it's #1 [ok]"
    assert parse_line("""- button "say \\"hi\\" \\\\ back" [ref=e6]: z""").name == 'say "hi" \\ back'
    assert parse_line('- paragraph [ref=e8]: "Rating: 4.5"').value == "Rating: 4.5"
    assert parse_line('- text: "a\\x00b\\n\\tc \\u00e9"').value == "a\x00b\n\tc é"
    assert parse_line('- /url: "\u2028z\\x85"') == AriaLine(depth=0, role="/url", value="\u2028z\x85")
    lone = parse_line('- button "\\ud800 lone" [ref=e26]')
    assert lone.name == "\ud800 lone" and render_line(lone, "1") == '[1] button "\\ud800 lone"', (
        "kept, written escaped"
    )
    assert parse_line('    - heading "Tea" [level=2] [ref=e4]') == AriaLine(
        depth=2, role="heading", name="Tea", attributes=("level=2",), ref="e4"
    )
    # something Playwright never writes stays a line of its own instead of failing the observation
    assert parse_line("- 'unclosed [ref=e1]") == AriaLine(depth=0, role="", value="- 'unclosed [ref=e1]")


def test_trees_stored_before_this_format_still_read() -> None:
    """Old stores kept Playwright's YAML quoting and numbered ids (what eval-steps, the viewer and
    replay read)."""
    old = "\n".join(
        [
            "[1] main",
            "\t[3] 'link \"Next: Configuration\"'",
            "\t\t/url: /setup",
            "\t[4] 'button \"it''s\"': \"y\"",
            '\t[8] paragraph: "Rating: 4.5"',
            "\t[9] text: hi",
        ]
    )
    assert [(e.id, e.role, e.name) for e in elements_from_tree(old)] == [
        ("1", "main", ""),
        ("3", "link", "Next: Configuration"),
        ("4", "button", "it's"),
        ("8", "paragraph", ""),
        ("9", "text", ""),
    ]
    assert parse_tree_line('\t[8] paragraph: "Rating: 4.5"') == (
        "8",
        AriaLine(depth=1, role="paragraph", value="Rating: 4.5"),
    )
    assert parse_tree_line("\t[4] 'button \"it''s\"': \"y\"")[1].value == "y"
    assert (
        render_line(parse_tree_line('\t[8] paragraph: "Rating: 4.5"')[1], "8")
        == "\t[8] paragraph: Rating: 4.5"
    )
    # runs imported from WebArena's harness keep its lines: the name as Python's repr, then properties
    webarena = "[25] link 'Edinburgh'\n\t[26] textbox 'it\\'s \"here\"' focused: True required: False"
    assert [(e.id, e.role, e.name, e.depth) for e in elements_from_tree(webarena)] == [
        ("25", "link", "Edinburgh", 0),
        ("26", "textbox", 'it\'s "here"', 1),
    ]


@settings(max_examples=sized(100, 500), deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                AWKWARD
                + [
                    "[1] ",
                    "- ",
                    "  - ",
                    "'",
                    '"',
                    "\\x",
                    "\\u12",
                    "\t",
                    "text: ",
                    "link ",
                    ' "a"',
                    " [ref=e1]",
                    " [box=1,2,3,4]",
                    ": ",
                ]
            ),
            st.characters(),
        ),
        max_size=40,
    ).map("".join)
)
def test_any_text_reads_without_failing(text: str) -> None:
    """Whatever a snapshot or a stored tree holds, reading it never raises (an observation or a
    replay must not fail on a line nobody foresaw)."""
    assert len(parse_snapshot(text)) == len([line for line in text.split("\n") if line.strip()])
    shown, elements = flatten_snapshot(text)
    assert len(set(e.id for e in elements)) == len(elements) and len(shown.splitlines()) == len(
        parse_snapshot(text)
    )
    assert len(tree_lines(text)) == len([line for line in text.split("\n") if line.strip()])


# ---------------------------------------------------------------- names a real Chromium computed

BUILD = """(names) => {
  document.body.replaceChildren();
  names.forEach((name, i) => {
    const section = document.createElement('section');
    section.setAttribute('aria-label', 'item ' + i);
    const button = document.createElement('button');
    button.setAttribute('aria-label', name);
    const link = document.createElement('a');
    link.setAttribute('href', name);
    link.textContent = 'go';
    const paragraph = document.createElement('p');
    paragraph.textContent = name;
    const mixed = document.createElement('div');
    mixed.append(name, document.createElement('hr'));
    section.append(button, link, paragraph, mixed);
    document.body.append(section);
  });
  // Playwright's normalizeWhiteSpace, the accessible names and texts the snapshot shows
  const normal = (s) => s.replace(/[\\u200b\\u00ad]/g, '').trim().replace(/\\s+/g, ' ');
  return names.map(normal);
}"""


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(None, playwright))
        yield browser.new_page()
        browser.close()


def _subtree(lines: list[AriaLine], role: str, name: str) -> list[AriaLine]:
    start = next(i for i, line in enumerate(lines) if line.role == role and line.name == name)
    depth = lines[start].depth
    end = next((i for i in range(start + 1, len(lines)) if lines[i].depth <= depth), len(lines))
    return lines[start + 1 : end]


@settings(
    max_examples=sized(20, 60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(TEXT, min_size=1, max_size=6))
def test_names_and_texts_chromium_computed_read_back_exactly(page: Page, names: list[str]) -> None:
    normalized = page.evaluate(BUILD, names)
    snapshot = page.aria_snapshot(mode="ai", boxes=True)
    text, elements = flatten_snapshot(snapshot)
    lines = [line for _, line in tree_lines(text)]
    for index, (raw, name) in enumerate(zip(names, normalized)):
        section = _subtree(lines, "region", f"item {index}")
        button = section[0]
        assert (button.role, button.name) == ("button", name), snapshot
        link = next(i for i, line in enumerate(section) if line.role == "link")
        assert section[link + 1] == AriaLine(depth=section[link].depth + 1, role="/url", value=raw), snapshot
        if name:
            assert [line.value for line in section if line.role in ("paragraph", "text")] == [name] * 2
            if not has_surrogate(name):  # the name read finds the button with Playwright's own matcher
                assert page.get_by_role("button", name=button.name, exact=True).count() >= 1
    assert len(text.splitlines()) == len(lines)
    assert len({e.id for e in elements}) == len(elements)
