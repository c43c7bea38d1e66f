"""Echoed ids (issue 56, items 5 and 7): an id the replayed page draws differently from the
recording's, which the recorded reply echoes, reaches the page as the page's own.

The page draws a call id from its clock's finest reading (as a page whose number of random draws
before a call depends on timing does), sends it with its request, and accepts the reply only if
it echoes that id; otherwise it concludes that its call was replaced. Recorded live, replayed
from the archive, with the replay's echo rewriting and, as a control, without.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RunSummary
from mmina.replayer.echoes import Echoes, places
from mmina.replayer.replays import replay_run
from mmina.replayer.sockets import normalised
from mmina.store import Store
from tests.local_site import LocalSite, answering_handler, record_scripted, tree_lines

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
PAGE = """<!doctype html><title>Tide desk</title><h1>Tide desk</h1><button id="call">Ask the tide</button>
<p id="answer">No call yet</p><script>
document.getElementById('call').addEventListener('click', () => {
  const id = 'call-' + Math.floor(performance.now() * 1000).toString(36) + '-' + Date.now().toString(36);
  fetch('/api/tide?call=' + id).then(r => r.json()).then(reply => {
    document.getElementById('answer').textContent = reply.call === id
      ? 'Call answered: high water at ' + reply.high : 'Call replaced by another session';
  });
});
</script>"""
SCRIPT = [
    {"action": "click", "target": {"role": "button", "name": "Ask the tide"}},
    {"action": "stop", "answer": "done"},
]


def _answer(path: str) -> tuple[int, str, bytes]:
    parts = urlsplit(path)
    if parts.path == "/api/tide":
        return (
            200,
            "application/json",
            json.dumps({"call": parse_qs(parts.query)["call"][0], "high": "14:05"}).encode(),
        )
    return 200, "text/html; charset=utf-8", PAGE.encode()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, RunSummary]:
    with LocalSite(answering_handler(_answer)) as site:
        return record_scripted(
            tmp_path_factory.mktemp("echo"), site.url, "tide", "Ask the tide desk.", SCRIPT, BROWSER
        )


def _answers(store: Store, run_id: str) -> list[str]:
    return tree_lines(store, run_id, "Call", "call yet")


def test_the_reply_echoes_the_id_the_replayed_page_drew(recorded) -> None:
    store, summary = recorded
    assert any("Call answered: high water at 14:05" in line for line in _answers(store, summary.run_id))
    report = replay_run(store, summary.run_id, browser=BROWSER)
    episode = report.episodes[0]
    assert episode.fidelity == 1.0, [s.tree_diff for s in episode.steps]
    assert _answers(store, report.replay_run) == _answers(store, summary.run_id)


def test_control_without_the_rewrite_the_page_sees_a_stranger_s_reply(recorded, monkeypatch) -> None:
    store, summary = recorded
    monkeypatch.setattr(Echoes, "rewrite", lambda self, reply: reply)
    report = replay_run(store, summary.run_id, browser=BROWSER)
    assert any("Call replaced by another session" in line for line in _answers(store, report.replay_run))


def test_ids_are_followed_by_place_and_words_never() -> None:
    echoes = Echoes()
    recorded = '{"header": {"msg_id": "a1b2c3d4-0001", "session": "s_84a1c2"}, "content": {"code": "1+1"}}'
    replayed = '{"header": {"msg_id": "ffee9900-0007", "session": "s_99z9z9"}, "content": {"code": "1+1"}}'
    reply = (
        '{"parent_header": {"msg_id": "a1b2c3d4-0001", "session": "s_84a1c2"}, "content": {"status": "ok"}}'
    )
    echoes.learn(places(None, recorded), places(None, replayed), reply)
    assert echoes.rewrite(reply) == reply.replace("a1b2c3d4-0001", "ffee9900-0007").replace(
        "s_84a1c2", "s_99z9z9"
    )
    assert echoes.rewrite(reply) == echoes.rewrite(reply), "what was learned holds for later replies"
    calls = Echoes()  # JSON-RPC over a socket: a number under the same key, in the next reply only
    calls.learn(
        places(None, '42["call",{"id":7,"m":"x"}]'),
        places(None, '42["call",{"id":9,"m":"x"}]'),
        '43["reply",{"id":7}]',
    )
    assert calls.rewrite('43["reply",{"id":7,"ok":true}]') == '43["reply",{"id":9,"ok":true}]'
    assert calls.rewrite('{"id": 7}') == '{"id": 7}'
    words = Echoes()  # a nearest match's other search term is never written into its reply
    words.learn(
        places("http://x.test/search?q=harbour&page=2", None),
        places("http://x.test/search?q=tide&page=3", None),
        '{"q": "harbour", "page": 2}',
    )
    assert not words and words.rewrite('{"q": "harbour"}') == '{"q": "harbour"}'


@given(st.text(max_size=200), st.text(max_size=200), st.text(max_size=400))
@settings(max_examples=200, deadline=None)
def test_any_message_is_learned_from_and_rewritten_without_error(
    recorded: str, replayed: str, reply: str
) -> None:
    echoes = Echoes()
    echoes.learn(places(None, recorded), places(None, replayed), reply)
    echoes.learn(places("http://" + recorded, replayed), places("http://x.test/" + replayed, recorded), reply)
    rewritten = echoes.rewrite(reply)
    assert isinstance(rewritten, str)
    if not echoes:
        assert rewritten == reply  # nothing learned: every byte stays


def _kernel_frame(channel: str, *parts: dict) -> bytes:
    """A message as Jupyter's ``v1.kernel.websocket.jupyter.org`` protocol frames it: the count
    and the offsets of its parts (8 bytes each, little-endian), then the channel and the JSON parts."""
    blobs = [channel.encode(), *(json.dumps(part, separators=(",", ":")).encode() for part in parts)]
    offsets, position = [], 8 * (len(blobs) + 1)
    for blob in blobs:
        offsets.append(position)
        position += len(blob)
    head = len(blobs).to_bytes(8, "little") + b"".join(o.to_bytes(8, "little") for o in offsets)
    return head + b"".join(blobs)


def test_ids_in_binary_framed_json_are_followed_and_rewritten_at_their_length() -> None:
    """Jupyter's kernel socket (Notebook 7, JupyterLab 4): the page's msg_id and session in a
    binary frame, echoed in the reply's parent header; the frame's offsets stay right."""

    def request(msg_id: str, session: str) -> bytes:
        return _kernel_frame(
            "shell",
            {"msg_id": msg_id, "session": session, "msg_type": "execute_request"},
            {},
            {},
            {"code": "1+1"},
        )

    recorded = request("fe4563ba-eee2-4c7a-9071-eca152278303", "02d2115d-1cc8-4b90-8557-311b505a0ecf")
    replayed = request("287f62cf-c941-45ed-b241-541de4bdf187", "49fce68e-2f78-40e5-aa29-b30242ce4403")
    reply = _kernel_frame(
        "shell",
        {"msg_id": "kernel-7", "msg_type": "execute_reply"},
        {"msg_id": "fe4563ba-eee2-4c7a-9071-eca152278303", "session": "02d2115d-1cc8-4b90-8557-311b505a0ecf"},
        {},
        {"status": "ok"},
    )
    assert places(None, recorded)["json0/msg_id"] == "fe4563ba-eee2-4c7a-9071-eca152278303"
    assert places(None, recorded)["json3/code"] == "1+1"
    assert normalised(recorded) == normalised(replayed)  # the page's message is matched by content
    echoes = Echoes()
    echoes.learn(places(None, recorded), places(None, replayed), reply.decode("utf-8", "replace"))
    assert echoes.rewrite_bytes(reply) == _kernel_frame(
        "shell",
        {"msg_id": "kernel-7", "msg_type": "execute_reply"},
        {"msg_id": "287f62cf-c941-45ed-b241-541de4bdf187", "session": "49fce68e-2f78-40e5-aa29-b30242ce4403"},
        {},
        {"status": "ok"},
    )
    longer = Echoes()  # an id of another length would move the parts the offsets point at: kept
    longer.learn(
        places(None, recorded),
        places(None, request("id-of-another-length-7", "s-7")),
        reply.decode("utf-8", "replace"),
    )
    assert longer and longer.rewrite_bytes(reply) == reply


@given(st.binary(max_size=300), st.binary(max_size=300), st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_any_binary_message_is_learned_from_and_rewritten_without_error(
    recorded: bytes, replayed: bytes, reply: bytes
) -> None:
    echoes = Echoes()
    echoes.learn(places(None, recorded), places(None, replayed), reply.decode("utf-8", "replace"))
    rewritten = echoes.rewrite_bytes(reply)
    assert len(rewritten) == len(reply)
    if not echoes:
        assert rewritten == reply
