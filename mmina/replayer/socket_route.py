"""Playwright side of socket replay: one routed WebSocket played by the clock.

:class:`SocketPlayer` feeds what the page sends to its :class:`~mmina.replayer.sockets.SocketPlay`
and sends each server message when it falls due, on the browser's event loop; it keeps a log
of both directions in Playwright's HAR format, because a routed socket leaves no entry in the
context's HAR: the replay run's ``requests`` get the socket's row from :meth:`har_entry`.
"""
from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from playwright.async_api import Error as PlaywrightError, WebSocketRoute

from mmina.replayer.archive import Exchange
from mmina.replayer.fidelity import SocketFidelity, compare_sockets
from mmina.replayer.sockets import PAGE, SERVER, Data, SocketPlay, parse_messages

IDLE_CHECK_S = 1.0
"""A player waiting for the page looks this often whether it was stopped."""


@dataclass
class SocketPlayer:
    """One socket the page opened, played from its recorded conversation (see the module)."""

    socket: WebSocketRoute
    exchange: Exchange
    """The recorded socket it plays."""
    play: SocketPlay
    opened_at: datetime
    log: list[dict[str, Any]] = field(default_factory=list)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _stopped: bool = False
    _task: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, socket: WebSocketRoute, exchange: Exchange) -> SocketPlayer:
        """Play ``exchange``'s conversation to ``socket`` from now (on the browser's loop)."""
        loop = asyncio.get_running_loop()
        play = SocketPlay(parse_messages(exchange.body, exchange.started_ms), loop.time())
        player = cls(socket, exchange, play, datetime.now(timezone.utc))
        socket.on_message(player._heard)
        socket.on_close(lambda _code, _reason: player.stop())
        player._task = loop.create_task(player._run())  # held here: a task nobody holds may be collected
        return player

    def stop(self) -> None:
        """Stop playing (the socket closed, or the episode ended); safe from any thread."""
        self._stopped = True

    def _heard(self, data: Data) -> None:
        self._logged(PAGE, data)
        self._send(self.play.heard(data, asyncio.get_running_loop().time()))
        self._wake.set()

    def heard_elsewhere(self, data: Data) -> None:
        """The page said ``data`` on another transport of the same session (a long-poll before
        its upgrade finished): the script goes on as if it had been said here."""
        self.play.heard(data, asyncio.get_running_loop().time())
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped:
            self._send(self.play.due(loop.time()))
            if self.play.finished:
                return
            due = self.play.next_time()
            wait = IDLE_CHECK_S if due is None else min(IDLE_CHECK_S, max(0.0, due - loop.time()))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _send(self, messages: list[Data]) -> None:
        for data in messages:
            try:
                self.socket.send(data)
            except PlaywrightError:
                self.stop()  # the page closed the socket meanwhile
                return
            self._logged(SERVER, data)

    def _logged(self, direction: str, data: Data) -> None:
        binary = isinstance(data, bytes)
        self.log.append({"type": direction, "time": time.time() * 1e3, "opcode": 2 if binary else 1,
                         "data": base64.b64encode(data).decode() if isinstance(data, bytes) else data})

    def body(self) -> str:
        """What was said on the socket, as JSON lines in Playwright's HAR format."""
        return "".join(json.dumps(message) + "\n" for message in self.log)

    def fidelity(self) -> SocketFidelity:
        """The socket compared with its recording, message by message."""
        return compare_sockets(self.exchange.url, parse_messages(self.exchange.body),
                               parse_messages(self.body().encode()))

    def har_entry(self) -> dict[str, Any]:
        """The socket as Playwright's HAR would have it: its URL, a 101, and the messages of both
        directions as JSON lines (the body a recorded socket's row has)."""
        body = self.body()
        return {"startedDateTime": self.opened_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "time": 0.0,
                "_resourceType": "websocket",
                "request": {"method": "GET", "url": self.socket.url, "headers": []},
                "response": {"status": 101, "headers": [],
                             "content": {"size": len(body), "mimeType": "x-unknown", "text": body}}}
