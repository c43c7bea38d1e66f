"""The currency exchange fixture site, over HTTP and through ``Site.handle`` (no browser)."""
from __future__ import annotations

import io
import json
import re
import urllib.request
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urlsplit

import pytest
from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.base import Request, Response
from mmina.fixtures.web.images import rgb
from mmina.fixtures.web.sites.exchange import CURRENCY_INFO, PAIRS, ExchangeSite
from PIL import Image

HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
FOREIGN_KEYWORDS = ("kiwix", "shop", "flight", "hotel", "carrental", "train", "event", "video", "social", "food",
                    "guide", "recipe")


def get(site: ExchangeSite, url: str, form: dict[str, str] | None = None) -> Response:
    """Ask the site for a path with its query string, as the server would decode it."""
    parts = urlsplit(url)
    return site.handle(Request("POST" if form is not None else "GET", parts.path, dict(parse_qsl(parts.query)),
                               form or {}))


class _Links(HTMLParser):
    """Collects ``href``, ``src`` and ``data-src`` values."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("href", "src", "data-src") and value]


def links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.urls


@pytest.fixture(scope="module")
def site() -> ExchangeSite:
    return ExchangeSite(0)


@pytest.mark.parametrize(("path", "content_type", "expected"), [
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
])
def test_routes(site: ExchangeSite, path: str, content_type: str, expected: str) -> None:
    response = get(site, path)
    assert (response.status, response.content_type) == (200, content_type)
    assert expected.encode() in response.body


@pytest.mark.parametrize("path", [
    "/nope", "/history/SOL-XYZ", "/history/SOL-SOL", "/currency/ABC", "/pairs?page=5", "/pairs?page=x",
    "/rates?base=ABC", "/charts/SOL-SOL.png", "/notes/SOL-7.png", "/notes/ABC-10.png",
])
def test_unknown_pages_are_404(site: ExchangeSite, path: str) -> None:
    response = get(site, path)
    assert (response.status, response.content_type) == (404, HTML)


@pytest.mark.parametrize("query", ["amount=-5&from=SOL&to=USD", "amount=ten&from=SOL&to=USD",
                                   "amount=5&from=SOL&to=SOL", "amount=5&from=XXX&to=USD", ""])
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


def test_served_over_http_by_host() -> None:
    with FixtureWeb() as web:
        request = urllib.request.Request(f"http://127.0.0.1:{web.port}/convert?amount=2&from=EUR&to=USD",
                                         headers={"Host": "exchange.mmina.test"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200 and b"2.00 EUR = 2.17 USD" in reply.read()


GOLDEN = ["/", "/convert?amount=250&from=SOL&to=USD", "/rates?base=EST", "/pairs?page=2", "/history/SOL-USD",
          "/currency/SOL", "/charts/NRV-EST.png", "/notes/EST-20.png", "/api/live?from=SOL&to=USD"]


@pytest.mark.parametrize("level", [0, 3])
def test_same_drift_same_bytes(level: int) -> None:
    first, second = ExchangeSite(level), ExchangeSite(level)
    for path in GOLDEN:
        path = path if level == 0 else path.replace("/history/SOL-USD", first.history_path("SOL", "USD")).replace(
            "/currency/SOL", first.currency_path("SOL"))
        assert get(first, path).body == get(second, path).body, path


def test_level_zero_is_the_reference_and_the_live_rate_holds_still(site: ExchangeSite) -> None:
    assert site.history_path("SOL", "USD") == "/history/SOL-USD"
    calls = {get(site, "/api/live?from=SOL&to=USD").body for _ in range(3)}
    assert len(calls) == 1
    assert b"&_=" not in get(site, "/history/SOL-USD").body


def test_drift_moves_order_rates_ids_and_urls(site: ExchangeSite) -> None:
    drifted = ExchangeSite(3)
    pair = re.compile(r">([A-Z]{3}/[A-Z]{3})</a>")
    assert pair.findall(get(site, "/pairs").body.decode()) != pair.findall(get(drifted, "/pairs").body.decode())
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
    first, second = ExchangeSite(1), ExchangeSite(1)
    sequence = [json.loads(get(first, "/api/live?from=SOL&to=USD").body)["rate"] for _ in range(4)]
    assert len(set(sequence)) == 4
    assert sequence == [json.loads(get(second, "/api/live?from=SOL&to=USD").body)["rate"] for _ in range(4)]


@pytest.mark.parametrize("level", [0, 3])
def test_every_link_resolves_and_names_no_other_site(level: int) -> None:
    site = ExchangeSite(level)
    seen, queue = set(), ["/"]
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        seen.add(url)
        assert not any(word in url.lower() for word in FOREIGN_KEYWORDS), url
        response = get(site, url)
        assert response.status == 200, url
        if response.content_type == HTML:
            queue += [u for u in links(response.body.decode()) if not urlsplit(u).netloc]
    assert len(seen) > 40


def test_banknote_colour_is_only_in_the_picture(site: ExchangeSite) -> None:
    for code, info in CURRENCY_INFO.items():
        page = get(site, f"/currency/{code}").body.decode().lower()
        for note in info.notes:
            assert not re.search(rf"\b{note.colour}\b", page), (code, note.colour)
            pixel = Image.open(io.BytesIO(get(site, f"/notes/{code}-{note.value}.png").body)).getpixel((4, 75))
            assert pixel == rgb(note.colour)


def test_every_pair_has_a_distinct_high_and_low(site: ExchangeSite) -> None:
    for base, quote in PAIRS:
        week = [round(v, 4) for v in site.week(base, quote)]
        assert week.count(max(week)) == 1 and week.count(min(week)) == 1


def test_hop_fragments(site: ExchangeSite) -> None:
    fragments = site.hop_fragments()
    assert len(fragments) >= 8 and sum(f.multimodal for f in fragments) >= 2
    for fragment in fragments:
        assert fragment.keyword == "exchange" and fragment.site == "exchange"
        assert fragment.keyword in fragment.reference_url
        assert fragment.script[0] == {"action": "goto", "url": fragment.script[0]["url"]}
        assert fragment.script[0]["url"].startswith(site.origin + "/")
        assert 2 <= len(fragment.script) <= 5 and all(step["action"] != "stop" for step in fragment.script)
        assert fragment.answer not in fragment.goal
        page = get(site, fragment.reference_url.removeprefix(site.origin))
        assert page.status == 200
        text = page.body.decode().replace("&amp;", "&")
        text += "".join(get(site, url).body.decode() for url in links(text) if url.startswith("/api/"))
        assert (fragment.answer in text) != fragment.multimodal, fragment.goal
