"""Sockets played by the clock and the recorded pace (issue 30, items 1 and 2), without a browser:
the script of a recorded socket conversation in time, its message-by-message comparison, the
pacing of a replayed episode's steps on a clock of the test's own, and the recorded order of
deliveries and observations (``mmina.replayer.turns``).

The same rules on real applications (socket.io with long-polling and an upgrade, a plain
WebSocket dashboard, Gradio's status region) are in ``tests/test_realweb_apps.py``. At the end, one
rule with a browser (issue 56): a reply waits for its page message on the page's time, recorded
from a WebSocket server of the test's own and replayed with the archive late.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from mmina.actions.grammar import Action, ActionKind
from mmina.fixtures.hardweb.server import websocket_accept, websocket_receive, websocket_send
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.replayer.archive import Archive, Exchange
from mmina.replayer.fidelity import compare_sockets
from mmina.replayer.pace import FROZEN_RENDER_S, LOADING_MAX_S, MARGIN_S, RENDER_S, PacedSteps, RecordedPace
from mmina.replayer.replays import replay_run
from mmina.replayer.router import ArchiveRouter, said_before
from mmina.replayer.sockets import (
    STALL_S,
    Message,
    SocketPlay,
    answer_in_kind,
    heartbeat_kind,
    normalised,
    parse_messages,
    session_script,
)
from mmina.replayer.timeline import Timeline
from mmina.replayer.turns import OVERDUE_S, Turns
from mmina.store import Store
from tests.local_site import LocalSite, scripted_suite, serve_late, tree_lines

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)

OPENED_MS = 1_795_000_000_000.0
LOOP_LATE_S = 0.5
"""How late a real event loop may run a timer on a loaded machine (the test below waits on a real
one; what it tells apart is an opening at once from one 1.3 s later)."""


def _body(*messages: tuple[str, float, Any]) -> bytes:
    """JSON lines as Playwright's HAR keeps a socket: (direction, seconds after opening, data)."""
    return "".join(
        json.dumps({"type": kind, "time": OPENED_MS + at * 1e3, "opcode": 1, "data": data}) + "\n"
        for kind, at, data in messages
    ).encode()


def _play(*messages: tuple[str, float, Any]) -> SocketPlay:
    return SocketPlay(parse_messages(_body(*messages) + b"not json\n", OPENED_MS), opened=100.0)


def test_messages_are_timed_from_the_socket_opening_and_binary_data_is_decoded() -> None:
    body = (
        _body(("receive", 0.5, "hello"))
        + json.dumps({"type": "send", "time": OPENED_MS + 700, "opcode": 2, "data": "AAE="}).encode()
    )
    assert parse_messages(body, OPENED_MS) == [
        Message("receive", "hello", 0.5),
        Message("send", b"\x00\x01", 0.7),
    ]


def test_a_greeting_and_a_push_no_page_message_caused_go_at_their_time_since_the_socket_opened() -> None:
    play = _play(("receive", 0.0, "hello"), ("receive", 1.0, "gauge online"), ("send", 2.0, "q"))
    assert play.due(100.0) == ["hello"]
    assert play.due(100.9) == [] and play.next_time() == 101.0
    assert play.due(101.0) == ["gauge online"]


def test_a_reply_waits_for_the_page_message_it_followed_then_for_its_recorded_delay() -> None:
    play = _play(
        ("send", 1.0, '42["event",{"id":10,"args":["Book"]}]'), ("receive", 2.25, '42["update","Berth 7"]')
    )
    assert play.due(105.0) == []  # the click has not happened yet
    assert play.heard('42["event",{"id":31,"args":["Book"]}]', 106.0) == []  # another id: the same message
    assert play.due(107.0) == [] and play.next_time() == 107.25
    assert play.due(107.25) == ['42["update","Berth 7"]'] and play.finished


def test_a_reply_keeps_its_delay_after_a_page_message_said_early() -> None:
    play = _play(
        ("send", 2.9, '42["rerun",{"name":"Mira"}]'), ("receive", 3.2, '42["update","Berth for Mira"]')
    )
    play.heard(
        '42["rerun",{"name":"Mira"}]', 101.0
    )  # 1.9 s earlier after opening than recorded (a slow load)
    assert play.next_time() == 101.3  # 0.3 s after it, as recorded: not at its time since opening


def test_a_message_whose_page_message_never_comes_does_not_stall_the_script() -> None:
    play = _play(("send", 1.0, "subscribe"), ("receive", 1.5, "welcome"), ("receive", 2.0, "tick"))
    assert play.next_time() == 100.0 + 1.5 + STALL_S
    assert play.due(100.0 + 1.5 + STALL_S) == ["welcome"]


def test_a_page_message_is_given_up_on_after_stall_s_of_the_page_s_time_not_of_the_socket_s() -> None:
    """A paced replay whose page time stood still 3 s since the socket opened (the archive late) has
    a page 3 s late to say what it said, not one that says less: its reply waits 3 s more."""
    play = _play(("send", 1.0, "book"), ("receive", 1.01, "Berth 7 booked"))
    assert play.waits_for_page()
    play.behind = 3.0
    assert play.next_time() == 100.0 + 1.01 + STALL_S + 3.0
    assert play.due(100.0 + 1.01 + STALL_S + 1.0) == []  # the old rule's moment: still waiting
    play.heard("book", 105.5)  # said 4.5 s after its recorded time since opening
    assert not play.waits_for_page() and play.next_time() == 105.5 + 0.01
    assert play.due(105.51) == ["Berth 7 booked"]


def test_heartbeats_are_answered_in_kind_and_never_hold_the_script_up() -> None:
    assert [
        heartbeat_kind(m) for m in ("2", "3", "2probe", '{"type":"ping"}', '{"op":"PONG"}', "42[]", b"2")
    ] == ["ping", "pong", "ping", "ping", "pong", None, None]
    acks = (
        '42["ack",{"next_message_id":3}]',
        '{"type": "ack", "id": 4}',
        '42/ns,7["heartbeat"]',
        '42["event",{}]',
    )
    assert [heartbeat_kind(m) for m in acks] == ["pong", "pong", "ping", None]  # acks: what the page received
    assert (
        answer_in_kind(acks[0]) is None
        and answer_in_kind("2") == "3"
        and answer_in_kind("2probe") == "3probe"
    )
    assert (
        answer_in_kind('{"type": "ping", "n": 3}') == '{"type": "pong", "n": 3}'
        and answer_in_kind("3") is None
    )
    play = _play(
        ("send", 1.0, "hello server"),
        ("receive", 1.1, "hi page"),
        ("send", 3.0, "2"),
        ("receive", 3.01, "3"),
        ("receive", 4.0, "pushed"),
    )
    play.heard("hello server", 101.0)
    assert play.heard("2", 101.05) == []  # the recorded ping: its pong comes from the script
    assert play.due(101.2) == ["hi page", "3"]
    assert play.heard("2", 101.3) == ["3"]  # a ping the recording has no counterpart for
    assert play.due(104.0) == ["pushed"]  # after "hello server" (3 s), not after a heartbeat
    acked = _play(
        ("send", 1.0, '42["click"]'),
        ("send", 1.5, '42["ack",{"next_message_id":1}]'),
        ("receive", 2.0, '42["result"]'),
    )
    acked.heard('42["click"]', 101.0)
    assert acked.due(102.0) == ['42["result"]']  # 1 s after the click; the page's ack never came


def test_a_server_ping_keeps_its_own_clock() -> None:
    play = _play(("send", 1.0, '42["hello"]'), ("receive", 4.0, "2"), ("send", 4.01, "3"))
    assert play.next_time() == 104.0  # engine.io's pingInterval, not 3 s after whatever the page said


def test_a_socket_io_ack_carries_the_id_the_page_used() -> None:
    play = _play(("send", 1.0, '421["handshake",{"tab":"a"}]'), ("receive", 1.1, "431[true]"))
    play.heard('427["handshake",{"tab":"a"}]', 101.0)
    assert play.due(102.0) == ["437[true]"]


def test_page_messages_are_matched_by_content_with_volatile_parts_normalised() -> None:
    assert (
        normalised('{"sid":"B_lVc7eVAPqjVzzRAAAA","n":12,"id":"3a9ea1c3-7a36-487e-bdd4-5a9d4c9b8cd0"}')
        == '{"sid":"0","n":0,"id":"0"}'
    )
    assert normalised("40") != normalised("5") and normalised('421["go"]') == normalised(
        '427["go"]'
    ) != normalised('431["go"]')
    play = _play(
        ("send", 1.0, "open A"),
        ("receive", 1.5, "A opened"),
        ("send", 2.0, "open B"),
        ("receive", 2.5, "B opened"),
    )
    play.heard("open B", 100.5)  # said first now: it is still "open B"
    assert play.due(105.0) == []  # "A opened" comes first and waits for "open A"
    play.heard("open A", 105.5)
    assert play.due(106.0) == ["A opened", "B opened"]


def test_sockets_are_compared_message_by_message() -> None:
    recorded = [Message("send", "q 1", 0.1), Message("receive", "a", 0.2), Message("receive", "b", 0.3)]
    assert compare_sockets(
        "ws://x/",
        recorded,
        [Message("send", "q 9", 5.0), Message("receive", "a", 5.1), Message("receive", "b", 5.2)],
    ).faithful
    late = compare_sockets("ws://x/", recorded, [Message("send", "q 1", 0), Message("receive", "b", 0)])
    assert (late.recorded, late.replayed, late.equal) == (3, 2, 1) and not late.faithful
    assert late.first_difference == "server → page message 1: recorded `a`, replayed `b`"
    ended = [Message("send", "q 1", 5.0), Message("receive", "a", 5.1)]  # the replay ended before "b"
    assert compare_sockets("ws://x/", said_before(recorded, 0.25), said_before(ended, 5.2)).faithful
    assert not compare_sockets("ws://x/", said_before(recorded, 0.35), said_before(ended, 5.2)).faithful
    upgraded = [Message("send", "5", 0.05), Message("send", '42["e",1]', 0.06), Message("receive", "a", 0.2)]
    polled_first = [
        Message("send", '42["e",2]', 0.04),
        Message("send", "5", 0.05),
        Message("receive", "a", 0.2),
    ]
    assert compare_sockets("ws://x/", upgraded, polled_first).faithful  # the page's messages by content
    assert (
        compare_sockets("ws://x/", upgraded, polled_first[1:]).first_difference
        == 'page → server message 2: recorded `42["e",0]`, not said in the replay'
    )
    assert (
        compare_sockets("ws://x/", upgraded[1:], polled_first).first_difference
        == "page → server: replayed `5` (message 2), not said when recorded"
    )
    acked = [
        *recorded,
        Message("send", "ack b", 0.31),
    ]  # said during the last tree read: it changed nothing seen
    assert compare_sockets("ws://x/", said_before(recorded, 0.35), said_before(acked, 0.35)).faithful


def test_heartbeats_are_left_out_of_the_socket_comparison() -> None:
    """A ping's place among the page's messages follows the transport's clock, not the page."""
    recorded = [
        Message("receive", "2", 0.1),
        Message("send", "3", 0.2),
        Message("send", '42["click"]', 0.3),
        Message("receive", '42["result"]', 1.3),
    ]
    replayed = [
        Message("send", '42["click"]', 0.3),
        Message("receive", '42["result"]', 1.3),
        Message("receive", "2", 5.0),
        Message("send", "3", 5.1),
        Message("send", '{"type": "ping"}', 6.0),
    ]
    compared = compare_sockets("ws://x/", recorded, replayed)
    assert compared.faithful and (compared.recorded, compared.replayed) == (2, 2)
    assert not compare_sockets("ws://x/", recorded, replayed[:1]).faithful


def test_a_reply_waits_for_a_page_message_the_recording_posted_over_long_polling() -> None:
    """engine.io upgrades when the page does: a message posted over a poll when recorded may go
    over the socket when replayed (or the other way round); the reply that followed it waits for it."""
    socket = [
        Message("send", "2probe", 10.0),
        Message("receive", "3probe", 10.01),
        Message("receive", '42["components"]', 10.2),
    ]
    polled = [Message("send", '42["event",{"id":12}]', 10.15)]
    play = SocketPlay(session_script(socket, polled, opened_s=10.0), opened=100.0)
    play.heard("2probe", 100.0)
    assert play.due(100.5) == ["3probe"]  # the reply to the polled message waits for it
    play.heard('42["event",{"id":12}]', 101.0)  # said on the socket this time
    assert play.next_time() == 101.05 and play.due(101.05) == ['42["components"]']


def test_a_page_message_posted_over_long_polling_is_matched_by_content_only() -> None:
    """A socket.io connect the page posts while its WebSocket probes (after the socket opened, as
    the router may see it) must not stand for the upgrade's ``5``: the reply to ``5`` would reach
    the probing socket, and engine.io closes a probing WebSocket on any packet but ``3probe``."""
    play = _play(
        ("send", 0.01, "2probe"),
        ("receive", 0.02, "3probe"),
        ("send", 0.06, "5"),
        ("receive", 0.064, '40{"sid":"abc"}'),
    )
    play.heard("2probe", 100.0)
    play.heard('40{"token":"x"}', 100.01, by_order=False)  # posted over the session's poll
    assert play.due(100.1) == ["3probe"]
    play.heard("5", 100.5)
    assert play.due(100.51) == ['40{"sid":"abc"}']


# ---------------------------------------------------------------- the order of deliveries and observations


def test_a_recorded_session_holds_what_its_page_posted_over_long_polling() -> None:
    polling = "http://h/socket.io/?EIO=4&transport=polling&sid=abc"
    exchanges = [
        Exchange(0, "POST", polling, 200, request_body=b'42["before"]', started_ms=OPENED_MS - 500),
        Exchange(
            1,
            "GET",
            polling.replace("polling", "websocket").replace("http", "ws"),
            101,
            body=_body(("receive", 1.0, '42["tick"]')),
            started_ms=OPENED_MS,
        ),
        Exchange(2, "POST", polling, 200, request_body=b'42["click"]\x1e3', started_ms=OPENED_MS + 500),
    ]
    [compared] = ArchiveRouter(Archive(exchanges), datetime.now(UTC)).socket_fidelity()
    assert (compared.recorded, compared.replayed) == (
        3,
        0,
    )  # before and after the upgrade; the pong is a heartbeat
    assert (
        compared.first_difference
        == 'page → server message 1: recorded `42["before"]`, not said in the replay'
    )


def test_a_socket_opened_early_on_the_timeline_opens_at_its_first_recorded_message(monkeypatch) -> None:
    """The recording's page had its kernel socket only after an observation (jupyter_server held
    the handshake until the kernel was ready); a replayed page that asks sooner stays connecting
    until τ reaches the first recorded message — past an observation held in between, which must
    be taken first — and one that asks later, or a socket without messages, opens at once."""
    start = datetime.fromtimestamp(OPENED_MS / 1e3 - 1.0, UTC)  # the socket: 1 s into the episode
    socket = Exchange(
        0,
        "GET",
        "ws://nb.test/api/kernels/k/channels",
        101,
        started_ms=OPENED_MS - 800,
        body=_body(("send", 0.3, '{"msg_type": "kernel_info_request"}')),
    )

    async def opening(timeline: Timeline, exchange: Exchange, observed_after: float | None = None) -> float:
        router = ArchiveRouter(Archive([exchange]), start, timeline=timeline)
        loop = asyncio.get_running_loop()
        if observed_after is not None:
            loop.call_later(observed_after, timeline.lift, ("observe", 0))
        began = loop.time()
        router._match("GET", exchange.url, None, "")  # as the socket's route does: the page asked for it
        await router._open_on_timeline(exchange)
        return loop.time() - began

    timeline = Timeline()
    timeline.begin()
    assert 1.2 <= asyncio.run(opening(timeline, socket)) < 1.3 + LOOP_LATE_S  # τ 0 → 1.3: its first message
    late = Timeline()
    late.begin()
    late.advance_to(2.0)
    assert asyncio.run(opening(late, socket)) < LOOP_LATE_S
    assert asyncio.run(opening(Timeline(), replace(socket, body=b""))) < LOOP_LATE_S
    held = Timeline()
    held.begin()
    held.hold(("observe", 0), 0.5)  # an observation recorded before the socket opened
    # τ stood at 0.5 until it was taken (1 s), then went on to 1.3
    assert 1.5 <= asyncio.run(opening(held, socket, observed_after=1.0)) < 1.8 + LOOP_LATE_S
    monkeypatch.setattr("mmina.replayer.router.OPEN_ALIGN_MAX_S", 0.2)
    bounded = Timeline()
    bounded.begin()
    assert asyncio.run(opening(bounded, socket)) < 0.2 + LOOP_LATE_S


def test_a_delivery_has_the_slot_of_the_observations_recorded_before_it() -> None:
    turns = Turns([10.0, 12.0, 14.0])
    assert [turns.slot(t) for t in (9.0, 10.5, 11.99, 12.01, 20.0)] == [0, 1, 1, 2, 3]


def test_an_answer_asked_earlier_than_recorded_spans_no_more_observations_than_it_did() -> None:
    turns = Turns([10.0, 12.0, 14.0])
    assert turns.answer_slot(None, 12.5) == 2  # no recorded start: its recorded slot
    assert turns.answer_slot(12.4, 12.5) == 0  # asked and answered in turn 2, asked now in turn 0: at once
    assert turns.answer_slot(11.0, 12.5) == 1  # it spanned one observation: one after now
    turns.observed(0)
    assert turns.answer_slot(11.0, 12.5) == 2  # asked in its recorded turn: its recorded slot
    turns.observed(2)
    assert turns.answer_slot(11.0, 12.5) == 2  # asked late: never later than recorded


def test_a_delivery_is_held_until_the_replay_took_the_observations_recorded_before_it() -> None:
    turns = Turns([10.0, 12.0])
    released: list[float] = []

    async def deliver() -> None:
        loop = asyncio.get_running_loop()
        await turns.turn(0)  # before the first observation: at once
        released.append(loop.time())
        loop.call_later(0.2, turns.observed, 0)  # the replay takes observation 0 (from any thread)
        await turns.turn(1)
        released.append(loop.time())

    asyncio.run(deliver())
    assert released[1] - released[0] >= 0.19 and turns.taken == 1 and turns.may_deliver(1)


def test_a_socket_message_is_not_sent_before_its_turn() -> None:
    play = SocketPlay(
        parse_messages(_body(("receive", 1.0, "Reading 1"), ("receive", 2.0, "Reading 2")), OPENED_MS),
        opened=100.0,
        slots=[0, 1],
    )
    assert play.due(103.0, taken=0) == ["Reading 1"]  # "Reading 2" came after observation 0 when recorded
    assert play.next_slot() == 1 and play.next_time() == 102.0
    assert play.due(103.0, taken=1) == ["Reading 2"]


def test_an_observation_waits_for_what_the_recording_received_before_it_and_for_the_page_to_show_it() -> None:
    clock = _Clock()
    paced = _pace(clock)
    turns = paced.turns
    turns.expect("push", 0, due=1.3)  # on its way: received before observation 0 (its slot is 0)
    turns.expect("later", 1, due=1.2)  # received after it: not waited for
    turns.expect("abandoned", 0, due=1.0 - OVERDUE_S - 0.5)  # long overdue: not coming
    clock.events.append((1.3, lambda: turns.delivered("push", 1.3)))
    page = _Page(clock, ready_at=99.0)
    clock.now = 1.0
    paced.before_observe(page, 0)
    assert turns.delivered_at == 1.3  # the push went first ...
    assert abs(clock.now - (1.3 + RENDER_S)) < 0.11  # ... then the page had RENDER_S to show it
    paced.after_observe(0)
    assert turns.taken == 1 and turns.delivered_at is None


def test_after_a_delivery_the_page_gets_as_long_as_the_recording_had_before_its_observation() -> None:
    """Not a fixed time after the last delivery: a page that never shows the recorded state is
    observed when the recording's was, shifted by how late the delivery came (its own timers,
    such as a toast's close, would otherwise run past what the recording saw)."""
    for delivered_at, observed_by in ((0.95, 1.0 + MARGIN_S), (1.3, 1.3 + 0.05 + MARGIN_S)):
        clock = _Clock()
        paced = _pace(clock)
        paced.turns.expect(
            "push", 0, due=delivered_at, recorded=START.timestamp() + 0.95
        )  # 0.05 s before observation 0
        clock.events.append(
            (delivered_at, lambda at=delivered_at, paced=paced: paced.turns.delivered("push", at))
        )
        clock.now = 0.9
        paced.before_observe(_Page(clock, ready_at=99.0), 0)
        assert paced.turns.recorded_gap is not None and abs(paced.turns.recorded_gap - 0.05) < 1e-6
        assert abs(clock.now - observed_by) < 0.11 and clock.now < delivered_at + RENDER_S


def test_an_observation_waiting_for_the_reply_to_what_the_page_has_not_said_lets_the_page_work() -> None:
    """The recording's page sent a debounced message before observation 0 and had its reply; the
    replay's typing took longer, so the debounce (on the page's time) ends 0.2 s past the moment,
    where τ is held: the page gets its work due up to ``MARGIN_S`` past it, says it, and the reply
    comes — not a wait for the observation's bound with the page's time standing still."""
    clock = _Clock()
    timeline = Timeline(clock)
    pace = _pace(clock).recorded
    paced = PacedSteps(pace, clock, clock.sleep, timeline=timeline)
    paced.begin()
    turns = paced.turns
    turns.expect("socket", 0, due=1.0 + STALL_S, on_page=True)  # due only when the page is given up on
    said: list[float] = []

    def page_works() -> None:
        if not said and timeline.now() >= 1.2:  # the debounce fires on the page's time
            said.append(clock.now)
            turns.delivered("socket", clock.now)  # the reply follows at once

    clock.events += [(round(0.05 * n, 2), page_works) for n in range(1, 200)]
    paced.before_observe(_Page(clock, ready_at=0.0), 0)
    assert said and said[0] < 1.5 and clock.now < 1.5 + 0.11  # not the bound: 1.0 + LOADING_MAX_S
    assert timeline.now() <= 1.0 + MARGIN_S + 1e-9


def _on_timeline(clock: _Clock) -> PacedSteps:
    paced = PacedSteps(_pace(clock).recorded, clock, clock.sleep, timeline=Timeline(clock))
    paced.begin()
    return paced


def test_a_delivery_is_overdue_on_the_page_s_time_not_on_the_machine_s() -> None:
    """A stream's chunk due 0.3 s into the replay (the recording had it before observation 0, at
    1.0 s) reaches the page at 3.5 s on the machine's clock (a loaded machine hands it over late),
    the page's time standing at the observation's moment from 1.0 s: it is 0.7 s late on the page's
    time, never more, and observation 0 waits for it (before, it gave up at 2.3 s, the chunk "2 s
    overdue", and read the page without it). A delivery already ``OVERDUE_S`` late on the page's
    time (τ ran past it) is still not waited for."""
    clock = _Clock()
    paced = _on_timeline(clock)
    turns = paced.turns
    turns.expect(("stream", "queue"), 0, due=0.3)
    turns.expect(("stream", "abandoned"), 0, due=1.0 - OVERDUE_S - 0.5)  # τ ran 2.5 s past it
    clock.events.append((3.5, lambda: turns.delivered(("stream", "queue"), 3.5)))
    paced.before_observe(_Page(clock, ready_at=3.5), 0)  # the page shows the chunk once it has it
    assert turns.delivered_at == 3.5
    assert 3.5 <= clock.now < 3.5 + 0.11  # not the bound, 1.0 + LOADING_MAX_S: the abandoned one
    assert paced.timeline is not None and paced.timeline.now() == 1.0  # the page's time stood


def test_a_delivery_late_on_the_page_s_time_is_overdue_however_long_the_page_stood_before() -> None:
    """The page's time stood 3 s before the chunk's due moment was reckoned (a response served
    late): that standing does not excuse it; the page's time then ran 2.5 s past it, so it is
    overdue and observation 0 does not wait for it."""
    clock = _Clock()
    paced = _on_timeline(clock)
    assert paced.timeline is not None
    paced.timeline.hold("late", 0.0)
    clock.now = 3.0
    paced.timeline.lift("late")
    turns = paced.turns
    assert abs(turns.stood() - 3.0) < 1e-9
    turns.expect(("stream", "abandoned"), 0, due=3.0 - 1.5)  # reckoned now: due 1.5 s ago
    clock.now = 4.0  # τ reaches observation 0's moment (1.0) only now, the chunk 2.5 s late on it
    paced.before_observe(_Page(clock, ready_at=0.0), 0)
    assert turns.delivered_at is None and clock.now < 4.0 + FROZEN_RENDER_S + 0.11


def test_a_delivery_that_never_comes_is_waited_for_no_longer_than_the_observation_s_bound() -> None:
    """A stream the page abandoned 0.5 s before the observation's moment, the page's time then
    standing at the moment: never overdue on the page's time, and waited for only until the
    observation's own bound (``LOADING_MAX_S`` after its moment)."""
    clock = _Clock()
    paced = _on_timeline(clock)
    paced.turns.expect(("stream", "abandoned"), 0, due=0.5)
    paced.before_observe(_Page(clock, ready_at=0.0), 0)
    assert 1.0 + LOADING_MAX_S <= clock.now < 1.0 + LOADING_MAX_S + FROZEN_RENDER_S + 0.11


def test_the_pace_wait_freezes_animations_as_long_as_the_recording_did() -> None:
    clock = _Clock()
    rows = [
        {
            "started_at": START + timedelta(seconds=1),
            "acted_at": START + timedelta(seconds=3),
            "url": "",
            "tree_text": "",
            "frozen_ms": 1200.0,
            "tree_ms": 20.0,
        }
    ]
    pace = RecordedPace.of(START, rows, POLLING)
    assert pace is not None and pace.observed_at == [pytest.approx(START.timestamp() + 1.002)]  # + SNAPSHOT_S
    paced = PacedSteps(pace, clock, clock.sleep)
    paced.begin()
    page = _Page(clock, ready_at=0.0)
    clock.now = 1.2
    timing = paced.before_action(page, 0, Action(ActionKind.CLICK, element_id="1"))
    assert page.frozen == [(0.6, 1.2, 3.0)]  # frozen from 3.0 - 1.2 s until the recorded action
    assert timing == {"frozen_ms": 1200.0}
    clock.now = 3.5  # running late: no wait, no freeze
    assert (
        paced.before_action(page, 0, Action(ActionKind.CLICK, element_id="1")) == {} and len(page.frozen) == 1
    )


# ---------------------------------------------------------------- the recorded pace

START = datetime(2026, 11, 27, 12, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.events: list[tuple[float, Any]] = []
        """(when, what) to do as the clock passes ``when``."""

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for event in [e for e in self.events if e[0] <= self.now]:
            self.events.remove(event)
            event[1]()


class _Page:
    """A page whose tree reads "loading" until ``ready_at`` on the test's clock."""

    url = "http://app.test/"

    def __init__(self, clock: _Clock, ready_at: float, loading_until: float = 0.0) -> None:
        self.clock, self.ready_at, self.reads, self.loading_until = clock, ready_at, 0, loading_until
        self.frozen: list[tuple[float, float, float]] = []
        """(freeze delay, entered, left) of each ``thinking`` block."""

    @property
    def loading(self) -> bool:
        return self.clock.now < self.loading_until

    def tree(self) -> tuple[str, list[Any]]:
        self.reads += 1
        return ("status: Ready" if self.clock.now >= self.ready_at else "status: Loading"), []

    @contextmanager
    def thinking(self, freeze_after: float | None) -> Iterator[dict[str, float]]:
        entered, timing = self.clock.now, {}
        yield timing
        delay = round(freeze_after or 0.0, 6)
        self.frozen.append((delay, entered, self.clock.now))
        timing["frozen_ms"] = round(1e3 * (self.clock.now - entered - delay), 6)


def _request(at: float, **row: Any) -> dict[str, Any]:
    return {
        "started_at": START + timedelta(seconds=at),
        "status": 200,
        "url": "http://app.test/poll",
        "mime_type": "application/json",
        "response_headers": [],
        **row,
    }


POLLING = [_request(2.0), _request(5.0)]
"""The recorded page asked for something while the agent thought, at each step."""


def _pace(clock: _Clock, requests: list[dict[str, Any]] = POLLING) -> PacedSteps:
    rows = [
        {
            "started_at": START + timedelta(seconds=1),
            "acted_at": START + timedelta(seconds=3),
            "url": "http://app.test/",
            "tree_text": "status: Ready",
        },
        {
            "started_at": START + timedelta(seconds=4),
            "acted_at": START + timedelta(seconds=6),
            "url": "http://app.test/",
            "tree_text": "status: Ready",
        },
    ]
    pace = RecordedPace.of(START, rows, requests)
    assert pace is not None
    paced = PacedSteps(pace, clock, clock.sleep)
    paced.begin()
    return paced


def test_an_action_waits_for_its_recorded_moment_and_stop_does_not() -> None:
    clock = _Clock()
    paced = _pace(clock)
    page = _Page(clock, ready_at=0.0)
    clock.now = 1.2
    assert (
        paced.before_action(page, 0, Action(ActionKind.CLICK, element_id="1")) == {}
    )  # nothing frozen when recorded
    assert clock.now == 3.0 and page.frozen == []  # the agent's thinking, given to the page
    clock.now = 6.5  # a replay running late never waits to catch up
    paced.before_action(page, 1, Action(ActionKind.CLICK, element_id="1"))
    assert clock.now == 6.5
    clock.now = 4.0
    paced.before_action(page, 1, Action(ActionKind.STOP, text="done"))
    assert clock.now == 4.0


def test_a_thinking_time_the_recorded_page_spent_idle_is_not_waited_for() -> None:
    clock = _Clock()
    _pace(clock, requests=[_request(0.5)]).before_action(
        _Page(clock, 0.0), 0, Action(ActionKind.CLICK, element_id="1")
    )
    assert clock.now == 0.0  # nothing asked, nothing can arrive unasked: act at once
    for unasked in (
        _request(0.2, status=101, url="ws://app.test/socket"),
        _request(0.2, mime_type="text/event-stream"),
    ):
        clock = _Clock()
        _pace(clock, requests=[unasked]).before_action(
            _Page(clock, 0.0), 0, Action(ActionKind.CLICK, element_id="1")
        )
        assert clock.now == 3.0  # a socket or a stream may push anything meanwhile


def test_an_observation_waits_until_the_page_shows_the_recorded_state_never_past_its_moment_plus_margin() -> (
    None
):
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
    paced.before_action(_Page(clock, 0.0), 0, Action(ActionKind.CLICK, element_id="1"))
    assert abs(clock.now - 3.7) < 1e-9  # the server's timers count from the socket: so does the pace


def test_a_store_without_action_times_keeps_no_pace() -> None:
    assert (
        RecordedPace.of(START, [{"started_at": START, "acted_at": None, "url": "", "tree_text": ""}]) is None
    )
    assert RecordedPace.of(START, []) is None


# ---------------------------------------------------------------- with a browser: a WebSocket server of our own

BERTHS = """<!doctype html><title>Berths</title><h1>Berths</h1><p id="chart">No chart yet</p>
<button id="book">Book berth</button><p id="answer">No berth yet</p><script>
const socket = new WebSocket('ws://' + location.host + '/socket');
socket.onopen = () => {
  socket.send('hello');
  fetch('/chart.txt').then(r => r.text()).then(t => { document.getElementById('chart').textContent = t; });
};
socket.onmessage = e => { if (e.data.startsWith('Berth')) document.getElementById('answer').textContent = e.data; };
document.getElementById('book').addEventListener('click', () => socket.send('book'));
</script>"""
ANSWERS = {"hello": "Welcome aboard", "book": "Berth 7 booked"}
TEST_STALL_S = 3.0
"""``STALL_S`` in the browser test (5 s in earnest): the archive need be late only 2 s more than this."""
ARCHIVE_LATE_S = TEST_STALL_S + 2.0
"""How late the replay serves the page's chart, the page's time standing still meanwhile."""


class _Berths(BaseHTTPRequestHandler):
    """The page, its chart, and a WebSocket that answers each message at once (``ANSWERS``)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        if self.headers.get("upgrade", "").lower() == "websocket":
            websocket_accept(self)
            while (message := websocket_receive(self.rfile)) is not None:
                websocket_send(self.wfile, ANSWERS.get(message, "?"))
            self.close_connection = True
            return
        chart = self.path == "/chart.txt"
        body = b"Chart: high water 14:05" if chart else BERTHS.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain" if chart else "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_a_reply_waits_for_its_page_message_on_the_page_s_time_when_the_replay_stood_still(
    tmp_path, monkeypatch
) -> None:
    """The page opens its socket, fetches its chart, and the agent thinks 1 s before booking; the
    server answers "book" at once. The replay serves the chart ``ARCHIVE_LATE_S`` late (a loaded
    machine), so the page's time stands still that long after the socket opened, and the click comes
    that much later on the socket's clock: the reply must still come after the click (before the
    fix it went ``STALL_S`` after its recorded time on the socket's clock, before the page asked,
    and the replay repeated 3 of the 4 socket messages: Shiny's occasional 57 of 58)."""
    script: list[dict[str, Any]] = [
        {"action": "click", "target": {"role": "button", "name": "Book berth"}, "think": 1.0},
        {"action": "stop", "answer": "done"},
    ]
    store = Store.open(tmp_path / "store", create=True)
    with LocalSite(_Berths) as site:
        suite = scripted_suite(tmp_path / "tasks", "berths", site.url, "Book a berth.", script)
        recorded = record_run(
            store,
            RecordConfig(tasks=str(suite), agent="tests.realweb.agents:ThinkingOracle", browser=BROWSER),
        )
    assert any("Berth 7 booked" in line for line in tree_lines(store, recorded.run_id, "Berth 7"))
    monkeypatch.setattr("mmina.replayer.sockets.STALL_S", TEST_STALL_S)
    serve_late(monkeypatch, "/chart.txt", ARCHIVE_LATE_S)
    report = replay_run(store, recorded.run_id, browser=BROWSER)
    episode = report.episodes[0]
    assert episode.fidelity == 1.0, [s.tree_diff for s in episode.steps]
    assert [(s.recorded, s.equal) for s in episode.sockets] == [(4, 4)], episode.sockets
    socket = next(
        r for r in store.read("requests", run_id=report.replay_run).to_pylist() if r["status"] == 101
    )
    said = [
        m.data for m in parse_messages(store.read_blobs([socket["response_body"]])[socket["response_body"]])
    ]
    assert said.index("book") < said.index("Berth 7 booked"), said
