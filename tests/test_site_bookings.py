"""The four booking sites (flights, hotels, car rental, trains): what they share, tested alike.

Pages are fetched with ``site.handle`` (no sockets, so the file stays fast); one test per site
goes through a real ``FixtureWeb`` with a ``Host`` header. Every hop fragment's oracle script
is replayed at the HTTP level by a tiny form-and-link follower (``site_testing.run_script``),
so a script that names a missing link or lands on a page other than its ``reference_url``
fails without a browser.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from itertools import pairwise

import pytest
from PIL import Image

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.base import Site
from mmina.fixtures.web.sites.carrental import CarRentalSite
from mmina.fixtures.web.sites.flights import FlightsSite
from mmina.fixtures.web.sites.hotels import HotelsSite
from mmina.fixtures.web.sites.trains import TrainsSite
from mmina.fixtures.web.world import CITIES
from tests.site_testing import (
    HTML,
    JSON,
    KEYWORDS,
    PageModel,
    assert_changes_only_under_drift,
    assert_keeps_to_its_keyword,
    assert_same_bytes,
    crawl_site,
    follow,
    get,
    run_script,
    served,
    text,
    visible,
    well_formed_fragments,
)

# ---- per-site facts the generic tests need ------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """Addresses of each kind on one site, at drift 0."""

    cls: type[Site]
    listing: str
    detail: str
    xhr: str
    xhr_field: str
    images: tuple[str, ...]
    pages: tuple[str, ...]
    missing: tuple[str, ...]


SPECS = {
    "flights": Spec(
        FlightsSite,
        "/results?from=PMR&to=CBY&date=2026-02-12",
        "/flight/2026-02-12/PMR-CBY/SA135",
        "/api/seats?flight=SA135&date=2026-02-12",
        "seats_left",
        ("/logos/SA.png", "/terminal-maps/SA135.png"),
        (
            "/",
            "/airports",
            "/airports?q=bay",
            "/airport/CBY",
            "/airport/CBY?date=2026-02-14",
            "/results?from=PMR&to=CBY&date=2026-02-12&sort=price",
        ),
        (
            "/nope",
            "/results?from=PMR&to=XXX&date=2026-02-12",
            "/results?from=PMR&to=CBY&date=2026-03-01",
            "/results?from=PMR&to=CBY&date=2026-02-12&sort=colour",
            "/flight/2026-02-12/PMR-OST/SA135",
            "/flight/2026-02-12/PMR-CBY/ZZ999",
            "/airport/XYZ",
            "/logos/ZZ.png",
            "/terminal-maps/ZZ999.png",
        ),
    ),
    "hotels": Spec(
        HotelsSite,
        "/city/port-meridian",
        "/city/port-meridian/old-town-inn",
        "/api/availability?hotel=old-town-inn&date=2026-02-10",
        "rooms_left",
        ("/photos/old-town-inn.png",),
        ("/", "/city/port-meridian?page=2", "/city/karos?stars=4&sort=rating", "/search?q=inn", "/search"),
        (
            "/nope",
            "/city/atlantis",
            "/city/karos?page=3",
            "/city/karos?stars=9",
            "/city/karos/old-town-inn",
            "/city/port-meridian/no-such-inn",
            "/photos/nothing.png",
            "/find?city=atlantis",
        ),
    ),
    "carrental": Spec(
        CarRentalSite,
        "/cars/ambrel",
        "/cars/ambrel/tundra-trek",
        "/api/quote?city=ambrel&car=tundra-trek&date=2026-02-10&days=3",
        "cars_left",
        ("/photos/ambrel/tundra-trek.png",),
        (
            "/",
            "/cars/ambrel?page=2",
            "/cars/ambrel?class=van&sort=price-desc",
            "/locations",
            "/locations?q=karos",
            "/cars/ambrel/tundra-trek?days=7",
        ),
        (
            "/nope",
            "/cars/atlantis",
            "/cars/ambrel?page=9",
            "/cars/ambrel?class=tank",
            "/cars/ambrel/tundra-trek?days=30",
            "/cars/ambrel/lumen-compact",
            "/photos/ambrel/x.png",
            "/pickup?city=atlantis",
        ),
    ),
    "trains": Spec(
        TrainsSite,
        "/stations",
        "/journey/2026-02-12/port-meridian/karos/EX1000",
        "/api/delay?train=EX1000&date=2026-02-12",
        "delay_minutes",
        ("/maps/EX1000.png",),
        (
            "/",
            "/timetable?from=port-meridian&to=karos&date=2026-02-12",
            "/timetable?from=port-meridian&to=karos&date=2026-02-12&show=direct",
            "/station/ostrand",
            "/station/ostrand?date=2026-02-16",
            "/stations?q=bay",
        ),
        (
            "/nope",
            "/timetable?from=port-meridian&to=atlantis&date=2026-02-12",
            "/journey/2026-02-12/karos/velmora/EX1000",
            "/station/atlantis",
            "/maps/XX0000.png",
            "/journey/2026-02-12/port-meridian/karos/EX9999",
        ),
    ),
}
LABELS = tuple(SPECS)


@pytest.fixture(scope="module", params=LABELS)
def spec(request: pytest.FixtureRequest) -> Spec:
    return SPECS[request.param]


def test_site_attributes(spec: Spec) -> None:
    site = spec.cls()
    assert site.keyword in site.label and site.origin == f"http://{site.label}.mmina.test"
    assert [k for k in KEYWORDS if k in site.label] == [site.keyword]


def test_pages_are_html(spec: Spec) -> None:
    site = spec.cls()
    for url in (*spec.pages, spec.listing, spec.detail):
        response = get(site, url)
        assert (response.status, response.content_type) == (200, HTML), url
        page = response.body.decode()
        assert page.startswith("<!DOCTYPE html>") and "<main>" in page, url
        for control_id in re.findall(r'<(?:select|input) id="([^"]+)"', page):
            assert f'<label for="{control_id}">' in page, (url, control_id)


def test_missing_pages_are_404(spec: Spec) -> None:
    site = spec.cls()
    for url in spec.missing:
        response = get(site, url)
        assert (response.status, response.content_type) == (404, HTML), url


def test_images_are_pngs(spec: Spec) -> None:
    site = spec.cls()
    for url in spec.images:
        response = get(site, url)
        assert (response.status, response.content_type) == (200, "image/png"), url
        assert Image.open(io.BytesIO(response.body)).format == "PNG"


def test_api_answers_json(spec: Spec) -> None:
    site = spec.cls()
    response = get(site, spec.xhr + "&_=12345")  # the cache buster is ignored
    assert (response.status, response.content_type) == (200, JSON)
    assert spec.xhr_field in json.loads(response.body)
    missing = get(site, spec.xhr.split("?")[0] + "?nothing=1")
    assert (missing.status, missing.content_type) == (404, JSON)


def test_detail_page_fetches_its_api(spec: Spec) -> None:
    page = text(spec.cls(), spec.detail)
    assert f'data-xhr="{spec.xhr.split("?")[0]}?' in page and "fetch(box.dataset.xhr)" in page
    drifted = spec.cls(1)
    page = text(drifted, follow(drifted, spec.detail)[0])
    assert 'fetch(box.dataset.xhr + "&_=" + Date.now())' in page


def test_same_drift_same_bytes(spec: Spec) -> None:
    for level in (0, 3):
        assert_same_bytes(spec.cls, level, (*spec.pages, spec.listing, spec.detail, *spec.images))


def test_drift_reorders_listing(spec: Spec) -> None:
    def names(level: int) -> list[str]:
        return PageModel(text(spec.cls(level), spec.listing)).links

    assert [n for _, n in names(0)] != [n for _, n in names(3)]


def test_drift_moves_prices_and_ids(spec: Spec) -> None:
    calm, drifted = spec.cls(0), spec.cls(3)
    reference, moved = text(calm, spec.detail), text(drifted, follow(drifted, spec.detail)[0])
    prices = re.compile(r'class="price">([^<]+)<')
    assert prices.findall(reference) != prices.findall(moved) and prices.findall(moved)
    assert re.findall(r' id="([^"]+)"', reference) != re.findall(r' id="([^"]+)"', moved)


def test_old_detail_urls_redirect_from_level_3(spec: Spec) -> None:
    assert get(spec.cls(0), spec.detail).status == 200
    for level in (1, 3):
        site = spec.cls(level)
        response = get(site, spec.detail)
        location = dict(response.headers)["Location"]
        assert response.status == 301
        assert re.search(r"-[0-9a-f]{6}(\?|$)", location), location
        assert location.startswith("/v3/") == (level == 3)
        assert follow(site, spec.detail)[1].status == 200


def test_changing_api_only_changes_under_drift(spec: Spec) -> None:
    answers = assert_changes_only_under_drift(spec.cls, lambda site: spec.xhr, spec.xhr_field)
    values = [answer[spec.xhr_field] for answer in answers]
    assert all(a != b for a, b in pairwise(values)), values


@pytest.mark.parametrize("level", [0, 3])
def test_every_url_resolves_and_carries_only_its_keyword(spec: Spec, level: int) -> None:
    site = spec.cls(level)
    pages = crawl_site(site, limit=120)  # breadth-first over links, images and XHR addresses
    assert len(pages) > 40
    assert_keeps_to_its_keyword(site, pages)


def test_served_by_fixture_web_under_its_host(fixture_web: FixtureWeb, spec: Spec) -> None:
    site = spec.cls()
    reply = served(fixture_web, site, spec.detail)
    assert reply.status == 200 and reply.headers["Content-Type"] == HTML
    assert reply.body == get(site, spec.detail).body


# ---- hop fragments ------------------------------------------------------------------------


def test_fragments_are_well_formed(spec: Spec) -> None:
    site = spec.cls()
    for f in well_formed_fragments(site, steps=(1, 6)):
        assert bool(f.flight) == (site.label == "flights") and not f.shop
        if f.flight:
            assert re.fullmatch(r"[A-Z]{3}", f.flight) and f.flight.lower() in f.reference_url.lower()
        else:
            assert f.city in {c.slug for c in CITIES} and f.city in f.reference_url


def test_fragment_scripts_reach_their_answers(spec: Spec) -> None:
    site = spec.cls()
    for f in site.hop_fragments():
        url, page = run_script(site, f.script)
        assert url == f.reference_url, f.goal
        if f.multimodal:
            assert f.answer.lower() not in page.lower(), f.goal
        else:
            assert f.answer in visible(page), f.goal
