"""Playwright's aria snapshot writer, ported line by line to Python for the parser's round-trip
tests: ``renderAriaSnapshotAsYaml`` (packages/isomorphic/ariaSnapshotRenderer.ts) and the
quoting of packages/isomorphic/yaml.ts, as bundled in Playwright 1.65's driver
(``playwright/driver/package/lib/coreBundle.js``), ``mode="ai"`` (no regex conversion).

A node is a dict like the JSON Playwright renders: ``role``, ``name``, the attribute flags,
``ref``, ``cursor``, ``box``, ``url``, ``placeholder``, and ``text`` (one text child) or
``children`` (strings and nodes). ``nodes()`` draws such trees for Hypothesis, with names
and texts full of what YAML, JSON and line splitting care about.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import strategies as st

JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"  # JavaScript's \s
_JS_NUMBER = re.compile(
    r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)|0[xX][0-9a-fA-F]+|0[bB][01]+"
    r"|0[oO][0-7]+"
)


def render(nodes: list[dict[str, Any]]) -> str:
    """``renderAriaSnapshotAsYaml(json)``."""
    lines: list[str] = []
    for node in nodes:
        _visit(node, 0, lines)
    return "\n".join(lines)


def _visit(node: dict[str, Any], depth: int, lines: list[str]) -> None:
    if node["role"] == "text":
        _text(node.get("text", ""), depth, lines)
        return
    key = "  " * depth + "- " + escape_key(create_key(node))
    props = [(name, node[name]) for name in ("url", "placeholder") if name in node]
    if "text" not in node and not props and not node.get("children"):
        lines.append(key)
    elif "text" in node and not props:
        lines.append(key + ": " + escape_value(node["text"]))
    else:
        lines.append(key + ":")
        for name, value in props:
            lines.append("  " * (depth + 1) + "- /" + name + ": " + escape_value(value))
        if "text" in node:
            _text(node["text"], depth + 1, lines)
        else:
            for child in node.get("children", []):
                if isinstance(child, str):
                    _text(child, depth + 1, lines)
                else:
                    _visit(child, depth + 1, lines)


def _text(text: str, depth: int, lines: list[str]) -> None:
    lines.append("  " * depth + "- text: " + escape_value(text))


def create_key(node: dict[str, Any]) -> str:
    key = node["role"]
    name = node.get("name", "")
    if name and js_length(name) <= 900:
        key += " " + json_stringify(name)
    flags = [
        ("checked", "mixed", "[checked=mixed]"),
        ("checked", True, "[checked]"),
        ("disabled", True, "[disabled]"),
        ("expanded", True, "[expanded]"),
        ("active", True, "[active]"),
    ]
    key += "".join(f" {text}" for field, value, text in flags if node.get(field) == value)
    if node.get("invalid") in ("grammar", "spelling"):
        key += f" [invalid={node['invalid']}]"
    if node.get("invalid") is True:
        key += " [invalid]"
    if node.get("level"):
        key += f" [level={node['level']}]"
    key += {"mixed": " [pressed=mixed]", True: " [pressed]"}.get(node.get("pressed"), "")
    key += " [selected]" if node.get("selected") is True else ""
    key += " [aria-hidden]" if node.get("ariaHidden") else ""
    if node.get("ref"):
        key += f" [ref={node['ref']}]" + (" [cursor=pointer]" if node.get("cursor") == "pointer" else "")
    if node.get("box"):
        key += " [box={x},{y},{width},{height}]".format(**node["box"])
    return key


def js_length(text: str) -> int:
    """``text.length`` in JavaScript: UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def json_stringify(text: str) -> str:
    """``JSON.stringify`` of a string: Python's JSON with lone surrogates escaped as JavaScript does."""
    return re.sub(
        "[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False)
    )


def escape_key(text: str) -> str:
    """``yamlEscapeKeyIfNeeded``."""
    return "'" + text.replace("'", "''") + "'" if needs_quotes(text) else text


_VALUE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_value(text: str) -> str:
    """``yamlEscapeValueIfNeeded``."""
    if not needs_quotes(text):
        return text
    return (
        '"'
        + re.sub(
            r'[\\"\x00-\x1f\x7f-\x9f]',
            lambda m: _VALUE_ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"),
            text,
        )
        + '"'
    )


def needs_quotes(text: str) -> bool:
    """``yamlStringNeedsQuotes``, with JavaScript's ``\\s``, ``Number()`` and ``toLowerCase``."""
    space = f"[{JS_SPACE}]"
    return (
        not text
        or bool(re.search(f"^{space}|{space}$", text))
        or bool(re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", text))
        or text.startswith("-")
        or bool(re.search(f"[\n:]({space}|$)", text))
        or bool(re.search(f"{space}#", text))
        or bool(re.search(r"[\n\r]", text))
        or bool(re.match(r"[&*\],?!>|@\"'#%]", text))
        or bool(re.search(r"[{}`]", text))
        or text.startswith("[")
        or _is_number(text)
        or text.lower() in ("y", "n", "yes", "no", "true", "false", "on", "off", "null", "~")
        or bool(re.fullmatch(r"[-+]?\.(inf|nan)", text, re.IGNORECASE))
    )


def _is_number(text: str) -> bool:
    """``!isNaN(Number(text))``: JavaScript's string to number conversion succeeds."""
    stripped = re.sub(f"^[{JS_SPACE}]+|[{JS_SPACE}]+$", "", text)
    return not stripped or bool(_JS_NUMBER.fullmatch(stripped))


def as_javascript_delivers(text: str) -> str:
    """``text`` as a JavaScript string comes to Python through Playwright's JSON: two lone
    surrogates that make a pair are one character, lone ones stay."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


# Characters YAML, JSON and line splitting care about, and some that nobody should.
AWKWARD = list(
    ": \"'\\#-[]{}`&*!|>%@,?~\n\r\t\v\f\x00\x01\x1b\x7f\x85\x9f\xa0\u2028\u2029\ufeff\u200b\xad"
    "éß中😀\U0001f3f3\ufe0f\u200d\U0001f308"
) + ["\ud800", "\udfff"]
WORDS = [
    "yes",
    "No",
    "null",
    "~",
    "12",
    "-3.5",
    ".inf",
    "0x1F",
    "true",
    "- item",
    "[ok]",
    "# note",
    "a: b",
    "Next: Configuration",
    "Price: $10",
    'say "hi"',
    "it's",
    "C:\\path",
    "a #b",
    "x:",
]
TEXT = st.one_of(
    st.text(st.one_of(st.sampled_from(AWKWARD), st.characters()), max_size=30),
    st.sampled_from(WORDS),
    st.lists(st.sampled_from(WORDS + AWKWARD), max_size=6).map("".join),
).map(as_javascript_delivers)

ROLES = ["button", "link", "heading", "paragraph", "generic", "listitem", "textbox", "img", "iframe", "main"]


@st.composite
def nodes(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    """A node as Playwright's JSON has it, with attributes, box, properties and children drawn."""
    node: dict[str, Any] = {
        "role": draw(st.sampled_from(ROLES)),
        "name": draw(TEXT),
        "ref": f"e{draw(st.integers(1, 999))}",
    }
    for flag, values in (
        ("checked", [True, "mixed"]),
        ("disabled", [True]),
        ("expanded", [True]),
        ("active", [True]),
        ("level", [1, 2, 6]),
        ("pressed", [True, "mixed"]),
        ("selected", [True]),
        ("cursor", ["pointer"]),
        ("invalid", [True, "grammar"]),
    ):
        if draw(st.booleans()) and draw(st.booleans()):
            node[flag] = draw(st.sampled_from(values))
    if draw(st.booleans()):
        node["box"] = {k: draw(st.integers(-50, 2000)) for k in ("x", "y", "width", "height")}
    for prop in ("url", "placeholder"):
        if draw(st.integers(0, 3)) == 0:
            node[prop] = draw(TEXT)
    if draw(st.booleans()):
        node["text"] = draw(TEXT)
    elif depth < 3:
        node["children"] = draw(st.lists(st.one_of(TEXT, nodes(depth + 1)), max_size=3))
    return node
