"""Captions for in-view images: none by default, the alt text, or a vision model's description.

A captioner turns each image the agent sees into a few words; the recorder stores them on the
step (``steps.images[].caption``) and the ``openai`` agent's ``caption`` input mode shows them.
"""

from __future__ import annotations

import base64
import hashlib
import io
from typing import Any, Protocol

from PIL import Image

from mmina.agents.settings import CAPTIONERS, AgentSettings
from mmina.errors import AgentError
from mmina.models.model_client import ModelClient, ModelError, require_api_key
from mmina.observations.observation import PageImage


class Captioner(Protocol):
    """Describes an in-view image in a few words (the ``caption`` input mode)."""

    def caption(self, image: PageImage, screenshot: bytes | None) -> str: ...


class AltTextCaptioner:
    """The default: the image's alt text, which costs nothing and needs no model."""

    def caption(self, image: PageImage, screenshot: bytes | None) -> str:
        return image.alt or "(no description)"


class OpenAICaptioner:
    """A vision model's one-sentence caption of the image, cropped from the screenshot.

    The crop is what the agent saw, wherever the image came from; captions are cached by the
    crop's hash, so an image shown on many steps is captioned once.
    """

    def __init__(self, client: ModelClient, model: str, max_tokens: int = 60) -> None:
        self.client, self.model, self.max_tokens = client, model, max_tokens
        self._cache: dict[str, str] = {}

    def caption(self, image: PageImage, screenshot: bytes | None) -> str:
        crop = _crop(screenshot, image) if screenshot else None
        if crop is None:
            return image.alt or "(no description)"
        key = hashlib.sha256(crop).hexdigest()
        if key not in self._cache:
            self._cache[key] = self._ask(crop)
        return self._cache[key]

    def _ask(self, crop: bytes) -> str:
        content = [{"type": "text", "text": "Describe this image in one short sentence."}, image_part(crop)]
        try:
            reply = self.client.complete(
                model=self.model,
                messages=[{"role": "user", "content": content}],
                max_tokens=self.max_tokens,
                temperature=0.0,
            )
        except ModelError as exc:
            if exc.infrastructure:
                raise  # the endpoint's failure, not the agent's (down past its patience: the run stops, resumable)
            raise AgentError(f"captioning failed: {exc}") from None
        return " ".join(reply.text.split())


def make_captioner(settings: AgentSettings) -> Captioner | None:
    """The recorder's captioner from ``--captioner`` (``none`` stores no captions)."""
    if settings.captioner == "alt":
        return AltTextCaptioner()
    if settings.captioner == "openai":
        model = settings.caption_model or settings.model
        if not model:
            raise AgentError("--captioner openai needs --caption-model NAME (or --model)")
        require_api_key("talking to a model", AgentError)
        return OpenAICaptioner(
            ModelClient(settings.base_url, settings.deadlines, "captioning endpoint"), model
        )
    if settings.captioner != "none":
        raise AgentError(f"unknown captioner {settings.captioner!r}: use {', '.join(CAPTIONERS)}")
    return None


def image_part(jpeg: bytes) -> dict[str, Any]:
    encoded = base64.b64encode(jpeg).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{encoded}"}}


def _crop(screenshot: bytes, image: PageImage) -> bytes | None:
    """The image's box cut out of the viewport screenshot, as JPEG (None when nothing of it is visible)."""
    with Image.open(io.BytesIO(screenshot)) as page:
        box = (
            max(0, round(image.x)),
            max(0, round(image.y)),
            min(page.width, round(image.x + image.width)),
            min(page.height, round(image.y + image.height)),
        )
        if box[2] <= box[0] or box[3] <= box[1]:
            return None
        out = io.BytesIO()
        page.crop(box).convert("RGB").save(out, "JPEG", quality=85)
    return out.getvalue()
