"""An unmatched request gets an answer its client can read (issue 56, item 5b): the status and
content type the same site and path answered with when recorded, a body in that format (a JSON
error object for a JSON API), never mmina's own plain text where the page parses data."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mmina.replayer.archive import NOT_ARCHIVED_STATUS, Archive, Exchange, unmatched_reply

API = "https://notebook.example/api/sessions"


def _archive() -> Archive:
    return Archive(
        [
            Exchange(
                0,
                "GET",
                "https://notebook.example/lab",
                200,
                (("Content-Type", "text/html"),),
                b"<html></html>",
            ),
            Exchange(1, "POST", API, 201, (("Content-Type", "application/json"),), b'{"id": "a1"}'),
            Exchange(2, "GET", f"{API}/a1", 200, (("Content-Type", "application/json"),), b'{"id": "a1"}'),
            Exchange(
                3,
                "GET",
                "https://notebook.example/static/app.js",
                200,
                (("Content-Type", "application/javascript"),),
                b"run()",
            ),
        ]
    )


def _reply(method: str, url: str):
    return unmatched_reply(method, url, _archive().kin(method, url))


def test_a_json_api_gets_a_json_error_object_with_the_status_it_answered_with() -> None:
    reply = _reply("DELETE", f"{API}/b2")  # a session id the recording never saw
    assert reply.headers["content-type"] == "application/json"
    assert reply.headers["x-mmina-replay"] == "not-archived"
    assert reply.status == 200  # as GET /api/sessions/a1 was answered: the client reads on
    assert json.loads(reply.body)["error"] == "not in the archive"
    assert "DELETE" in json.loads(reply.body)["message"]


def test_the_same_method_is_preferred_and_other_formats_get_their_own_body() -> None:
    assert _reply("POST", f"{API}/b2/restart").status == 201  # the POST of /api/sessions
    script = _reply("GET", "https://notebook.example/static/other.js")
    assert script.headers["content-type"] == "application/javascript" and script.body.startswith(b"/*")
    page = _reply("GET", "https://notebook.example/lab/tree")
    assert page.headers["content-type"] == "text/html" and b"Not in the archive" in page.body


def test_nothing_of_that_site_and_path_recorded_keeps_the_plain_404() -> None:
    for url in ("https://elsewhere.example/api/sessions", "https://notebook.example/other"):
        reply = _reply("GET", url)
        assert reply.status == NOT_ARCHIVED_STATUS and reply.headers["content-type"].startswith("text/plain")


@given(
    st.sampled_from(["GET", "POST", "DELETE", "PATCH"]),
    st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=8), max_size=4),
    st.text(max_size=20),
)
def test_any_unmatched_request_gets_a_well_formed_answer(method: str, path: list[str], query: str) -> None:
    url = "https://notebook.example/" + "/".join(path) + ("?" + query if query else "")
    reply = _reply(method, url)
    assert reply.headers["x-mmina-replay"] == "not-archived"
    if "json" in reply.headers["content-type"]:
        assert json.loads(reply.body)["message"].startswith("mmina replay:")
    assert 200 <= reply.status < 500


def test_each_step_lists_its_nearest_and_synthetic_answers_with_what_served_them() -> None:
    """Issue 56, item 6: a wrong "nearest" is found in the report, not by diffing tables."""
    from datetime import datetime, timedelta

    from mmina.replayer.archive import MatchKind
    from mmina.replayer.jobs import _traced_by_step
    from mmina.replayer.router import Served

    start = datetime(2026, 12, 6, tzinfo=UTC)

    def served_at(seconds: float, method: str, url: str, kind: MatchKind, **recorded: Any) -> Served:
        return Served(
            at=start + timedelta(seconds=seconds), method=method, url=url, kind=kind, status=200, **recorded
        )

    served = [
        served_at(
            0.5, "GET", f"{API}?page=2", MatchKind.NEAREST, recorded_url=f"{API}?page=1", recorded_order=4
        ),
        served_at(0.6, "GET", f"{API}/a1", MatchKind.EXACT, recorded_url=f"{API}/a1", recorded_order=5),
        served_at(2.5, "DELETE", f"{API}/b2", MatchKind.UNMATCHED),
    ]
    traced = _traced_by_step(served, [start + timedelta(seconds=1), start + timedelta(seconds=2)])
    assert [(m.kind, m.url, m.recorded_url, m.recorded_order) for m in traced[-1]] == [
        ("nearest", f"{API}?page=2", f"{API}?page=1", 4)
    ]  # the initial load's; the exact one is not listed
    assert [(m.kind, m.method, m.recorded_url) for m in traced[1]] == [("unmatched", "DELETE", None)]
