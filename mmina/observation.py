"""Observations: what the agent sees at a step, and the pure flattening of the browser's
accessibility snapshot into the ``[id] role 'name'`` text that WebArena and MMInA show.

Playwright's ``aria_snapshot(mode="ai")`` marks elements with refs such as ``[ref=e12]``
or, after navigations, ``[ref=f3e12]``. The agent sees small integers instead (``[12]``),
handed out by an :class:`ElementIds` per episode so an element keeps its id across steps.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

_LINE = re.compile(r"^(?P<indent>\s*)- (?P<body>.*)$")
_REF = re.compile(r"\s*\[ref=(?P<ref>[A-Za-z0-9]+)\]")
_BOX = re.compile(r"\s*\[box=(?P<box>-?[\d.]+,-?[\d.]+,-?[\d.]+,-?[\d.]+)\]")
_NOISE = re.compile(r"\s*\[cursor=pointer\]")
_HEAD = re.compile(r'^(?P<role>[A-Za-z/][\w/-]*)(?:\s+"(?P<name>(?:[^"\\]|\\.)*)")?')


@dataclass(frozen=True)
class Element:
    """An element the agent can act on: its id as shown, ARIA role and accessible name."""

    id: str
    role: str
    name: str
    depth: int
    box: tuple[float, float, float, float] | None = None
    """x, y, width, height in CSS pixels, relative to the viewport (None when unknown)."""

    def in_view(self, width: int, height: int) -> bool:
        """Whether any part of the element's box lies inside a viewport of this size."""
        if self.box is None or self.box[2] <= 0 or self.box[3] <= 0:
            return False
        x, y, w, h = self.box
        return x < width and y < height and x + w > 0 and y + h > 0


@dataclass(frozen=True)
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


@dataclass
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
    """Stable integer ids for the browser's element refs, one registry per episode."""

    def __init__(self) -> None:
        self._by_ref: dict[str, str] = {}
        self._by_id: dict[str, str] = {}

    def id_for(self, ref: str) -> str:
        if ref not in self._by_ref:
            element = str(len(self._by_ref) + 1)
            self._by_ref[ref], self._by_id[element] = element, ref
        return self._by_ref[ref]

    def ref_for(self, element: str) -> str | None:
        """The browser ref an agent's id names; None for an id never shown."""
        return self._by_id.get(element)


def flatten_snapshot(snapshot: str, ids: ElementIds) -> tuple[str, list[Element]]:
    """Turn an ``aria_snapshot(mode="ai")`` into agent text and the list of addressable elements.

    Elements inside an iframe (refs ``f1e3``) come with boxes relative to the iframe's own
    viewport; they are moved by the iframe's position so every box is in the page's viewport
    (the screenshot's coordinates), however deeply frames nest.
    """
    lines, elements = [], []
    frames: list[tuple[int, float, float]] = []  # (depth of an iframe line, x and y of its content)
    for raw in snapshot.splitlines():
        match = _LINE.match(raw)
        if not match:
            if raw.strip():
                lines.append(raw.strip())
            continue
        depth = len(match["indent"]) // 2
        while frames and frames[-1][0] >= depth:
            frames.pop()
        body = _NOISE.sub("", match["body"]).rstrip()
        box = _BOX.search(body)
        body = _BOX.sub("", body)
        body = body[:-1] if body.endswith(":") else body
        offset = frames[-1][1:] if frames else (0.0, 0.0)
        placed = _moved(_parse_box(box["box"]), offset) if box else None
        if placed is not None and body.startswith("iframe"):
            frames.append((depth, placed[0], placed[1]))
        ref = _REF.search(body)
        if ref:
            body = _REF.sub("", body)
            element = _element(ids.id_for(ref["ref"]), body, depth, placed)
            elements.append(element)
            body = f"[{element.id}] {body}"
        lines.append("\t" * depth + body)
    return "\n".join(lines), elements


def _moved(box: tuple[float, float, float, float], offset: tuple[float, float]) -> tuple[float, float, float, float]:
    x, y, width, height = box
    return x + offset[0], y + offset[1], width, height


def _element(element: str, body: str, depth: int, box: tuple[float, float, float, float] | None) -> Element:
    head = _HEAD.match(body)
    role = head["role"] if head else body.split(" ")[0]
    name = head["name"] if head and head["name"] is not None else ""
    return Element(element, role, name.replace('\\"', '"'), depth, box)


def _parse_box(text: str) -> tuple[float, float, float, float]:
    x, y, w, h = (float(v) for v in text.split(","))
    return x, y, w, h
