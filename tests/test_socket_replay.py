"""Sockets played by the clock and the recorded pace (issue 30, items 1 and 2), without a browser:
the script of a recorded socket conversation in time, its message-by-message comparison, and
the pacing of a replayed episode's steps on a clock of the test's own.

The same rules on real applications (socket.io with long-polling and an upgrade, a plain
WebSocket dashboard, Gradio's status region) are in ``tests/test_realweb_apps.py``.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from mmina.actions import Action, ActionKind
from mmina.replayer.fidelity import compare_sockets
from mmina.replayer.pace import LOADING_MAX_S, MARGIN_S, PacedSteps, RecordedPace
from mmina.replayer.sockets import STALL_S, Message, SocketPlay, answer_in_kind, heartbeat_kind, normalised, parse_messages

OPENED_MS = 1_795_000_000_000.0


def _body(*messages: tuple[str, float, Any]) -> bytes:
    """JSON lines as Playwright's HAR keeps a socket: (direction, seconds after opening, data)."""
    return "".join(json.dumps({"type": kind, "time": OPENED_MS + at * 1e3, "opcode": 1, "data": data}) + "\n"
                   for kind, at, data in messages).encode()


def _play(*messages: tuple[str, float, Any]) -> SocketPlay:
    return SocketPlay(parse_messages(_body(*messages) + b"not json\n", OPENED_MS), opened=100.0)


def test_messages_are_timed_from_the_socket_opening_and_binary_data_is_decoded() -> None:
    body = _body(("receive", 0.5, "hello")) + json.dumps(
        {"type": "send", "time": OPENED_MS + 700, "opcode": 2, "data": "AAE="}).encode()
    assert parse_messages(body, OPENED_MS) == [Message("receive", "hello", 0.5), Message("send", b"\x00\x01", 0.7)]


def test_a_greeting_and_a_push_no_page_message_caused_go_at_their_time_since_the_socket_opened() -> None:
    play = _play(("receive", 0.0, "hello"), ("receive", 1.0, "gauge online"), ("send", 2.0, "q"))
    assert play.due(100.0) == ["hello"]
    assert play.due(100.9) == [] and play.next_time() == 101.0
    assert play.due(101.0) == ["gauge online"]


def test_a_reply_waits_for_the_page_message_it_followed_then_for_its_recorded_delay() -> None:
    play = _play(("send", 1.0, '42["event",{"id":10,"args":["Book"]}]'), ("receive", 2.25, '42["update","Berth 7"]'))
    assert play.due(105.0) == []  # the click has not happened yet
    assert play.heard('42["event",{"id":31,"args":["Book"]}]', 106.0) == []  # another id: the same message
    assert play.due(107.0) == [] and play.next_time() == 107.25
    assert play.due(107.25) == ['42["update","Berth 7"]'] and play.finished


def test_a_reply_keeps_its_delay_after_a_page_message_said_early() -> None:
    play = _play(("send", 2.9, '42["rerun",{"name":"Mira"}]'), ("receive", 3.2, '42["update","Berth for Mira"]'))
    play.heard('42["rerun",{"name":"Mira"}]', 101.0)  # 1.9 s earlier after opening than recorded (a slow load)
    assert play.next_time() == 101.3  # 0.3 s after it, as recorded: not at its time since opening


def test_a_message_whose_page_message_never_comes_does_not_stall_the_script() -> None:
    play = _play(("send", 1.0, "subscribe"), ("receive", 1.5, "welcome"), ("receive", 2.0, "tick"))
    assert play.next_time() == 100.0 + 1.5 + STALL_S
    assert play.due(100.0 + 1.5 + STALL_S) == ["welcome"]


def test_heartbeats_are_answered_in_kind_and_never_hold_the_script_up() -> None:
    assert [heartbeat_kind(m) for m in ("2", "3", "2probe", '{"type":"ping"}', '{"op":"PONG"}', "42[]", b"2")] == \
           ["ping", "pong", "ping", "ping", "pong", None, None]
    assert answer_in_kind("2") == "3" and answer_in_kind("2probe") == "3probe"
    assert answer_in_kind('{"type": "ping", "n": 3}') == '{"type": "pong", "n": 3}' and answer_in_kind("3") is None
    play = _play(("send", 1.0, "hello server"), ("receive", 1.1, "hi page"), ("send", 3.0, "2"),
                 ("receive", 3.01, "3"), ("receive", 4.0, "pushed"))
    play.heard("hello server", 101.0)
    assert play.heard("2", 101.05) == []  # the recorded ping: its pong comes from the script
    assert play.due(101.2) == ["hi page", "3"]
    assert play.heard("2", 101.3) == ["3"]  # a ping the recording has no counterpart for
    assert play.due(104.0) == ["pushed"]  # after "hello server" (3 s), not after a heartbeat


def test_a_server_ping_keeps_its_own_clock() -> None:
    play = _play(("send", 1.0, '42["hello"]'), ("receive", 4.0, "2"), ("send", 4.01, "3"))
    assert play.next_time() == 104.0  # engine.io's pingInterval, not 3 s after whatever the page said


def test_a_socket_io_ack_carries_the_id_the_page_used() -> None:
    play = _play(("send", 1.0, '421["handshake",{"tab":"a"}]'), ("receive", 1.1, '431[true]'))
    play.heard('427["handshake",{"tab":"a"}]', 101.0)
    assert play.due(102.0) == ['437[true]']


def test_page_messages_are_matched_by_content_with_volatile_parts_normalised() -> None:
    assert normalised('{"sid":"B_lVc7eVAPqjVzzRAAAA","n":12,"id":"3a9ea1c3-7a36-487e-bdd4-5a9d4c9b8cd0"}') == \
           '{"sid":"0","n":0,"id":"0"}'
    assert normalised("40") != normalised("5") and normalised('421["go"]') == normalised('427["go"]') != \
        normalised('431["go"]')
    play = _play(("send", 1.0, "open A"), ("receive", 1.5, "A opened"), ("send", 2.0, "open B"),
                 ("receive", 2.5, "B opened"))
    play.heard("open B", 100.5)  # said first now: it is still "open B"
    assert play.due(105.0) == []  # "A opened" comes first and waits for "open A"
    play.heard("open A", 105.5)
    assert play.due(106.0) == ["A opened", "B opened"]


def test_sockets_are_compared_message_by_message() -> None:
    recorded = [Message("send", "q 1", 0.1), Message("receive", "a", 0.2), Message("receive", "b", 0.3)]
    assert compare_sockets("ws://x/", recorded, [Message("send", "q 9", 5.0), Message("receive", "a", 5.1),
                                                 Message("receive", "b", 5.2)]).faithful
    late = compare_sockets("ws://x/", recorded, [Message("send", "q 1", 0), Message("receive", "b", 0)])
    assert (late.recorded, late.replayed, late.equal) == (3, 2, 1) and not late.faithful
    assert late.first_difference == "server → page message 1: recorded `a`, replayed `b`"


# ---------------------------------------------------------------- the recorded pace

START = datetime(2026, 11, 27, 12, tzinfo=timezone.utc)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Page:
    """A page whose tree reads "loading" until ``ready_at`` on the test's clock."""

    url = "http://app.test/"

    def __init__(self, clock: _Clock, ready_at: float, loading_until: float = 0.0) -> None:
        self.clock, self.ready_at, self.reads, self.loading_until = clock, ready_at, 0, loading_until

    @property
    def loading(self) -> bool:
        return self.clock.now < self.loading_until

    def tree(self) -> tuple[str, list[Any]]:
        self.reads += 1
        return ("status: Ready" if self.clock.now >= self.ready_at else "status: Loading"), []


def _request(at: float, **row: Any) -> dict[str, Any]:
    return {"started_at": START + timedelta(seconds=at), "status": 200, "url": "http://app.test/poll",
            "mime_type": "application/json", "response_headers": [], **row}


POLLING = [_request(2.0), _request(5.0)]
"""The recorded page asked for something while the agent thought, at each step."""


def _pace(clock: _Clock, requests: list[dict[str, Any]] = POLLING) -> PacedSteps:
    rows = [{"started_at": START + timedelta(seconds=1), "acted_at": START + timedelta(seconds=3),
             "url": "http://app.test/", "tree_text": "status: Ready"},
            {"started_at": START + timedelta(seconds=4), "acted_at": START + timedelta(seconds=6),
             "url": "http://app.test/", "tree_text": "status: Ready"}]
    pace = RecordedPace.of(START, rows, requests)
    assert pace is not None
    paced = PacedSteps(pace, clock, clock.sleep)
    paced.begin()
    return paced


def test_an_action_waits_for_its_recorded_moment_and_stop_does_not() -> None:
    clock = _Clock()
    paced = _pace(clock)
    clock.now = 1.2
    paced.before_action(0, Action(ActionKind.CLICK, element_id="1"))
    assert clock.now == 3.0  # the agent's thinking, given to the page
    clock.now = 6.5  # a replay running late never waits to catch up
    paced.before_action(1, Action(ActionKind.CLICK, element_id="1"))
    assert clock.now == 6.5
    clock.now = 4.0
    paced.before_action(1, Action(ActionKind.STOP, text="done"))
    assert clock.now == 4.0


def test_a_thinking_time_the_recorded_page_spent_idle_is_not_waited_for() -> None:
    clock = _Clock()
    _pace(clock, requests=[_request(0.5)]).before_action(0, Action(ActionKind.CLICK, element_id="1"))
    assert clock.now == 0.0  # nothing asked, nothing can arrive unasked: act at once
    for unasked in (_request(0.2, status=101, url="ws://app.test/socket"), _request(0.2, mime_type="text/event-stream")):
        clock = _Clock()
        _pace(clock, requests=[unasked]).before_action(0, Action(ActionKind.CLICK, element_id="1"))
        assert clock.now == 3.0  # a socket or a stream may push anything meanwhile


def test_an_observation_waits_until_the_page_shows_the_recorded_state_never_past_its_moment_plus_margin() -> None:
    clock = _Clock()
    paced = _pace(clock)
    page = _Page(clock, ready_at=0.5)
    paced.before_observe(page, 0)
    assert 0.5 <= clock.now < 0.5 + 0.2  # observed as soon as it showed "Ready", before its recorded second
    never = _Page(clock, ready_at=99.0)
    clock.now = 3.1
    paced.before_observe(never, 1)
    assert abs(clock.now - (4.0 + MARGIN_S)) < 1e-9 and never.reads > 5
    assert paced.before_observe(page, 7) is None  # past the recording: nothing to wait for


def test_an_observation_waits_longer_while_the_page_is_still_loading_but_not_for_ever() -> None:
    clock = _Clock()
    paced = _pace(clock)
    paced.before_observe(_Page(clock, ready_at=2.0, loading_until=2.5), 0)
    assert 2.0 <= clock.now < 2.2  # past 1 s + margin, still loading its scripts: it got there
    clock.now = 3.1
    paced.before_observe(_Page(clock, ready_at=99.0, loading_until=99.0), 1)
    assert abs(clock.now - (4.0 + MARGIN_S + LOADING_MAX_S)) < 0.11


def test_with_a_socket_the_timeline_is_kept_from_the_moment_it_opens() -> None:
    clock = _Clock()
    paced = _pace(clock, requests=[_request(0.8, status=101, url="ws://app.test/socket")])
    clock.now = 1.5  # the replayed page opened its socket 0.7 s later than the recorded one
    paced.socket_opened()
    clock.now = 2.0
    paced.socket_opened()  # only the first socket counts
    paced.before_action(0, Action(ActionKind.CLICK, element_id="1"))
    assert abs(clock.now - 3.7) < 1e-9  # the server's timers count from the socket: so does the pace


def test_a_store_without_action_times_keeps_no_pace() -> None:
    assert RecordedPace.of(START, [{"started_at": START, "acted_at": None, "url": "", "tree_text": ""}]) is None
    assert RecordedPace.of(START, []) is None
