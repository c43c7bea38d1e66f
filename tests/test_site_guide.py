"""The travel guide fixture site, over HTTP and through ``Site.handle`` (no browser)."""
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
from mmina.fixtures.web.sites.guide import GUIDES, GuideSite
from mmina.fixtures.web.world import CITIES
from PIL import Image

HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
FOREIGN_KEYWORDS = ("kiwix", "shop", "flight", "hotel", "carrental", "train", "event", "video", "social", "food",
                    "exchange", "recipe")


def get(site: GuideSite, url: str, form: dict[str, str] | None = None) -> Response:
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
def site() -> GuideSite:
    return GuideSite(0)


@pytest.mark.parametrize(("path", "content_type", "expected"), [
    ("/", HTML, "All destinations"),
    ("/browse", HTML, "Browse cities"),
    ("/browse?region=solaria", HTML, "Cities in Solaria"),
    ("/city/port-meridian", HTML, "Airport bus A1"),
    ("/city/calder-bay", HTML, "5 h 15 min"),
    ("/city/ostrand", HTML, "Weather now in Ostrand"),
    ("/city/karos/see/karos-tea-museum", HTML, "Wed-Mon 9:30-17:30"),
    ("/search?q=lake", HTML, "Lake Ambrel"),
    ("/search?q=zzz", HTML, "No destination matches"),
    ("/search", HTML, "Type a city"),
    ("/photos/ambrel/water-gate.png", "image/png", ""),
    ("/photos/port-meridian/meridian-lighthouse.png", "image/png", ""),
    ("/api/weather?city=ostrand", JSON, '"conditions":"Light snow"'),
    ("/favicon.ico", "image/x-icon", ""),
])
def test_routes(site: GuideSite, path: str, content_type: str, expected: str) -> None:
    response = get(site, path)
    assert (response.status, response.content_type) == (200, content_type)
    assert expected.encode() in response.body


@pytest.mark.parametrize("path", ["/nope", "/city/atlantis", "/city/karos/see/nothing", "/browse?region=mars",
                                  "/photos/karos/nothing.png", "/photos/atlantis/water-gate.png"])
def test_unknown_pages_are_404(site: GuideSite, path: str) -> None:
    response = get(site, path)
    assert (response.status, response.content_type) == (404, HTML)


def test_weather_api_needs_a_known_city(site: GuideSite) -> None:
    assert get(site, "/api/weather?city=atlantis").status == 404
    assert get(site, "/api/weather").status == 404


def test_every_world_city_has_a_long_page(site: GuideSite) -> None:
    assert {g.city.slug for g in GUIDES} == {c.slug for c in CITIES}
    for city in CITIES:
        page = get(site, f"/city/{city.slug}").body.decode()
        assert page.count("<section") >= 10 and city.airport in page
        assert len(re.sub(r"<(style|script)>.*?</\1>|<[^>]+>", "", page, flags=re.DOTALL)) > 2000


def test_search_accepts_a_posted_form(site: GuideSite) -> None:
    response = get(site, "/search", form={"q": "Norvale"})
    assert response.status == 200 and b"Tessaly" in response.body


def test_served_over_http_by_host() -> None:
    with FixtureWeb() as web:
        request = urllib.request.Request(f"http://127.0.0.1:{web.port}/city/velmora",
                                         headers={"Host": "guide.mmina.test"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200 and b"Olive Court Hostel" in reply.read()


GOLDEN = ["/", "/browse?region=norvale", "/city/tessaly", "/city/ambrel/see/water-gate", "/search?q=gate",
          "/photos/tessaly/cathedral-of-st-orla.png", "/api/weather?city=ostrand"]


@pytest.mark.parametrize("level", [0, 3])
def test_same_drift_same_bytes(level: int) -> None:
    first, second = GuideSite(level), GuideSite(level)
    for path in GOLDEN:
        path = path.replace("/city/tessaly", first.city_path("tessaly")).replace(
            "/city/ambrel/see/water-gate", first.sight_path("ambrel", "water-gate"))
        assert get(first, path).body == get(second, path).body, path


def test_level_zero_weather_holds_still(site: GuideSite) -> None:
    assert len({get(site, "/api/weather?city=karos").body for _ in range(3)}) == 1
    assert b"&_=" not in get(site, "/city/karos").body


def test_drift_moves_order_prices_ids_and_urls(site: GuideSite) -> None:
    drifted = GuideSite(3)
    city = re.compile(r'<li><a href="[^"]+">([^<]+)</a> \u2013')
    before, after = city.findall(get(site, "/").body.decode()), city.findall(get(drifted, "/").body.decode())
    assert before != after and sorted(before) == sorted(after)
    path = drifted.city_path("velmora")
    assert re.fullmatch(r"/v3/city/velmora-[0-9a-f]{8}", path)
    before, after = get(site, "/city/velmora").body.decode(), get(drifted, path).body.decode()
    price = re.compile(r"\d[\d,.]* SOL")
    assert price.findall(before) != price.findall(after)
    assert 'id="see-' in after and "+ '&_=' + Date.now()" in after
    assert "Last edited 2026-01-15 09:30 UTC" in before and "Last edited 2026-01-18" in after


@pytest.mark.parametrize("old", ["/city/velmora", "/city/ambrel/see/water-gate"])
def test_old_detail_urls_redirect_once_moved(old: str) -> None:
    drifted = GuideSite(3)
    response = get(drifted, old)
    assert response.status == 301
    location = dict(response.headers)["Location"]
    assert location.startswith("/v3/") and get(drifted, location).status == 200


def test_weather_changes_on_every_call_under_drift() -> None:
    first, second = GuideSite(2), GuideSite(2)
    calls = [json.loads(get(first, "/api/weather?city=ostrand").body) for _ in range(4)]
    assert len({(c["temperature"], c["observed"], c["sequence"]) for c in calls}) == 4
    assert calls == [json.loads(get(second, "/api/weather?city=ostrand").body) for _ in range(4)]


@pytest.mark.parametrize("level", [0, 3])
def test_every_link_resolves_and_names_no_other_site(level: int) -> None:
    site = GuideSite(level)
    seen, queue = set(), ["/", "/browse?region=solaria", "/browse?region=estravia", "/browse?region=norvale"]
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        seen.add(url)
        assert not any(word in url.lower() for word in FOREIGN_KEYWORDS), url
        response = get(site, url)
        assert response.status == 200, url
        if response.content_type == HTML:
            queue += [u.split("#")[0] for u in links(response.body.decode()) if not urlsplit(u).netloc and u[0] != "#"]
    assert len(seen) > 60


@pytest.mark.parametrize(("city", "sight", "point", "colour"), [
    ("tessaly", "cathedral-of-st-orla", (120, 50), "orange"),
    ("ambrel", "water-gate", (40, 100), "stone"),
])
def test_photo_facts_are_only_in_the_picture(site: GuideSite, city: str, sight: str, point: tuple[int, int],
                                             colour: str) -> None:
    photo = Image.open(io.BytesIO(get(site, f"/photos/{city}/{sight}.png").body))
    assert photo.getpixel(point) == rgb(colour)
    for page in (f"/city/{city}", f"/city/{city}/see/{sight}"):
        text = get(site, page).body.decode().lower()
        assert "orange" not in text and "1684" not in text


def test_hop_fragments(site: GuideSite) -> None:
    fragments = site.hop_fragments()
    assert len(fragments) >= 8 and sum(f.multimodal for f in fragments) >= 2
    for fragment in fragments:
        assert fragment.keyword == "guide" and fragment.site == "guide"
        assert fragment.keyword in fragment.reference_url
        assert fragment.city and f"/city/{fragment.city}" in fragment.reference_url
        assert fragment.script[0] == {"action": "goto", "url": fragment.script[0]["url"]}
        assert fragment.script[0]["url"].startswith(site.origin + "/")
        assert 2 <= len(fragment.script) <= 5 and all(step["action"] != "stop" for step in fragment.script)
        assert fragment.answer not in fragment.goal
        page = get(site, fragment.reference_url.removeprefix(site.origin))
        assert page.status == 200
        text = page.body.decode().replace("&#x27;", "'")
        text += "".join(get(site, url).body.decode() for url in links(text) if url.startswith("/api/"))
        assert (fragment.answer in text) != fragment.multimodal, fragment.goal
