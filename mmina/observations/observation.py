"""Observations: what the agent sees at a step, and the pure flattening of the browser's
accessibility snapshot into the text WebArena and MMInA show, one element a line::

    [4821] heading "Teas" [level=1]
    [7310] link "Next: Configuration"
        /url: /setup?step=2
    [2093] paragraph: Rating: 4.5

A line is a tab per depth (shown as spaces above), the element's id in brackets, its ARIA role, its accessible name
as a JSON string (as Playwright writes it), its attributes (``[checked]``, ``[level=2]`` ...)
and ``: text`` when the element's only content is a text; text nodes are ``text: ...`` and
properties ``/url: ...`` and ``/placeholder: ...``. Texts are shown as they are, or as a JSON
string when empty, starting with a quote, or holding a line break, another control
character or a lone surrogate (escaped as ``\\ud83d``, as mmina records such text), so every
element stays on one line and a stored line reads back exactly.
Ids come from the elements themselves (:mod:`mmina.observations.element_ids`), never from timing.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from mmina.observations.aria_snapshot import AriaLine, parse_snapshot, read_key, scalar, single_quoted
from mmina.observations.element_ids import assign_ids

_ID = re.compile(r"\[(?P<id>[^\]\s]+)\] ")
_WEBARENA = re.compile(
    r"(?P<role>[A-Za-z][\w-]*) (?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")(?P<rest>.*)$"
)
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
_LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""What a line shows escaped: line breaks, control characters, lone surrogates (no UTF-8 holds them)."""


@dataclass(frozen=True, kw_only=True)
class Element:
    """An element the agent can act on: its id as shown, ARIA role and accessible name."""

    id: str
    role: str
    name: str
    depth: int
    box: tuple[float, float, float, float] | None = None
    """x, y, width, height in CSS pixels, relative to the viewport (None when unknown)."""
    ref: str | None = field(default=None, compare=False)
    """The browser's ref of the element in the snapshot it was read from (None for a stored tree)."""

    def in_view(self, width: int, height: int) -> bool:
        """Whether any part of the element's box lies inside a viewport of this size."""
        if self.box is None or self.box[2] <= 0 or self.box[3] <= 0:
            return False
        x, y, w, h = self.box
        return x < width and y < height and x + w > 0 and y + h > 0


@dataclass(frozen=True, kw_only=True)
class PageImage:
    """An image shown in the viewport: its source, alt text and box in CSS pixels."""

    src: str
    alt: str
    x: float
    y: float
    width: float
    height: float
    caption: str = ""


@dataclass(frozen=True)
class Tab:
    url: str
    title: str


@dataclass(kw_only=True)
class Observation:
    """Everything an agent may use to choose its next action."""

    step_index: int
    url: str
    title: str
    tabs: list[Tab]
    active_tab: int
    tree_text: str
    elements: list[Element] = field(default_factory=list)
    screenshot: bytes | None = None
    intent: str = ""
    screenshot_som: bytes | None = None
    images: list[PageImage] = field(default_factory=list)
    pending_marks: Callable[[], bytes | None] | None = field(default=None, repr=False, compare=False)
    """The set-of-marks screenshot while it is still being painted (off the critical path)."""

    def resolve_marks(self) -> bytes | None:
        """Wait for the set-of-marks screenshot if it is being painted; returns it."""
        if self.pending_marks is not None:
            self.screenshot_som, self.pending_marks = self.pending_marks(), None
        return self.screenshot_som

    def find(self, role: str, name: str) -> Element | None:
        """The first element with this role and exact accessible name."""
        return next((e for e in self.elements if e.role == role and e.name == name), None)


class ElementIds:
    """The ids of the elements the agent was last shown, and the browser refs they name.

    Only the last observation's ids count: an id is what the agent saw on the page it acts on.
    """

    def __init__(self) -> None:
        self._refs: dict[str, str] = {}

    def show(self, elements: Iterable[Element]) -> None:
        """Remember the ids of an observation's elements (replacing the previous one's)."""
        self._refs = {e.id: e.ref for e in elements if e.ref is not None}

    def ref_for(self, element: str) -> str | None:
        """The browser ref an agent's id names; None for an id not shown in the last observation."""
        return self._refs.get(element)


def flatten_snapshot(snapshot: str) -> tuple[str, list[Element]]:
    """Turn an ``aria_snapshot(mode="ai", boxes=True)`` into agent text and the list of
    addressable elements (with their browser refs).

    Elements inside an iframe (refs ``f1e3``) come with boxes relative to the iframe's own
    viewport; they are moved by the iframe's position so every box is in the page's viewport
    (the screenshot's coordinates), however deeply frames nest.
    """
    lines = parse_snapshot(snapshot)
    ids = assign_ids(lines)
    text, elements = [], []
    frames: list[tuple[int, float, float]] = []  # (depth of an iframe line, x and y of its content)
    for index, line in enumerate(lines):
        while frames and frames[-1][0] >= line.depth:
            frames.pop()
        box = _moved(line.box, frames[-1][1:] if frames else (0.0, 0.0))
        if box is not None and line.role == "iframe":
            frames.append((line.depth, box[0], box[1]))
        if index in ids:
            elements.append(
                Element(
                    id=ids[index], role=line.role, name=line.name, depth=line.depth, box=box, ref=line.ref
                )
            )
        text.append(render_line(line, ids.get(index)))
    return "\n".join(text), elements


def render_line(line: AriaLine, element_id: str | None = None) -> str:
    """One line of the agent's tree text (see the module); :func:`parse_tree_line` reads it back."""
    indent = "\t" * line.depth
    if not line.role:
        return indent + _one_line(line.value or "")
    head = line.role
    if line.name:
        head += " " + _quoted(line.name)
    head += "".join(f" [{_one_line(a)}]" for a in line.attributes)
    if line.value is not None:
        head += ": " + _shown_value(line.value)
    return indent + (f"[{element_id}] " if element_id else "") + head


def tree_lines(tree_text: str) -> list[tuple[str | None, AriaLine]]:
    """The lines of a stored tree text: each element's id (None for lines without one) and
    what the line says. Reads this module's format, the one trees were stored in before it
    (numbered ids, the snapshot's keys and values still YAML-quoted where Playwright quoted
    them) and WebArena's (imported harness runs); a line of none is kept whole as a line of
    role ``""``."""
    return [parse_tree_line(raw) for raw in tree_text.split("\n") if raw.strip()]


def parse_tree_line(raw: str) -> tuple[str | None, AriaLine]:
    """One line of a stored tree text (see :func:`tree_lines`)."""
    body = raw.lstrip("\t")
    depth = len(raw) - len(body)
    found = _ID.match(body)
    element_id = found["id"] if found else None
    body = body[found.end() :] if found else body
    try:
        if body.startswith("'"):  # stored before this format: the key YAML-quoted as Playwright wrote it
            key, rest = single_quoted(body)
            line, end = read_key(depth, key)
            rest = key[end:] + rest
        else:
            line, end = read_key(depth, body)
            rest = body[end:]
        return element_id, line._replace(value=_tree_value(rest))
    except ValueError:
        return element_id, _webarena_line(depth, body)


def _webarena_line(depth: int, body: str) -> AriaLine:
    """A line as WebArena's harness writes it (``link 'Edinburgh' focused: True``: the name as
    Python's ``repr``, then properties), as runs imported from it store; else the text whole."""
    found = _WEBARENA.match(body)
    try:
        name = ast.literal_eval(found["name"]) if found else None
    except (ValueError, SyntaxError):  # not a Python string after all
        name = None
    if found is None or not isinstance(name, str):
        return AriaLine(depth=depth, role="", value=body.strip())
    return AriaLine(depth=depth, role=found["role"], name=name, value=found["rest"].strip() or None)


def elements_from_tree(tree_text: str) -> list[Element]:
    """The addressable elements of a stored tree text, in order, without boxes or refs."""
    return [
        Element(id=element_id, role=line.role, name=line.name, depth=line.depth)
        for element_id, line in tree_lines(tree_text)
        if element_id is not None and line.role
    ]


def counterpart(tree_text: str, element_id: str, elements: Sequence[Element]) -> Element | None:
    """The element of ``elements`` that element ``element_id`` of a stored tree stands for: the
    one with its role and name and as many such elements before it; None when the stored tree
    has no such id or the page no such element. Lets an action stored with the ids of another
    scheme, or of a page that changed elsewhere, reach the element it meant."""
    stored = elements_from_tree(tree_text)
    target = next((e for e in stored if e.id == element_id), None)
    if target is None:
        return None
    nth = sum(e.role == target.role and e.name == target.name for e in stored[: stored.index(target)])
    matches = [e for e in elements if e.role == target.role and e.name == target.name]
    return matches[nth] if nth < len(matches) else None


def _tree_value(rest: str) -> str | None:
    """A stored line's value: None for none; a quoted one (see :func:`_shown_value`, and
    YAML-quoted before this format) unquoted."""
    if rest in ("", ":"):
        return None
    if not rest.startswith(": "):
        raise ValueError(f"unexpected text after a key: {rest!r}")
    text = rest[2:]
    if text.startswith(("'", '"')):
        try:
            return scalar(text)
        except ValueError:
            return text
    return text


def _shown_value(value: str) -> str:
    """A text as shown: as it is, or JSON-quoted when it is empty, starts with a quote or holds
    a line break, another control character or a lone surrogate (so the line reads back exactly)."""
    if value and not value.startswith(("'", '"')) and not _LINE_BREAKING.search(value):
        return value
    return _quoted(value)


def _quoted(text: str) -> str:
    """``text`` as a JSON string on one line (as Playwright writes names; U+0085, U+2028, U+2029
    and lone surrogates escaped too)."""
    return _one_line(_ENCODE(text))


def _one_line(text: str) -> str:
    """``text`` with what ``_LINE_BREAKING`` matches escaped (``\\u2028``)."""
    return _LINE_BREAKING.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _moved(
    box: tuple[float, float, float, float] | None, offset: tuple[float, float]
) -> tuple[float, float, float, float] | None:
    if box is None:
        return None
    x, y, width, height = box
    return x + offset[0], y + offset[1], width, height
