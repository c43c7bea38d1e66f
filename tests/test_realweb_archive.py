"""The archive rules real applications needed (issue 23), over generated archives (Hypothesis):
a recorded ``304`` is served as the response it confirmed, a request that failed when recorded
fails again but never shadows an answered one, and the defects the recorder marks (a missing
body, a body's chunk timing) are read back from a row's headers and never served.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mmina.recorder.har import BODY_HEADER, CHUNKS_HEADER, MISSING, body_missing
from mmina.replayer.archive import Archive, Exchange, Matcher, MatchKind, reply_for

PATHS = st.sampled_from(["/", "/a", "/a/b", "/style.css", "/api/x"])
STATUSES = st.sampled_from([0, 200, 200, 304, 404])


@st.composite
def archives(draw: st.DrawFn) -> list[Exchange]:
    exchanges = []
    for order in range(draw(st.integers(1, 12))):
        status = draw(STATUSES)
        body = draw(st.binary(min_size=1, max_size=8)) if status == 200 else b""
        exchanges.append(Exchange(order, "GET", f"https://site.test{draw(PATHS)}", status, body=body))
    return exchanges


@given(archives(), PATHS)
def test_a_served_exchange_is_never_a_304_when_the_archive_has_what_it_confirmed(
    exchanges: list[Exchange], path: str
) -> None:
    archive = Archive(exchanges)
    matcher = Matcher(archive)
    url = f"https://site.test{path}"
    for _ in range(len(exchanges) + 1):
        exchange = matcher.match("GET", url).exchange
        if exchange is None:
            continue
        served = archive.revalidated(exchange)
        confirmed = [e for e in exchanges if e.url == url and e.status == 200 and e.order < exchange.order]
        if exchange.status == 304 and confirmed:
            assert (served.status, served.body) == (200, confirmed[-1].body)
        else:
            assert served == exchange


@given(archives(), PATHS)
def test_a_recorded_failure_answers_only_where_nothing_was_answered(
    exchanges: list[Exchange], path: str
) -> None:
    url = f"https://site.test{path}"
    match = Matcher(Archive(exchanges)).match("GET", url)
    answered = [e for e in exchanges if e.url == url and e.status > 0]
    failed = [e for e in exchanges if e.url == url and e.status <= 0]
    if answered:
        assert match.exchange is not None and match.exchange.status > 0
    elif failed:
        assert match.kind is MatchKind.EXACT and match.exchange is not None and match.exchange.status == 0
    else:
        assert match.kind is MatchKind.UNMATCHED


@given(
    st.lists(st.tuples(st.integers(1, 10_000), st.floats(0, 60_000, allow_nan=False)), min_size=2, max_size=6)
)
def test_mmina_headers_are_read_back_and_never_served(timing: list[tuple[int, float]]) -> None:
    chunks = ",".join(f"{size}@{at:g}" for size, at in timing)
    exchange = Exchange(
        0,
        "GET",
        "https://site.test/q",
        200,
        headers=(("Content-Type", "text/event-stream"), (CHUNKS_HEADER, chunks), (BODY_HEADER, MISSING)),
    )
    assert exchange.chunks == chunks and exchange.body_missing
    assert set(reply_for(exchange).headers) == {"content-type"}


@given(
    st.sampled_from([0, 101, 200, 204, 206, 301, 304, 404, 500]),
    st.integers(-1, 5),
    st.sampled_from(["GET", "HEAD", "POST"]),
    st.booleans(),
)
def test_a_body_is_missing_only_where_the_response_had_one(
    status: int, size: int, method: str, kept: bool
) -> None:
    entry = {"request": {"method": method}, "response": {"status": status, "content": {"size": size}}}
    missing = body_missing(entry, b"x" if kept else None)
    had_one = status in (200, 206, 404, 500) and method != "HEAD" and size != 0
    assert missing == (had_one and not kept)
