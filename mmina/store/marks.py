"""Set-of-marks screenshots: the element ids painted on the elements an agent can act on.

The recorder paints them while the agent chooses (for agents shown them) and stores, for every
step with a screenshot, the marks themselves (``steps.marks``: id, role and box of each
painted element, in painting order). The screenshot and its marks are enough to paint the
image again, byte for byte at the recording's JPEG quality (:func:`repaint`), so the image
itself is stored only for the agents that were shown it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from mmina.observations.observation import Element

MARKED_ROLES = frozenset(
    {
        "link",
        "button",
        "textbox",
        "searchbox",
        "combobox",
        "checkbox",
        "radio",
        "spinbutton",
        "slider",
        "switch",
        "tab",
        "menuitem",
        "option",
        "listbox",
        "img",
    }
)
PALETTE = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#008080", "#9a6324", "#800000")
DEFAULT_QUALITY = 80
"""The JPEG quality the recorder encodes screenshots and set-of-marks images at."""
Box = tuple[float, float, float, float]


def marked(elements: Iterable[Element], width: int, height: int) -> list[Element]:
    """The elements that get a mark: actionable roles (and images) inside the viewport."""
    return [e for e in elements if e.role in MARKED_ROLES and e.in_view(width, height)]


def mark_rows(elements: Iterable[Element], width: int, height: int) -> list[dict[str, Any]]:
    """The marks of a viewport as ``steps.marks`` stores them, in painting order."""
    rows = []
    for element in marked(elements, width, height):
        assert element.box is not None
        x, y, w, h = element.box
        rows.append({"id": element.id, "role": element.role, "x": x, "y": y, "width": w, "height": h})
    return rows


def draw_marks(screenshot: bytes, marks: Iterable[tuple[str, Box]], quality: int = DEFAULT_QUALITY) -> bytes:
    """The screenshot with each mark's box outlined and its id in a label at the top left."""
    image = Image.open(io.BytesIO(screenshot)).convert("RGB")
    draw_on(image, marks)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


@lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def draw_on(image: Image.Image, marks: Iterable[tuple[str, Box]], scale: float = 1.0) -> None:
    """Paint the marks on ``image`` in place; ``scale``: the image's size over the screenshot's
    the boxes were measured on (a smaller copy gets its boxes and labels scaled: it looks as the
    full-size image shrunk)."""
    draw = ImageDraw.Draw(image)
    font = _font(13 if scale == 1.0 else max(7, round(13 * scale)))
    for index, (label, box) in enumerate(marks):
        x, y, w, h = box if scale == 1.0 else tuple(v * scale for v in box)
        colour = PALETTE[index % len(PALETTE)]
        draw.rectangle((x, y, x + w, y + h), outline=colour, width=2)
        left, top, right, bottom = draw.textbbox((x, y), label, font=font)
        label_y = max(0.0, y - (bottom - top) - 4)
        draw.rectangle((x, label_y, x + (right - left) + 6, label_y + (bottom - top) + 4), fill=colour)
        draw.text((x + 3, label_y + 1), label, fill="white", font=font)


def paint(
    screenshot: bytes, elements: Iterable[Element], width: int, height: int, quality: int = DEFAULT_QUALITY
) -> bytes:
    """The set-of-marks image of a viewport, as the recorder paints it."""
    return repaint(screenshot, mark_rows(elements, width, height), quality)


def repaint(screenshot: bytes, marks: Sequence[Mapping[str, Any]], quality: int = DEFAULT_QUALITY) -> bytes:
    """The set-of-marks image again, from a stored screenshot and its stored ``steps.marks``."""
    return draw_marks(
        screenshot, [(m["id"], (m["x"], m["y"], m["width"], m["height"])) for m in marks], quality
    )


def marked_screenshot(
    stored: bytes | None, screenshot: bytes | None, marks: Sequence[Mapping[str, Any]] | None
) -> bytes | None:
    """A step's set-of-marks image: the stored one, else painted again from the screenshot and
    its marks (None without both)."""
    if stored is not None:
        return stored
    return repaint(screenshot, marks) if screenshot and marks else None
