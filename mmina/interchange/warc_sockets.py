"""WebSockets in WARC as the archiving field is standardising them (IIPC warc-specifications
issue #115, as Browsertrix's ``ws-support`` branch writes it, 2026-04): pure conversions.

A socket is three records: the handshake's ``request`` and ``response`` (``101``, headers
only, target URI the ``http(s)://`` form) and a ``resource`` record whose ``WARC-Target-URI``
is the ``ws(s)://`` URL, ``WARC-Date`` when the socket opened, and whose block holds one JSON
line per frame in the Chrome DevTools protocol's ``WebSocketFrame`` shape with its time and
direction: ``{"ts": seconds after the socket opened, "type": "send" | "recv", "opcode": 1 |
2 | 8, "mask": bool, "payloadData": text, or base64 for a binary frame}``. A close frame
(opcode 8) also says ``closeCode`` and ``closeReason``; the store keeps one as a ``close`` line.

mmina stores a socket as a ``requests`` row whose body is the conversation in Playwright's
HAR form (``{"type": "send" | "receive", "time": wall-clock ms, "opcode", "data"}``, see
``mmina.replayer.sockets``); these functions turn one into the other and back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

SOCKET_SCHEMES = ("ws://", "wss://")
FRAMES_TYPE = 'application/jsonl; format="cdp"'
"""The resource record's ``Content-Type``, as Browsertrix writes it."""
RESOURCE_KIND = "websocket"
"""The resource record's ``WARC-Resource`` field (Browsertrix's)."""
DIRECTIONS = {"send": "send", "receive": "recv"}
"""mmina's (Playwright's HAR) direction names → the proposal's."""
STORED_DIRECTIONS = {v: k for k, v in DIRECTIONS.items()}
SOCKET_MIME = "x-unknown"
"""The ``mime_type`` of a socket's row, as Playwright's HAR gives it."""
CLOSE, CLOSE_OPCODE = "close", 8
"""A close frame: kept in the stored log as a line of type ``close`` (``direction``, ``code``,
``reason``), which replay does not play (it plays ``send`` and ``receive`` lines only)."""
DATA_OPCODES = (1, 2)
"""Text and binary frames: what a page's ``WebSocket`` hands its page (control frames it does not)."""


def is_socket_url(url: str) -> bool:
    return url.lower().startswith(SOCKET_SCHEMES)


def is_socket(row: dict[str, Any]) -> bool:
    """A stored ``requests`` row that is a WebSocket (its handshake answered ``101``)."""
    return row.get("status") == 101 and is_socket_url(row.get("url") or "")


def http_form(url: str) -> str:
    """``ws://`` → ``http://``, ``wss://`` → ``https://`` (the handshake's own URL)."""
    return "http" + url[2:] if is_socket_url(url) else url


def frames_block(stored: bytes, opened: datetime) -> tuple[bytes, int]:
    """The stored conversation as the proposal's JSON lines, timed from ``opened``; and how
    many frames it holds (a line that is not a message is left out, as replay skips it)."""
    start_ms = opened.timestamp() * 1e3
    lines = [_frame(message, start_ms) for message in _json_lines(stored)]
    kept = [line for line in lines if line is not None]
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in kept).encode(), len(kept)


def _frame(message: dict[str, Any], start_ms: float) -> dict[str, Any] | None:
    closed = message.get("type") == CLOSE
    direction = DIRECTIONS.get(message.get("direction" if closed else "type", ""))
    time = message.get("time")
    if direction is None or not isinstance(time, (int, float)):
        return None
    frame = {
        "ts": round(max(0.0, time - start_ms) / 1e3, 6),
        "type": direction,
        "opcode": CLOSE_OPCODE if closed else int(message.get("opcode") or 1),
        "mask": direction == "send",
        "payloadData": "" if closed else str(message.get("data", "")),
    }
    if closed:
        frame.update(closeCode=message.get("code"), closeReason=message.get("reason") or "")
    return frame


@dataclass(frozen=True)
class StoredLog:
    """A socket's frames in mmina's stored form, and what of them could not be kept."""

    body: bytes
    frames: int
    control: int
    """Control frames (close, ping, pong): the browser answers them, the page sees none but the
    close (its code and reason, kept as a ``close`` line); ping and pong are left out."""
    unreadable: int


def stored_log(block: bytes, opened: datetime) -> StoredLog:
    """The proposal's JSON lines (a resource record's block, opened at its ``WARC-Date``) as
    mmina stores a socket; CDP's ``recv`` and mmina's ``receive`` are both read."""
    start_ms = opened.timestamp() * 1e3
    out: list[str] = []
    frames = control = unreadable = 0
    for frame in _json_lines(block):
        direction = STORED_DIRECTIONS.get(frame.get("type", ""), frame.get("type"))
        ts, opcode = frame.get("ts"), frame.get("opcode", 1)
        if direction not in DIRECTIONS or not isinstance(ts, (int, float)) or not isinstance(opcode, int):
            unreadable += 1
        elif opcode not in DATA_OPCODES:
            control += 1
            if opcode == CLOSE_OPCODE:
                out.append(
                    _line(
                        {
                            "type": CLOSE,
                            "direction": direction,
                            "time": round(start_ms + ts * 1e3, 4),
                            "code": frame.get("closeCode"),
                            "reason": frame.get("closeReason") or "",
                        }
                    )
                )
        else:
            data = frame.get("payloadData", frame.get("data", ""))
            out.append(
                _line(
                    {
                        "type": direction,
                        "time": round(start_ms + ts * 1e3, 4),
                        "opcode": opcode,
                        "data": str(data),
                    }
                )
            )
            frames += 1
    return StoredLog("".join(out).encode(), frames, control, unreadable)


def _line(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"


def _json_lines(block: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a block, one a line (other lines skipped)."""
    found = []
    for line in block.decode("utf-8", "replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found
