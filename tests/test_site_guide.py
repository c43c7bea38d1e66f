"""The travel guide fixture site, over HTTP and through ``Site.handle`` (no browser)."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.images import rgb
from mmina.fixtures.web.sites.guide import GUIDES, GuideSite
from mmina.fixtures.web.world import CITIES
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
def site() -> GuideSite:
    return GuideSite(0)


@pytest.mark.parametrize(
    ("path", "content_type", "expected"),
    [
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
    ],
)
def test_routes(site: GuideSite, path: str, content_type: str, expected: str) -> None:
    assert_page(get(site, path), 200, content_type, expected)


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/city/atlantis",
        "/city/karos/see/nothing",
        "/browse?region=mars",
        "/photos/karos/nothing.png",
        "/photos/atlantis/water-gate.png",
    ],
)
def test_unknown_pages_are_404(site: GuideSite, path: str) -> None:
    assert_page(get(site, path), 404, HTML)


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


def test_served_over_http_by_host(fixture_web: FixtureWeb, site: GuideSite) -> None:
    reply = served(fixture_web, site, "/city/velmora")
    assert reply.status == 200 and b"Olive Court Hostel" in reply.body


GOLDEN = [
    "/",
    "/browse?region=norvale",
    "/city/tessaly",
    "/city/ambrel/see/water-gate",
    "/search?q=gate",
    "/photos/tessaly/cathedral-of-st-orla.png",
    "/api/weather?city=ostrand",
]


@pytest.mark.parametrize("level", [0, 3])
def test_same_drift_same_bytes(level: int) -> None:
    site = GuideSite(level)
    assert_same_bytes(
        GuideSite,
        level,
        (
            path.replace("/city/tessaly", site.city_path("tessaly")).replace(
                "/city/ambrel/see/water-gate", site.sight_path("ambrel", "water-gate")
            )
            for path in GOLDEN
        ),
    )


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
    calls = assert_changes_only_under_drift(
        GuideSite, lambda site: "/api/weather?city=ostrand", "sequence", calls=4
    )
    assert len({(c["temperature"], c["observed"], c["sequence"]) for c in calls}) == 4


@pytest.mark.parametrize("level", [0, 3])
def test_every_link_resolves_and_names_no_other_site(level: int) -> None:
    site = GuideSite(level)
    pages = crawl_site(
        site, ("/", "/browse?region=solaria", "/browse?region=estravia", "/browse?region=norvale")
    )
    assert_keeps_to_its_keyword(site, pages)
    assert len(pages) > 60


@pytest.mark.parametrize(
    ("city", "sight", "point", "colour"),
    [
        ("tessaly", "cathedral-of-st-orla", (120, 50), "orange"),
        ("ambrel", "water-gate", (40, 100), "stone"),
    ],
)
def test_photo_facts_are_only_in_the_picture(
    site: GuideSite, city: str, sight: str, point: tuple[int, int], colour: str
) -> None:
    photo = Image.open(io.BytesIO(get(site, f"/photos/{city}/{sight}.png").body))
    assert photo.getpixel(point) == rgb(colour)
    for page in (f"/city/{city}", f"/city/{city}/see/{sight}"):
        text = get(site, page).body.decode().lower()
        assert "orange" not in text and "1684" not in text


def test_hop_fragments(site: GuideSite) -> None:
    for fragment in well_formed_fragments(site):
        assert fragment.keyword == "guide" and fragment.site == "guide"
        assert fragment.city and f"/city/{fragment.city}" in fragment.reference_url
        text = reference_page(site, fragment).replace("&#x27;", "'")
        text += fetched_apis(site, text)
        assert (fragment.answer in text) != fragment.multimodal, fragment.goal
