"""The exact request an agent sent to its model, stored by content so that shared parts cost once.

A request is what an OpenAI-compatible ``chat.completions.create`` call was given: ``model``,
``messages`` and the other parameters (``temperature``, ``max_tokens``, ...). An agent hands
it to the recorder as ``AgentReply.request``; the recorder stores it as blobs:

* every message is a JSON blob (media type :data:`MESSAGE_TYPE`) in which an image part names
  its image by blob hash instead of carrying a data URL:
  ``{"type": "image_url", "image_url": {"blob": "<sha256>", "media_type": "image/jpeg"}}``;
  the image is a blob of its own (a screenshot shown to the model is the very blob
  ``steps.screenshot`` or ``steps.screenshot_som`` names);
* the request is a JSON blob (media type :data:`INPUT_TYPE`):
  ``{"model": ..., "parameters": {...}, "messages": ["<message sha256>", ...]}``, and
  ``steps.model_input`` holds its hash.

The system prompt, the few-shot examples and a memory block are the same message on every
step (and in every episode with the same memory), so each is stored once. JSON is written
canonically (sorted keys, no spaces), so equal messages are equal bytes.
:func:`load_request` rebuilds the request exactly as it was sent, images as data URLs again.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from mmina.redaction.redact import Redactor

MESSAGE_TYPE = "application/vnd.mmina.message+json"
INPUT_TYPE = "application/vnd.mmina.model-input+json"
_DATA_URL = re.compile(r"^data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.S)

PutBlob = Callable[[bytes, str], str]
GetBlob = Callable[[str], bytes]


def canonical(value: Any) -> bytes:
    """JSON with sorted keys and no spaces: the same value always gives the same bytes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def store_request(request: Mapping[str, Any], put_blob: PutBlob, redactor: Redactor | None = None) -> str:
    """Store a request as blobs (see the module docstring); returns the hash of its input blob.

    ``redactor`` redacts every text of every message and the parameters (the recorder's holds
    every secret of the episode); images are stored as they were sent.
    """
    redactor = redactor or Redactor()
    messages = [
        put_blob(canonical(_redacted_message(m, redactor)), MESSAGE_TYPE)
        for m in with_image_blobs(request, put_blob)["messages"]
    ]
    parameters = redactor.value({k: v for k, v in request.items() if k not in ("model", "messages")})
    return put_blob(
        canonical({"model": request.get("model"), "parameters": parameters, "messages": messages}), INPUT_TYPE
    )


def _redacted_message(message: Mapping[str, Any], redactor: Redactor) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        content = redactor.text(content)
    elif isinstance(content, list):
        content = [_redacted_part(part, redactor) for part in content]
    return {**message, "content": content}


def _redacted_part(part: Mapping[str, Any], redactor: Redactor) -> Any:
    if part.get("type") == "text":
        return {**part, "text": redactor.text(str(part.get("text", "")))}
    return part


def with_image_blobs(request: Mapping[str, Any], put_blob: PutBlob) -> dict[str, Any]:
    """``request`` with every image sent as a data URL stored as a blob and named by its hash (the
    first half of :func:`store_request`; an image already named so stays as it is). A recorder
    holds an episode's requests until the episode ends, to redact them with every secret it
    learned: so it holds their text, not each step's screenshot again as base64 (~0.5 MB a step
    at 1280×2048)."""
    messages = request.get("messages")
    if not isinstance(messages, (list, tuple)):
        return dict(request)
    return {**request, "messages": [_message_images(m, put_blob) for m in messages]}


def _message_images(message: Mapping[str, Any], put_blob: PutBlob) -> Mapping[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {**message, "content": [_image_blob(part, put_blob) for part in content]}


def _image_blob(part: Any, put_blob: PutBlob) -> Any:
    """An image part sent as a data URL, its image stored and named by hash; any other part as it is."""
    if not isinstance(part, Mapping):
        return part
    image = part.get("image_url")
    if not isinstance(image, Mapping):
        return part
    found = _DATA_URL.match(image.get("url", ""))
    if found is None:
        return part
    digest = put_blob(base64.b64decode(found["data"]), found["media"])
    rest = {k: v for k, v in image.items() if k != "url"}
    return {**part, "image_url": {**rest, "blob": digest, "media_type": found["media"]}}


def load_request(digest: str, get_blob: GetBlob) -> dict[str, Any]:
    """The request stored under ``digest``, as it was sent (images as data URLs again)."""
    document = json.loads(get_blob(digest))
    messages = [_sent_message(json.loads(get_blob(h)), get_blob) for h in document["messages"]]
    return {"model": document["model"], "messages": messages, **document["parameters"]}


def _sent_message(message: dict[str, Any], get_blob: GetBlob) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        message["content"] = [_sent_part(part, get_blob) for part in content]
    return message


def _sent_part(part: dict[str, Any], get_blob: GetBlob) -> dict[str, Any]:
    image = part.get("image_url")
    if not isinstance(image, dict) or "blob" not in image:
        return part
    data = base64.b64encode(get_blob(image["blob"])).decode("ascii")
    rest = {k: v for k, v in image.items() if k not in ("blob", "media_type")}
    return {**part, "image_url": {"url": f"data:{image['media_type']};base64,{data}", **rest}}


def message_digests(document: bytes) -> list[str]:
    """The message hashes of a stored input blob (what ``load_request`` reads next)."""
    return list(json.loads(document)["messages"])
