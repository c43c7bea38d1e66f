"""Set-of-marks screenshots: the element ids painted on the elements an agent can act on."""
from __future__ import annotations

import io
from collections.abc import Iterable

from PIL import Image, ImageDraw, ImageFont

from mmina.observation import Element

MARKED_ROLES = frozenset({
    "link", "button", "textbox", "searchbox", "combobox", "checkbox", "radio", "spinbutton", "slider",
    "switch", "tab", "menuitem", "option", "listbox", "img",
})
PALETTE = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#008080", "#9a6324", "#800000")


def marked(elements: Iterable[Element], width: int, height: int) -> list[Element]:
    """The elements that get a mark: actionable roles (and images) inside the viewport."""
    return [e for e in elements if e.role in MARKED_ROLES and e.in_view(width, height)]


def draw_marks(screenshot: bytes, elements: Iterable[Element], quality: int = 80) -> bytes:
    """The screenshot with each element's box outlined and its id in a label at the top left."""
    image = Image.open(io.BytesIO(screenshot)).convert("RGB")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=13)
    for index, element in enumerate(elements):
        assert element.box is not None
        x, y, w, h = element.box
        colour = PALETTE[index % len(PALETTE)]
        draw.rectangle((x, y, x + w, y + h), outline=colour, width=2)
        left, top, right, bottom = draw.textbbox((x, y), element.id, font=font)
        label_y = max(0.0, y - (bottom - top) - 4)
        draw.rectangle((x, label_y, x + (right - left) + 6, label_y + (bottom - top) + 4), fill=colour)
        draw.text((x + 3, label_y + 1), element.id, fill="white", font=font)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()
