"""The events site (``events.mmina.test``) at the HTTP level: routes, drift and hop fragments.

Requests go straight to ``EventsSite.handle``; one test goes through a real ``FixtureWeb`` to
check the site is discovered and served under its host name.
"""

from __future__ import annotations

import re

import pytest

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.sites._events_data import EVENTS
from mmina.fixtures.web.sites.events import EVENTS_BY_SLUG, EventsSite, event_path
from mmina.fixtures.web.world import CITIES
from tests.site_testing import (
    HTML,
    JSON,
    assert_changes_only_under_drift,
    assert_keeps_to_its_keyword,
    assert_page,
    assert_redirect,
    assert_same_bytes,
    crawl_site,
    get,
    reference_page,
    served,
    well_formed_fragments,
)

# Every page, image and link reachable from the home page and the city listings' filters.
SEEDS = ("/", "/search?q=festival", "/calder-bay?sort=price", "/ostrand?category=concerts&date=2026-02-11")


@pytest.fixture(scope="module")
def site() -> EventsSite:
    return EventsSite(0)


@pytest.mark.parametrize(
    ("url", "status", "content_type", "expected"),
    [
        ("/", 200, HTML, "Events in Calder Bay"),
        ("/calder-bay", 200, HTML, "Showing 1\u20134 of 9 events"),
        ("/calder-bay?page=3", 200, HTML, "Previous page"),
        ("/calder-bay?date=2026-02-12&category=theatre", 200, HTML, "Midwinter Masque"),
        ("/calder-bay?category=concerts&date=2026-02-10", 200, HTML, "No events match"),
        ("/calder-bay/e/midwinter-masque", 200, HTML, "55.00 EST"),
        ("/search?q=porcelain", 200, HTML, "1 event found"),
        ("/search", 200, HTML, "Type an event"),
        ("/posters/midwinter-masque.png", 200, "image/png", ""),
        ("/api/tickets?event=midwinter-masque", 200, JSON, "tickets_left"),
        ("/favicon.ico", 200, "image/x-icon", ""),
    ],
)
def test_routes(site: EventsSite, url: str, status: int, content_type: str, expected: str) -> None:
    assert_page(get(site, url), status, content_type, expected)


@pytest.mark.parametrize(
    "url",
    [
        "/atlantis",
        "/calder-bay?page=4",
        "/calder-bay?page=x",
        "/calder-bay/e/isla-marrow",
        "/karos/e/nothing",
        "/calder-bay/e/midwinter-masque-0123abcd",
        "/posters/nothing.png",
        "/v3/calder-bay/e/midwinter-masque",
    ],
)
def test_unknown_pages_are_404(site: EventsSite, url: str) -> None:
    assert_page(get(site, url), 404, HTML)


def test_api_errors_and_methods(site: EventsSite) -> None:
    assert get(site, "/api/tickets?event=nothing").status == 404
    assert get(site, "/calder-bay", "POST").status == 405
    posted = get(site, "/search", form={"q": "Porcelain"})
    assert posted.status == 200 and b"The Porcelain Road" in posted.body


def test_listing_has_labelled_dropdowns_and_pagination(site: EventsSite) -> None:
    text = get(site, "/port-meridian").body.decode()
    for label in ("Date", "Category", "Sort by"):
        assert re.search(rf'<label for="([^"]+)">{label}</label> <select id="\1"', text)
    assert "Next page" in text and "Page 1 of 3" in text
    assert len(re.findall(r'<li class="card">', text)) == 4


def test_price_sort_puts_the_cheapest_first(site: EventsSite) -> None:
    text = get(site, "/ostrand?category=concerts&sort=price").body.decode()
    assert (
        text.index("Isla Marrow")
        < text.index("The Quay Street Swing Band")
        < text.index("The Northern Lamps")
    )


@pytest.mark.parametrize("drift", [0, 3])
def test_every_url_is_served_and_keeps_to_its_keyword(drift: int) -> None:
    site = EventsSite(drift)
    pages = crawl_site(site, SEEDS)
    assert len(pages) > 2 * len(EVENTS)  # every event page and poster
    assert_keeps_to_its_keyword(site, pages)


def test_same_drift_same_bytes() -> None:
    urls = [
        "/",
        "/calder-bay",
        "/calder-bay?sort=price",
        "/search?q=festival",
        "/posters/pilot-whale.png",
        "/api/tickets?event=pilot-whale",
    ]
    for drift in (0, 2):
        pilot_whale = event_path(EventsSite(drift).drift, EVENTS_BY_SLUG["pilot-whale"])
        assert_same_bytes(EventsSite, drift, [*urls, pilot_whale])


def test_drift_changes_order_prices_ids_and_urls() -> None:
    calm, drifted = EventsSite(0), EventsSite(1)
    calm_text, drifted_text = (get(s, "/tessaly").body.decode() for s in (calm, drifted))
    titles = re.compile(r"<h2><a [^>]+>([^<]+)</a>")
    assert titles.findall(calm_text) != titles.findall(drifted_text)
    assert 'id="filter-date"' in calm_text and 'id="filter-date-' in drifted_text
    assert "2026-01-15 09:30 UTC" in calm_text and "2026-01-16" in drifted_text
    masque = EVENTS_BY_SLUG["midwinter-masque"]
    path = event_path(drifted.drift, masque)
    assert re.fullmatch(r"/calder-bay/e/midwinter-masque-[0-9a-f]{8}", path)
    page = get(drifted, path).body.decode()
    assert "55.00 EST" not in page and "EST" in page
    assert "&_=' + Date.now()" in page
    assert "Date.now()" not in get(calm, "/calder-bay/e/midwinter-masque").body.decode()
    assert get(drifted, "/calder-bay/e/midwinter-masque").status == 404


def test_old_addresses_redirect_from_level_3() -> None:
    moved = EventsSite(3)
    target = event_path(moved.drift, EVENTS_BY_SLUG["isla-marrow"])
    assert target.startswith("/v3/ostrand/e/isla-marrow-")
    for old in ("/ostrand/e/isla-marrow", event_path(EventsSite(1).drift, EVENTS_BY_SLUG["isla-marrow"])):
        assert_redirect(get(moved, old), target)
    assert get(moved, target).status == 200


def test_tickets_left_changes_on_every_call_only_under_drift() -> None:
    assert_changes_only_under_drift(EventsSite, lambda site: "/api/tickets?event=juno-vale", "tickets_left")


def test_posters_are_distinct_pngs(site: EventsSite) -> None:
    bodies = {get(site, f"/posters/{e.slug}.png").body for e in EVENTS[:9]}
    assert len(bodies) == 9 and all(b.startswith(b"\x89PNG") for b in bodies)


def test_fragments_are_well_formed(site: EventsSite) -> None:
    for fragment in well_formed_fragments(site):
        assert fragment.keyword == "event" and "event" in fragment.reference_url
        assert fragment.site == "events" and fragment.city in {c.slug for c in CITIES}
        assert fragment.city in fragment.reference_url
        assert fragment.script[0]["url"].startswith("http://events.mmina.test/")
        text = reference_page(site, fragment).lower()
        assert (fragment.answer.lower() in text) != fragment.multimodal, fragment.goal


def test_served_by_the_fixture_web(fixture_web: FixtureWeb, site: EventsSite) -> None:
    reply = served(fixture_web, site, "/karos")
    assert reply.status == 200 and b"Events in Karos" in reply.body
