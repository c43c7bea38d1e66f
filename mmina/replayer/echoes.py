"""Echoed ids: a value the page sends that the recorded server echoed back, rewritten in the reply
to the value the replayed page sent.

A page draws an id (a session, a message, a JSON-RPC call) and checks that the server's reply
carries it back. The replayed page may draw another one — how many draws come before it depends
on load order and timing — and the archive's reply carries the recorded one: a notebook page then
concluded that its session had been replaced, and deleted it. So, found from the recording's own
request/reply pairs and not from a list of protocols: where a replayed request (or socket message)
holds another value than the recorded one it was matched to, at the same place — a URL path
segment, a query or form parameter, a JSON value — and the recorded reply echoes the recorded
value, the reply gets the replayed page's value instead. What was learned holds for the rest of
the episode (a session id drawn once comes back in later replies too).

Only values that can stand for an id are followed (:func:`id_like`): a string of six characters
or more with a digit in it (``7f3a9c2e-…``, ``s_84a1c2``), or a number under the same key in the
reply as in the request (JSON-RPC's ``id``), rewritten in the next reply that has it only: a
word that differs (a nearest match's other search term) is never rewritten into a reply. Replies
are changed in place: only the echoed literals change, every other byte stays.

A binary message (a socket frame) is searched for the JSON documents it carries between its own
bytes — Jupyter's kernel protocol ``v1.kernel.websocket.jupyter.org`` frames a message as binary
offsets, then its channel and its header, parent header, metadata and content as JSON one after
another — and each document's values are places of their own (``json0/msg_id``,
``json1/msg_id``). A binary reply gets an echoed id only where the page's id has the recorded
one's length in bytes (a UUID for a UUID): the frame's offsets stay right.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

MIN_ID = 6
"""Shorter strings are not followed (``en``, ``true``, a page number)."""
_LEADING_DIGITS = re.compile(r"^\d{1,3}")
"""A framed message's packet type before its JSON (socket.io's ``42``)."""
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\ufffd]")
"""A character no text message has: the message is binary (its JSON is framed by bytes)."""
MAX_FRAMED = 1 << 16
"""A binary message longer than this is not searched for JSON (a file, an image)."""
MAX_ATTEMPTS = 256
"""At most this many places a JSON document could start are tried in one binary message."""


def id_like(value: Any) -> bool:
    """Whether a value could be an id a server echoes (see the module)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return True
    return (
        isinstance(value, str)
        and len(value) >= MIN_ID
        and any(c.isdigit() for c in value)
        and not any(c.isspace() for c in value)
    )


def places(url: str | None, body: bytes | str | None) -> dict[str, Any]:
    """The values a request or message carries, by place: ``path/2``, ``query/id``, ``json/header.msg_id``."""
    found: dict[str, Any] = {}
    if url:
        try:
            parts = urlsplit(url)
        except ValueError:  # a malformed authority ("http://[x/"): nothing to follow in it
            parts = urlsplit("")
        found.update((f"path/{i}", segment) for i, segment in enumerate(parts.path.split("/")) if segment)
        found.update((f"query/{name}", value) for name, value in reversed(parse_qsl(parts.query)))
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if text:
        found.update(_body_places(text))
    return found


def _body_places(text: str) -> dict[str, Any]:
    if _CONTROL.search(text):
        return _framed_places(text)
    document = _json(text)
    if document is not None:
        return {f"json/{path}": value for path, value in _leaves(document, "")}
    if "=" in text and "\n" not in text and len(text) < 65536:
        return {f"form/{name}": value for name, value in reversed(parse_qsl(text))}
    return {}


def _framed_places(text: str) -> dict[str, Any]:
    """The values of the JSON documents a binary message carries, each its own place (``json1/msg_id``)."""
    found: dict[str, Any] = {}
    for number, document in enumerate(framed_documents(text)):
        found.update((f"json{number}/{path}", value) for path, value in _leaves(document, ""))
    return found


def framed_documents(text: str) -> list[Any]:
    """The JSON objects and arrays found one after another in a binary message's text (see the module)."""
    decoder, documents, position = json.JSONDecoder(), [], 0
    if len(text) > MAX_FRAMED:
        return []
    for _attempt in range(MAX_ATTEMPTS):
        start = _next_opening(text, position)
        if start < 0:
            break
        try:
            document, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            position = start + 1
            continue
        if isinstance(document, (dict, list)):
            documents.append(document)
        position = max(end, start + 1)
    return documents


def _next_opening(text: str, position: int) -> int:
    """Where the next ``{`` or ``[`` is at or after ``position`` (-1: none)."""
    found = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
    return min(found) if found else -1


def _json(text: str) -> Any:
    """A JSON document, also after a framed message's packet type (``42[...]``); None: not JSON."""
    stripped = _LEADING_DIGITS.sub("", text.strip(), count=1) if text[:1].isdigit() else text.strip()
    if stripped[:1] not in ("{", "["):
        return None
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return None


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:64]):
            yield from _leaves(inner, f"{path}[{index}]")
    else:
        yield path, value


def _key(place: str) -> str:
    """The last key of a JSON place (``json/header.msg_id`` → ``msg_id``), else the parameter's name."""
    name = place.split("/", 1)[1]
    return re.split(r"[.\[]", name)[-1].rstrip("]")


def differing(recorded: dict[str, Any], replayed: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The places where the replayed request holds another id-like value than the recorded one:
    (recorded, replayed) by place (none, for a request matched exactly)."""
    return {
        place: (old, replayed[place])
        for place, old in recorded.items()
        if place in replayed
        and replayed[place] != old
        and type(replayed[place]) is type(old)
        and id_like(old)
    }


class Echoes:
    """What one episode's replay learned: recorded value → the replayed page's, and rewriting (see the module)."""

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        """Recorded id → the replayed page's, anywhere in a reply."""
        self.numbers: dict[tuple[str, float], Any] = {}
        """(key, recorded number) → the replayed page's, under that key in the next reply that has it
        (a number is no unique id: once echoed, it is forgotten)."""

    def learn(self, recorded: dict[str, Any], replayed: dict[str, Any], reply: str) -> None:
        """The places where the replayed request holds another value than the recorded one, whose
        recorded value the recorded ``reply`` echoes."""
        for place, (old, new) in differing(recorded, replayed).items():
            if isinstance(old, str) and old in reply:
                self.strings[old] = str(new)
            elif isinstance(old, (int, float)) and re.search(
                rf'"{re.escape(_key(place))}"\s*:\s*{re.escape(json.dumps(old))}', reply
            ):
                self.numbers[(_key(place), old)] = new

    def rewrite(self, reply: str) -> str:
        """``reply`` with every echoed id the episode learned given the replayed page's value."""
        if not self.strings and not self.numbers:
            return reply
        for old in sorted(self.strings, key=len, reverse=True):
            if old in reply:
                reply = reply.replace(old, self.strings[old])
        for (key, number), new in list(self.numbers.items()):
            literal = json.dumps(new)
            reply, changed = re.subn(
                rf'("{re.escape(key)}"\s*:\s*){re.escape(json.dumps(number))}(?=\s*[,}}\]])',
                lambda m: f"{m.group(1)}{literal}",  # noqa: B023 - used at once
                reply,
            )
            if changed:
                del self.numbers[
                    (key, number)
                ]  # a number is echoed once (a call's id), then means anything again
        return reply

    def rewrite_bytes(self, reply: bytes) -> bytes:
        """A binary ``reply`` with every echoed id the episode learned given the replayed page's
        value, where the two are as long in bytes (the frame's offsets stay right; see the module)."""
        for old in sorted(self.strings, key=len, reverse=True):
            recorded, replayed = old.encode(), self.strings[old].encode()
            if len(recorded) == len(replayed) and recorded in reply:
                reply = reply.replace(recorded, replayed)
        return reply

    def __bool__(self) -> bool:
        return bool(self.strings or self.numbers)
