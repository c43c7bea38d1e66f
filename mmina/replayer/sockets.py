"""Sockets played by the clock: a recorded WebSocket conversation as a script in time.

Pure: no browser. ``router.py`` feeds it what the page sends and sends what falls due.

Playwright's HAR keeps a socket's messages as JSON lines (``{"type": "send"|"receive", "time":
wall-clock ms, "opcode": 1|2, "data": ...}``, binary data in base64), and the socket's row its
opening time. A server message is sent to the page again when its cause has happened and its
recorded delay after that cause has passed:

* its cause is the **page message it followed** (the last one the page sent before it in the
  recording), and it is sent its recorded delay after the page sends the matching message
  again (a result 1.25 s after a click's message comes 1.25 s after the replayed click's, and
  a timer's push that followed it keeps its place after it: the observations of a paced replay
  are timed from the actions too);
* a server message before any page message (a greeting, a timer's push, a push 1 s after
  connecting), and a server's ping, is sent at its recorded time since the socket opened;
* a server message whose page message never comes is sent ``STALL_S`` after its recorded time
  since the socket opened, so a page that says less than it did never stalls the script — counted
  on the page's time (:attr:`SocketPlay.behind`): a paced replay whose page time stood still
  (the archive or the page slower than live) has a page that is late to say it, not one that says
  less, and its reply must not reach the page before the page asked;
* heartbeats (engine.io ``2``/``3``, ``2probe``/``3probe``, ``ping``/``pong``, JSON messages whose
  ``type``/``event``/``op``/``msg`` says ping, pong, heartbeat or keepalive, socket.io events so
  named) and acknowledgements of what the page received (such messages or events named
  ``ack``: the page sends them on its own timer, batched as it likes, answered by nothing) never
  cause a server message, except the answer to one (a pong after its ping): a page that pings at
  another moment, or more often, than it did does not hold the script up; a heartbeat the
  recording has no counterpart for is **answered in kind** at once (``2`` → ``3``, ``ping`` →
  ``pong``);
* a server message is never sent before an earlier one (the recorded order holds);
* nor before the replay took the observations the recording took before it (its
  *slot*, ``mmina.replayer.turns``): a push the recording received just after an observation
  is held until the replay has taken that observation.

A page message is matched to the recorded one it repeats **by content**, with volatile parts
normalised (:func:`normalised`: numbers, UUIDs and long random tokens — ids, sids, counters,
timestamps — and values the recording redacted, which the replayed page sends in clear); the
first recorded page message not matched yet with the same normalised content is taken (a
heartbeat is matched among heartbeats only). A message said on the socket that matches none is
taken as the first recorded one not matched yet (in order, as before content matching), unless
it is a heartbeat; one the page posted over long-polling (its session's other transport, which
carries its handshake too) is taken by content only: a socket.io connect posted while the
WebSocket probes must not stand for the upgrade's ``5`` (the server's reply to it would reach
the page mid-probe, and engine.io drops a probing WebSocket on any other packet). A socket.io
acknowledgement (``43<id>``) is sent with the id the page used in the message it acknowledges.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from mmina.redaction.secret_rules import REDACTED

PAGE, SERVER = "send", "receive"
"""The HAR's names for what the page sent and what it received."""
Data = str | bytes

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_VOLATILE = re.compile(re.escape(REDACTED) + "|" + _UUID + r"|[A-Za-z0-9_\-]{16,}|\d+")
"""Volatile parts of a message: a value redaction replaced (a page's session id, which the
replayed page sends in clear), a UUID, a long token, a number."""
_VOLATILE_BYTES = re.compile(_VOLATILE.pattern.encode())
"""The same in a binary message (the JSON a binary frame carries: Jupyter's kernel messages)."""
HEARTBEAT_WORDS = frozenset(
    {"ping", "pong", "heartbeat", "keepalive", "keep-alive", "2", "3", "2probe", "3probe"}
)
ANSWER_WORDS = frozenset({"3", "3probe", "pong", "ack"})
"""Heartbeat-like messages that answer something (never answered in kind)."""
_SOCKET_IO_EVENT = re.compile(r"^4[25](/[^,\[{]*,)?\d*(\[.*)$", re.DOTALL)
"""A socket.io event (``42``, a binary one ``45``): its namespace, ack id, then its JSON array."""
ANSWERS = {"2": "3", "2probe": "3probe", "ping": "pong"}
"""A page heartbeat's answer in kind (JSON heartbeats: the same message with ``pong``)."""
_KIND_KEYS = ("type", "event", "op", "msg", "method", "action")
STALL_S = 5.0
"""A server message whose page message never comes is sent this long after its recorded time
since the socket opened (a page that says less than it did must not stall the script)."""
_SOCKET_IO_ACK = re.compile(r"^4([23])(/[^,\[{]*,)?(\d+)")


@dataclass(frozen=True)
class Message:
    """One recorded message: who sent it, what, and when (seconds after the socket opened)."""

    direction: str
    data: Data
    at: float


def parse_messages(body: bytes, opened_ms: float | None = None) -> list[Message]:
    """A recorded socket's JSON lines as messages, timed from ``opened_ms`` (wall-clock ms; by
    default the first message's time). Lines that are not messages are skipped."""
    parsed: list[tuple[str, Data, float | None]] = []
    for line in body.decode("utf-8", "replace").splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("type") not in (PAGE, SERVER):
            continue
        data = str(message.get("data", ""))
        time = message.get("time")
        parsed.append(
            (
                message["type"],
                base64.b64decode(data) if message.get("opcode") == 2 else data,
                float(time) if isinstance(time, (int, float)) and time >= 0 else None,
            )
        )
    times = [t for _, _, t in parsed if t is not None]
    start = opened_ms if opened_ms is not None else (min(times) if times else 0.0)
    return [
        Message(kind, data, max(0.0, (t - start) / 1e3) if t is not None else 0.0) for kind, data, t in parsed
    ]


def session_script(socket: Sequence[Message], polled: Sequence[Message], opened_s: float) -> list[Message]:
    """One session's conversation (wall-clock times) as its socket's script: the socket's
    messages and the page messages it posted over long-polling meanwhile (an engine.io page
    upgrades when it does: a message it posted then may go over the socket in the replay, and a
    server message that followed it still waits for it), in time order, timed from ``opened_s``."""
    return [replace(m, at=max(0.0, m.at - opened_s)) for m in sorted([*socket, *polled], key=lambda m: m.at)]


def normalised(data: Data) -> Data:
    """A message with its volatile parts (numbers, UUIDs, long tokens) replaced, for matching;
    its leading digits (at most two) kept: they are engine.io's and socket.io's packet types
    (``40`` is not ``5``, ``42[...]`` is not ``43[...]``; ``421[...]`` is ``427[...]``)."""
    if isinstance(data, bytes):
        return _VOLATILE_BYTES.sub(b"0", data)
    kept = _packet_type_length(data)
    return data[:kept] + _VOLATILE.sub("0", data[kept:])


def _packet_type_length(text: str) -> int:
    """How many leading digits (at most two) are a packet type rather than a value."""
    digits = len(text) - len(text.lstrip("0123456789"))
    return min(digits, 2)


def heartbeat_kind(data: Data) -> str | None:
    """``ping``-like, ``pong``-like or None: what kind of heartbeat a message is (see the module)."""
    if isinstance(data, bytes):
        return None
    text = data.strip()
    word: str | None = text.lower() if text.lower() in HEARTBEAT_WORDS else _json_kind(text)
    if word is None:
        return None
    return "pong" if word in ANSWER_WORDS else "ping"


def _json_kind(text: str) -> str | None:
    """The heartbeat word a JSON message or a socket.io event names (None: none)."""
    event = _SOCKET_IO_EVENT.match(text)
    if not text.startswith("{") and event is None:
        return None
    try:
        value = json.loads(event.group(2) if event else text)
    except ValueError:
        return None
    if isinstance(value, list) and value and isinstance(value[0], str):
        kinds = [value[0].lower()]
    elif isinstance(value, dict) and event is None:
        kinds = [str(value[k]).lower() for k in _KIND_KEYS if k in value]
    else:
        return None
    return next(
        (k for k in kinds if k in (HEARTBEAT_WORDS | ANSWER_WORDS) - {"2", "3", "2probe", "3probe"}), None
    )


def answer_in_kind(data: Data) -> Data | None:
    """The answer to a page's ping that the recording has no counterpart for (None for others)."""
    if heartbeat_kind(data) != "ping" or isinstance(data, bytes):
        return None
    text = data.strip()
    if text.lower() in ANSWERS:
        return ANSWERS[text.lower()]
    return re.sub(r'"(ping|heartbeat)"', '"pong"', text, count=1, flags=re.IGNORECASE)


def _ack_id(data: Data) -> tuple[str, str] | None:
    """(kind digit, id) of a socket.io event with an ack id (``42<id>``) or an ack (``43<id>``)."""
    if isinstance(data, bytes):
        return None
    found = _SOCKET_IO_ACK.match(data)
    return (found.group(1), found.group(3)) if found else None


@dataclass
class SocketPlay:
    """One socket's recorded conversation, played in time (see the module).

    Times are the caller's clock in seconds (``opened``: when the page opened the socket again).
    ``slots`` gives each message's slot (see the module; none: every message's is 0).
    """

    messages: list[Message]
    opened: float
    slots: list[int] = field(default_factory=list)
    _matched: dict[int, float] = field(default_factory=dict)
    """Recorded page message index → when the page sent it again."""
    _said: dict[int, Data] = field(default_factory=dict)
    """Recorded page message index → what the page said instead (for ack ids)."""
    _next_server: int = 0
    behind: float = 0.0
    """How far the page's time has fallen behind this clock since the socket opened (a paced
    replay's τ stood still that long: ``Timeline.stalled_s``); the caller keeps it current. A page
    message not said yet is given up on ``STALL_S`` after its server message's recorded time *of
    the page's time*, so this much later on this clock."""
    sent_at: float | None = None
    """The recorded time (as ``messages`` are timed) of the last server message sent."""
    last_heard: int | None = None
    """The recorded page message the page's last one was matched to (None: none)."""

    def __post_init__(self) -> None:
        self._causes = [self._cause(i) for i in range(len(self.messages))]
        self.slots = self.slots or [0] * len(self.messages)

    def _cause(self, index: int) -> int | None:
        """The page message a server message waits for (None: the socket's opening)."""
        message = self.messages[index]
        kind = heartbeat_kind(message.data)
        if message.direction != SERVER or kind == "ping":
            return None  # a server's ping keeps its own clock (engine.io's pingInterval)
        answer = kind == "pong"
        for before in range(index - 1, -1, -1):
            earlier = self.messages[before]
            if earlier.direction == PAGE and (answer or heartbeat_kind(earlier.data) is None):
                return before
        return None

    def heard(self, data: Data, now: float, by_order: bool = True) -> list[Data]:
        """The page sent ``data`` now: match it (see the module; without ``by_order``, by content
        only); what to answer at once."""
        index = self._find(data, by_order)
        self.last_heard = index
        if index is None:
            answer = answer_in_kind(data)
            return [answer] if answer is not None else []
        self._matched[index] = now
        self._said[index] = data
        return []

    def _find(self, data: Data, by_order: bool = True) -> int | None:
        """The recorded page message this one repeats (see the module), or None."""
        beat = heartbeat_kind(data) is not None
        pages = [
            i
            for i, m in enumerate(self.messages)
            if m.direction == PAGE and i not in self._matched and (heartbeat_kind(m.data) is not None) == beat
        ]
        wanted = normalised(data)
        same = next((i for i in pages if normalised(self.messages[i].data) == wanted), None)
        if same is not None or beat or not by_order:
            return same
        return pages[0] if pages else None

    def due(self, now: float, taken: int = 0) -> list[Data]:
        """The server messages due by ``now``, in recorded order, none of a slot past ``taken``
        (the observations the replay took)."""
        sent: list[Data] = []
        while (
            (at := self._time_of_next()) is not None and at <= now and self.slots[self._next_server] <= taken
        ):
            sent.append(self._with_ack_id(self._next_server))
            self.sent_at = self.messages[self._next_server].at
            self._next_server = self._following_server(self._next_server + 1)
        return sent

    def next_time(self) -> float | None:
        """When the next server message falls due (None: none is left)."""
        return self._time_of_next()

    def next_at(self) -> float | None:
        """The recorded time (as ``messages`` are timed) of the next server message (None: none is left)."""
        index = self._following_server(self._next_server)
        return self.messages[index].at if index < len(self.messages) else None

    def waits_for_page(self) -> bool:
        """The next server message waits for a page message the page has not said yet (what it
        is due by is then only when the page is given up on: the page's own work may come first)."""
        index = self._following_server(self._next_server)
        if index >= len(self.messages):
            return False
        cause = self._causes[index]
        return cause is not None and cause not in self._matched

    def next_slot(self) -> int:
        """The slot of the next server message (that of the last message when none is left)."""
        index = self._following_server(self._next_server)
        return self.slots[min(index, len(self.slots) - 1)] if self.slots else 0

    @property
    def finished(self) -> bool:
        """Every recorded server message was sent."""
        return self._following_server(self._next_server) >= len(self.messages)

    def _time_of_next(self) -> float | None:
        index = self._following_server(self._next_server)
        self._next_server = index
        if index >= len(self.messages):
            return None
        cause, since_open = self._causes[index], self.opened + self.messages[index].at
        if cause is None:
            return since_open
        if cause not in self._matched:
            return since_open + STALL_S + max(0.0, self.behind)
        return self._matched[cause] + self.messages[index].at - self.messages[cause].at

    def _following_server(self, index: int) -> int:
        while index < len(self.messages) and self.messages[index].direction != SERVER:
            index += 1
        return index

    def _with_ack_id(self, index: int) -> Data:
        """The recorded server message, an ack carrying the id the page used (see the module)."""
        data, cause = self.messages[index].data, self._causes[index]
        recorded, ack = _ack_id(data), None
        if cause is not None and cause in self._said and recorded and recorded[0] == "3":
            asked, said = _ack_id(self.messages[cause].data), _ack_id(self._said[cause])
            ack = said[1] if asked and said and asked[1] == recorded[1] else None
        if ack is None or not isinstance(data, str):
            return data
        found = _SOCKET_IO_ACK.match(data)
        assert found is not None
        return data[: found.start(3)] + ack + data[found.end(3) :]
