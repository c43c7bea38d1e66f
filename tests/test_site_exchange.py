"""The currency exchange fixture site, over HTTP and through ``Site.handle`` (no browser)."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.images import rgb
from mmina.fixtures.web.sites.exchange import CURRENCY_INFO, PAIRS, ExchangeSite
from tests.site_testing import (
    HTML,
    JSON,
    assert_changes_only_under_drift,
    assert_keeps_to_its_keyword,
    assert_page,
    assert_same_bytes,
    crawl_site,
    fetched_apis,
    get,
    reference_page,
    served,
    well_formed_fragments,
)


@pytest.fixture(scope="module")
def site() -> ExchangeSite:
    return ExchangeSite(0)


@pytest.mark.parametrize(
    ("path", "content_type", "expected"),
    [
        ("/", HTML, "Currency converter"),
        ("/convert?amount=250&from=SOL&to=USD", HTML, "250.00 SOL = 68.50 USD"),
        ("/convert?amount=1,000&from=NRV&to=EUR", HTML, "1,000.00 NRV = 137.33 EUR"),
        ("/rates", HTML, "Exchange rates for 1 US dollar"),
        ("/rates?base=NRV", HTML, "Exchange rates for 1 Norvalean mark"),
        ("/pairs", HTML, "Page 1 of 4"),
        ("/pairs?page=4", HTML, "Previous page"),
        ("/history/SOL-USD", HTML, "Week open (10 Feb 2026)"),
        ("/currencies", HTML, "Norvalean mark"),
        ("/currency/NRV", HTML, "100 skillen"),
        ("/search?q=solaria", HTML, "1 result"),
        ("/search", HTML, "Type a currency name"),
        ("/api/live?from=SOL&to=USD", JSON, '"rate":"0.27'),
        ("/charts/SOL-USD.png", "image/png", ""),
        ("/notes/SOL-50.png", "image/png", ""),
        ("/favicon.ico", "image/x-icon", ""),
    ],
)
def test_routes(site: ExchangeSite, path: str, content_type: str, expected: str) -> None:
    assert_page(get(site, path), 200, content_type, expected)


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/history/SOL-XYZ",
        "/history/SOL-SOL",
        "/currency/ABC",
        "/pairs?page=5",
        "/pairs?page=x",
        "/rates?base=ABC",
        "/charts/SOL-SOL.png",
        "/notes/SOL-7.png",
        "/notes/ABC-10.png",
    ],
)
def test_unknown_pages_are_404(site: ExchangeSite, path: str) -> None:
    assert_page(get(site, path), 404, HTML)


@pytest.mark.parametrize(
    "query",
    [
        "amount=-5&from=SOL&to=USD",
        "amount=ten&from=SOL&to=USD",
        "amount=5&from=SOL&to=SOL",
        "amount=5&from=XXX&to=USD",
        "",
    ],
)
def test_bad_conversions_explain_themselves(site: ExchangeSite, query: str) -> None:
    response = get(site, f"/convert?{query}")
    assert response.status == 400
    assert b'role="alert"' in response.body and b'<select id="from" name="from">' in response.body


def test_live_api_rejects_bad_pairs(site: ExchangeSite) -> None:
    assert get(site, "/api/live?from=SOL&to=SOL").status == 400
    assert get(site, "/api/live").status == 400


def test_search_accepts_a_posted_form(site: ExchangeSite) -> None:
    response = get(site, "/search", form={"q": "Estravia"})
    assert response.status == 200 and b"Estravian crown (EST)" in response.body


def test_served_over_http_by_host(fixture_web: FixtureWeb, site: ExchangeSite) -> None:
    reply = served(fixture_web, site, "/convert?amount=2&from=EUR&to=USD")
    assert reply.status == 200 and b"2.00 EUR = 2.17 USD" in reply.body


GOLDEN = [
    "/",
    "/convert?amount=250&from=SOL&to=USD",
    "/rates?base=EST",
    "/pairs?page=2",
    "/history/SOL-USD",
    "/currency/SOL",
    "/charts/NRV-EST.png",
    "/notes/EST-20.png",
    "/api/live?from=SOL&to=USD",
]


@pytest.mark.parametrize("level", [0, 3])
def test_same_drift_same_bytes(level: int) -> None:
    site = ExchangeSite(level)
    assert_same_bytes(
        ExchangeSite,
        level,
        (
            path.replace("/history/SOL-USD", site.history_path("SOL", "USD")).replace(
                "/currency/SOL", site.currency_path("SOL")
            )
            for path in GOLDEN
        ),
    )


def test_level_zero_is_the_reference_and_the_live_rate_holds_still(site: ExchangeSite) -> None:
    assert site.history_path("SOL", "USD") == "/history/SOL-USD"
    calls = {get(site, "/api/live?from=SOL&to=USD").body for _ in range(3)}
    assert len(calls) == 1
    assert b"&_=" not in get(site, "/history/SOL-USD").body


def test_drift_moves_order_rates_ids_and_urls(site: ExchangeSite) -> None:
    drifted = ExchangeSite(3)
    pair = re.compile(r">([A-Z]{3}/[A-Z]{3})</a>")
    assert pair.findall(get(site, "/pairs").body.decode()) != pair.findall(
        get(drifted, "/pairs").body.decode()
    )
    assert site.mid("SOL", "USD") != drifted.mid("SOL", "USD")
    assert 'id="amount-' in get(drifted, "/").body.decode()
    path = drifted.history_path("SOL", "USD")
    assert re.fullmatch(r"/v3/history/SOL-USD-[0-9a-f]{8}", path)
    assert get(drifted, path).status == 200
    page = get(drifted, path).body.decode()
    assert "+ '&_=' + Date.now()" in page


@pytest.mark.parametrize("old", ["/history/SOL-USD", "/currency/SOL"])
def test_old_detail_urls_redirect_once_moved(old: str) -> None:
    drifted = ExchangeSite(3)
    response = get(drifted, old)
    assert response.status == 301
    location = dict(response.headers)["Location"]
    assert location.startswith("/v3/") and get(drifted, location).status == 200


def test_live_rate_changes_on_every_call_under_drift() -> None:
    answers = assert_changes_only_under_drift(
        ExchangeSite, lambda site: "/api/live?from=SOL&to=USD", "rate", level=1, calls=4
    )
    assert len({answer["rate"] for answer in answers}) == 4


@pytest.mark.parametrize("level", [0, 3])
def test_every_link_resolves_and_names_no_other_site(level: int) -> None:
    site = ExchangeSite(level)
    pages = crawl_site(site)
    assert_keeps_to_its_keyword(site, pages)
    assert len(pages) > 40


def test_banknote_colour_is_only_in_the_picture(site: ExchangeSite) -> None:
    for code, info in CURRENCY_INFO.items():
        page = get(site, f"/currency/{code}").body.decode().lower()
        for note in info.notes:
            assert not re.search(rf"\b{note.colour}\b", page), (code, note.colour)
            pixel = Image.open(io.BytesIO(get(site, f"/notes/{code}-{note.value}.png").body)).getpixel(
                (4, 75)
            )
            assert pixel == rgb(note.colour)


def test_every_pair_has_a_distinct_high_and_low(site: ExchangeSite) -> None:
    for base, quote in PAIRS:
        week = [round(v, 4) for v in site.week(base, quote)]
        assert week.count(max(week)) == 1 and week.count(min(week)) == 1


def test_hop_fragments(site: ExchangeSite) -> None:
    for fragment in well_formed_fragments(site):
        assert fragment.keyword == "exchange" and fragment.site == "exchange"
        text = reference_page(site, fragment).replace("&amp;", "&")
        text += fetched_apis(site, text)
        assert (fragment.answer in text) != fragment.multimodal, fragment.goal
