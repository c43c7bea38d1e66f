"""Playwright's aria snapshot read as the YAML it is (pure, standard library only).

``page.aria_snapshot(mode="ai", boxes=True)`` is YAML written by Playwright's
``renderAriaSnapshotAsYaml`` (packages/isomorphic/ariaSnapshotRenderer.ts, with the quoting
of packages/isomorphic/yaml.ts; both are in the driver's ``lib/coreBundle.js``). It uses a
small, fixed part of YAML, so it is parsed here exactly, without a YAML library:

* every line is ``<2 spaces per depth>- <key>`` and then nothing, ``:`` (children follow, one
  level deeper), or ``: <value>`` (a node's only text, a text node's text, a property's value);
* a node's key is ``role``, then ``JSON.stringify(name)`` when the name is not empty and at
  most 900 characters long, then attributes ``[checked]``, ``[level=2]``, ``[ref=e5]``,
  ``[cursor=pointer]``, ``[box=x,y,w,h]`` ...; the whole key is written in single quotes
  (``'`` doubled inside) when YAML would misread it (a name holding ``": "``, ``" #"``, a
  leading ``-``, a character of U+007F–U+009F ...);
* a text node is ``- text: <value>``, a property ``- /url: <value>`` or
  ``- /placeholder: <value>``;
* a value is plain, or in double quotes with the escapes ``\\\\ \\" \\b \\f \\n \\r \\t`` and
  ``\\xHH`` when YAML would misread it.

Only ``\\n`` ends a line: names and texts may hold U+2028, U+0085 and other characters that
Python's ``str.splitlines`` would split on. A line that does not have this shape (a future
Playwright writing something new) is kept as an ``AriaLine`` of role ``""`` with its text as
the value, so an observation never fails on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import NamedTuple

Box = tuple[float, float, float, float]

_ATTRIBUTE = re.compile(r" \[(?P<attribute>[^\]]*)\]")
_ROLE = re.compile(r"[A-Za-z/][\w/-]*")
_DOUBLE_ESCAPES = {
    "\\": "\\",
    '"': '"',
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "0": "\0",
    "a": "\a",
    "v": "\v",
    "e": "\x1b",
    " ": " ",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
_HEX_ESCAPE = {"x": 2, "u": 4, "U": 8}
_DOUBLE_QUOTED_RUN = re.compile(r'[^"\\]*')
_JSON = json.JSONDecoder()
_BOX_VALUE = re.compile(r"-?[\d.]+(?:,-?[\d.]+){3}")


class AriaLine(NamedTuple):
    """One line of the snapshot: a node, a text node (role ``text``) or a property (``/url``).

    A named tuple, not a dataclass: a page has thousands of lines, read at every step."""

    depth: int
    role: str
    name: str = ""
    attributes: tuple[str, ...] = ()
    """The node's attributes in order (``checked``, ``level=2`` ...), without ref, cursor and box."""
    ref: str | None = None
    box: Box | None = None
    value: str | None = None
    """The node's only text, a text node's text or a property's value (None: none written)."""

    @property
    def is_node(self) -> bool:
        """A node of the tree (not a text node, a property or an unreadable line)."""
        return bool(self.role) and self.role != "text" and not self.role.startswith("/")


def parse_snapshot(snapshot: str) -> list[AriaLine]:
    """The lines of an aria snapshot, in document order."""
    return [parse_line(raw) for raw in snapshot.split("\n") if raw.strip()]


def parse_line(raw: str) -> AriaLine:
    """One line of an aria snapshot (see the module for its grammar)."""
    body = raw.lstrip(" ")
    depth = (len(raw) - len(body)) // 2
    try:
        if not body.startswith("- "):
            raise ValueError("not a sequence entry")
        key, rest = _split_key(body[2:])
        line, end = read_key(depth, key)
        if end != len(key):
            raise ValueError(f"unexpected text in a key: {key[end:]!r}")
        return line._replace(value=_value(rest))
    except ValueError:
        return AriaLine(depth=depth, role="", value=body.strip())


def read_key(depth: int, key: str) -> tuple[AriaLine, int]:
    """The line a key (``role "name" [attributes]``) stands for, and where the key ended in
    ``key``; raises ValueError when ``key`` does not start with a role."""
    role = _ROLE.match(key)
    if role is None:
        raise ValueError(f"no role in {key!r}")
    name, end = _name(key, role.end())
    attributes, ref, box = [], None, None
    for attribute in _attributes(key, end):
        text, end = attribute["attribute"], attribute.end()
        if text.startswith("ref="):
            ref = text[4:]
        elif text.startswith("box=") and _BOX_VALUE.fullmatch(text[4:]):
            x, y, width, height = (float(v) for v in text[4:].split(","))
            box = (x, y, width, height)
        elif text != "cursor=pointer":  # how the mouse looks over it: not part of what the agent reads
            attributes.append(text)
    return AriaLine(
        depth=depth, role=role.group(), name=name, attributes=tuple(attributes), ref=ref, box=box
    ), end


def scalar(text: str) -> str:
    """A YAML scalar as one line holds it: plain, 'single-quoted' or "double-quoted"; raises
    ValueError for a quoted scalar with text after its closing quote."""
    if not text.startswith(("'", '"')):
        return text
    value, after = single_quoted(text) if text.startswith("'") else _double_quoted(text)
    if after.strip():
        raise ValueError(f"unexpected text after a quoted scalar: {after!r}")
    return value


def _attributes(key: str, start: int) -> Iterator[re.Match[str]]:
    """The `` [attribute]`` groups right after ``start``, in order, up to the first other text."""
    position = start
    while (found := _ATTRIBUTE.match(key, position)) is not None:
        yield found
        position = found.end()


def _name(key: str, start: int) -> tuple[str, int]:
    """The JSON-quoted name after the role, if any, and where the key goes on after it."""
    if not key.startswith(' "', start):
        return "", start
    try:
        name, end = _JSON.raw_decode(key, start + 1)
    except json.JSONDecodeError:
        return "", start
    return name if isinstance(name, str) else "", end


def _split_key(text: str) -> tuple[str, str]:
    """The key of a line (unquoted) and what follows it (``""``, ``":"`` or ``": value"``)."""
    if text.startswith("'"):
        return single_quoted(text)
    if text.startswith('"'):
        return _double_quoted(text)
    colon = text.find(": ")
    if colon >= 0:
        return text[:colon], text[colon:]
    if text.endswith(":"):
        return text[:-1], ":"
    return text, ""


def _value(rest: str) -> str | None:
    """The value after a key: None for none (``""`` or ``":"``), else the scalar unquoted."""
    if rest in ("", ":"):
        return None
    if not rest.startswith(": "):
        raise ValueError(f"unexpected text after a key: {rest!r}")
    return scalar(rest[2:])


def single_quoted(text: str) -> tuple[str, str]:
    """A YAML single-quoted scalar at the start of ``text`` (``''`` is a quote) and the rest."""
    parts, index = [], 1
    while (quote := text.find("'", index)) >= 0:
        parts.append(text[index:quote])
        if not text.startswith("''", quote):
            return "".join(parts), text[quote + 1 :]
        parts.append("'")
        index = quote + 2
    raise ValueError("a single-quoted scalar is not closed")


def _double_quoted(text: str) -> tuple[str, str]:
    """A YAML double-quoted scalar at the start of ``text`` (escapes decoded) and the rest."""
    parts, index = [], 1
    while True:
        run = _DOUBLE_QUOTED_RUN.match(text, index)
        assert run is not None  # the pattern matches the empty string
        parts.append(run.group())
        index = run.end()
        if index >= len(text):
            raise ValueError("a double-quoted scalar is not closed")
        if text[index] == '"':
            return "".join(parts), text[index + 1 :]
        decoded, index = _escape(text, index + 1)
        parts.append(decoded)


def _escape(text: str, index: int) -> tuple[str, int]:
    """The character of the escape starting at ``text[index]`` (after the backslash) and where
    the text goes on; YAML's whole escape set, of which Playwright writes a part."""
    code = text[index : index + 1]
    if code in _DOUBLE_ESCAPES:
        return _DOUBLE_ESCAPES[code], index + 1
    width = _HEX_ESCAPE.get(code)
    digits = text[index + 1 : index + 1 + width] if width else ""
    if not width or len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
        raise ValueError(f"unknown escape \\{code}")
    return chr(int(digits, 16)), index + 1 + width
