"""Playwright side of socket replay: one routed WebSocket played by the clock.

:class:`SocketPlayer` feeds what the page sends to its :class:`~mmina.replayer.sockets.SocketPlay`
and sends each server message when it falls due — and, in a paced replay, when its turn has
come (``mmina.replayer.turns``: not before the observations the recording took before it, and
the player tells when its next message is due, for the observations that must wait for it) —
on the browser's event loop; it keeps a log
of both directions in Playwright's HAR format, because a routed socket leaves no entry in the
context's HAR: the replay run's ``requests`` get the socket's row from :meth:`har_entry`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import astuple, dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import WebSocketRoute

from mmina.replayer.archive import Exchange
from mmina.replayer.echoes import Echoes, places
from mmina.replayer.sockets import PAGE, SERVER, Data, Message, SocketPlay, parse_messages, session_script
from mmina.replayer.timeline import Timeline
from mmina.replayer.turns import Expected, Turns

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
    turns: Turns | None = None
    log: list[dict[str, Any]] = field(default_factory=list)
    recorded_opened: float | None = None
    """When the recorded socket opened (wall-clock seconds; None: unknown), to time its messages."""
    echoes: Echoes = field(default_factory=Echoes)
    """The ids the page sent in place of the recorded ones (shared with the episode's router)."""
    timeline: Timeline | None = None
    """The page's time in a paced replay: a page message not said yet is given up on after
    ``STALL_S`` of it, not of this socket's clock (``SocketPlay.behind``)."""
    _stood_at_open: float = 0.0
    """How long τ had stood still when the socket opened (``Timeline.stalled_s``)."""
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _stopped: bool = False
    _task: asyncio.Task[None] | None = None

    @classmethod
    def start(
        cls,
        socket: WebSocketRoute,
        exchange: Exchange,
        turns: Turns | None = None,
        polled: list[Message] | None = None,
        echoes: Echoes | None = None,
        timeline: Timeline | None = None,
    ) -> SocketPlayer:
        """Play ``exchange``'s conversation to ``socket`` from now (on the browser's loop), with
        the page messages its session ``polled`` meanwhile (``sockets.session_script``), in the
        recorded order with the observations when ``turns`` keeps it, a page message not said
        yet waited for on the ``timeline``'s time when there is one."""
        loop = asyncio.get_running_loop()
        opened_s = (exchange.started_ms or 0.0) / 1e3
        said = parse_messages(exchange.body, 0.0)
        messages = (
            session_script(said, polled or [], opened_s)
            if exchange.started_ms
            else parse_messages(exchange.body)
        )
        slots = (
            [turns.slot(opened_s + m.at) for m in messages]
            if turns is not None and exchange.started_ms
            else []
        )
        player = cls(
            socket,
            exchange,
            SocketPlay(messages, loop.time(), slots),
            datetime.now(UTC),
            turns,
            recorded_opened=opened_s if exchange.started_ms else None,
            echoes=echoes or Echoes(),
            timeline=timeline,
            _stood_at_open=_stood(timeline),
        )
        socket.on_message(player._heard)
        socket.on_close(lambda _code, _reason: player.stop())
        if turns is not None:
            turns.on_turn(player._wake.set)
        player._task = loop.create_task(player._run())  # held here: a task nobody holds may be collected
        return player

    def stop(self) -> None:
        """Stop playing (the socket closed, or the episode ended); safe from any thread."""
        self._stopped = True

    def _heard(self, data: Data) -> None:
        self._logged(PAGE, data)
        answers = self.play.heard(data, asyncio.get_running_loop().time())
        self._learn(data)
        self._send(answers, recorded=False)
        self._wake.set()

    def _learn(self, data: Data) -> None:
        """The ids the page's message holds in place of the recorded one's it was matched to, which
        the recorded server's messages echo (``mmina.replayer.echoes``)."""
        index = self.play.last_heard
        recorded = self.play.messages[index].data if index is not None else None
        if recorded is not None and type(recorded) is type(data) and recorded != data:
            self.echoes.learn(places(None, recorded), places(None, data), self._server_text)

    @cached_property
    def _server_text(self) -> str:
        """What the recorded server said on the socket, as one text (where an echo is looked for;
        a binary message's bytes as text, its framed JSON with them)."""
        return "\n".join(
            m.data if isinstance(m.data, str) else m.data.decode("utf-8", "replace")
            for m in self.play.messages
            if m.direction == SERVER
        )

    def heard_elsewhere(self, data: Data) -> None:
        """The page said ``data`` on another transport of the same session (a long-poll before
        its upgrade finished): the script goes on as if it had been said here."""
        self.play.heard(data, asyncio.get_running_loop().time(), by_order=False)
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._stopped:
                self.play.behind = _stood(self.timeline) - self._stood_at_open
                self._send(self.play.due(loop.time(), self.turns.taken if self.turns else 0))
                if self.play.finished:
                    return
                due = self.play.next_time()
                self._expect(due)
                held = self.turns is not None and not self.turns.may_deliver(self.play.next_slot())
                wait = IDLE_CHECK_S if due is None or held else min(IDLE_CHECK_S, max(0.0, due - loop.time()))
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except TimeoutError:
                    pass
        finally:
            if self.turns is not None:
                self.turns.dropped(self.key)

    @property
    def key(self) -> tuple[str, int]:
        """The player's name among the deliveries an observation may wait for (``Turns``)."""
        return ("socket", id(self))

    def _expect(self, due: float | None) -> None:
        """Tell the observations when the next recorded server message is due (its cause heard or not)."""
        if self.turns is not None and due is not None:
            self.turns.expect(self.key, *astuple(self._upcoming(due)))

    def _upcoming(self, due: float) -> Expected:
        """The next recorded server message as a delivery on its way, due at ``due``."""
        return Expected(
            self.play.next_slot(), due, self._recorded(self.play.next_at()), self.play.waits_for_page()
        )

    def _send(self, messages: list[Data], recorded: bool = True) -> None:
        """Send ``messages`` (``recorded``: the script's, whose delivery the observations wait for;
        else answers in kind)."""
        for data in messages:
            data = self.echoes.rewrite(data) if isinstance(data, str) else self.echoes.rewrite_bytes(data)
            try:
                self.socket.send(data)
            except PlaywrightError:
                self.stop()  # the page closed the socket meanwhile
                return
            self._logged(SERVER, data)
        if messages and recorded and self.turns is not None:
            due = self.play.next_time()
            upcoming = self._upcoming(due) if due is not None else None
            self.turns.delivered(
                self.key, asyncio.get_running_loop().time(), upcoming, self._recorded(self.play.sent_at)
            )

    def _recorded(self, at: float | None) -> float | None:
        """A script time as when the recording had it (wall-clock seconds; None: unknown)."""
        return None if at is None or self.recorded_opened is None else self.recorded_opened + at

    def _logged(self, direction: str, data: Data) -> None:
        binary = isinstance(data, bytes)
        self.log.append(
            {
                "type": direction,
                "time": time.time() * 1e3,
                "opcode": 2 if binary else 1,
                "data": base64.b64encode(data).decode() if isinstance(data, bytes) else data,
            }
        )

    def body(self) -> str:
        """What was said on the socket, as JSON lines in Playwright's HAR format."""
        return "".join(json.dumps(message) + "\n" for message in self.log)

    def said(self) -> list[Message]:
        """What was said on the socket, each message timed in wall-clock seconds."""
        return parse_messages(self.body().encode(), 0.0)

    def har_entry(self) -> dict[str, Any]:
        """The socket as Playwright's HAR would have it: its URL, a 101, and the messages of both
        directions as JSON lines (the body a recorded socket's row has)."""
        body = self.body()
        return {
            "startedDateTime": self.opened_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "time": 0.0,
            "_resourceType": "websocket",
            "request": {"method": "GET", "url": self.socket.url, "headers": []},
            "response": {
                "status": 101,
                "headers": [],
                "content": {"size": len(body), "mimeType": "x-unknown", "text": body},
            },
        }


def _stood(timeline: Timeline | None) -> float:
    """How long τ has stood still so far (0 without a timeline)."""
    return timeline.stood_still() if timeline is not None else 0.0
