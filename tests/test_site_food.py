"""The food site (``food.mmina.test``) at the HTTP level: routes, drift and hop fragments.

Requests go straight to ``FoodSite.handle``; one test goes through a real ``FixtureWeb`` to
check the site is discovered and served under its host name.
"""

from __future__ import annotations

import re

import pytest

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.sites._food_data import RESTAURANTS
from mmina.fixtures.web.sites.food import RESTAURANTS_BY_SLUG, FoodSite, restaurant_path
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

RAMEN = RESTAURANTS_BY_SLUG["bay-ramen"]
# Every page, photo and link reachable from the home page and a few sorted listings.
SEEDS = ("/", "/search?q=soup", "/calder-bay/restaurants?sort=rating", "/ostrand/restaurants?cuisine=italian")


@pytest.fixture(scope="module")
def site() -> FoodSite:
    return FoodSite(0)


@pytest.mark.parametrize(
    ("url", "status", "content_type", "expected"),
    [
        ("/", 200, HTML, "Restaurants in Calder Bay"),
        ("/calder-bay/restaurants", 200, HTML, "6 restaurants"),
        ("/calder-bay/restaurants?page=2", 200, HTML, "Previous page"),
        ("/calder-bay/restaurants?cuisine=noodles", 200, HTML, "Bay Ramen"),
        ("/calder-bay/restaurants?cuisine=norvalean", 200, HTML, "No restaurants match"),
        ("/calder-bay/r/bay-ramen", 200, HTML, "Crab fried rice"),
        ("/search?q=market%20hall", 200, HTML, "1 restaurant"),
        ("/search", 200, HTML, "Type a restaurant"),
        ("/photos/bay-ramen/1.png", 200, "image/png", ""),
        ("/api/wait?r=bay-ramen", 200, JSON, "wait_minutes"),
    ],
)
def test_routes(site: FoodSite, url: str, status: int, content_type: str, expected: str) -> None:
    assert_page(get(site, url), status, content_type, expected)


@pytest.mark.parametrize(
    "url",
    [
        "/atlantis/restaurants",
        "/calder-bay",
        "/calder-bay/restaurants?page=3",
        "/karos/r/bay-ramen",
        "/calder-bay/r/nothing",
        "/calder-bay/r/bay-ramen-0123abcd",
        "/v3/calder-bay/r/bay-ramen",
        "/photos/bay-ramen/4.png",
        "/photos/nothing/1.png",
    ],
)
def test_unknown_pages_are_404(site: FoodSite, url: str) -> None:
    assert_page(get(site, url), 404, HTML)


def test_api_errors_and_methods(site: FoodSite) -> None:
    assert get(site, "/api/wait?r=nothing").status == 404
    assert get(site, "/calder-bay/restaurants", "POST").status == 405
    posted = get(site, "/search", form={"q": "Bay Ramen"})
    assert posted.status == 200 and b"/calder-bay/r/bay-ramen" in posted.body


def test_restaurant_page_has_hours_photos_and_a_long_menu(site: FoodSite) -> None:
    text = get(site, "/calder-bay/r/bay-ramen").body.decode()
    assert text.count('<th scope="row">') == 7 + len(RAMEN.menu)
    assert text.count('alt="dish photo"') == 3 and "Thursday</th><td>Closed" in text
    assert len(re.sub(r"<[^>]+>", "", text)) > 1500


def test_filters_sort_and_labelled_dropdowns(site: FoodSite) -> None:
    text = get(site, "/brightwater/restaurants?cuisine=seafood&sort=rating").body.decode()
    for label in ("Cuisine", "Sort by"):
        assert re.search(rf'<label for="([^"]+)">{label}</label> <select id="\1"', text)
    assert text.index("Tidewater Grill") < text.index("Mudflat Oysters") and "Lucky Noodle" not in text


@pytest.mark.parametrize("drift", [0, 3])
def test_every_url_is_served_and_keeps_to_its_keyword(drift: int) -> None:
    site = FoodSite(drift)
    pages = crawl_site(site, SEEDS)
    assert len(pages) > 4 * len(RESTAURANTS)  # every restaurant page and its three photos
    assert_keeps_to_its_keyword(site, pages)


def test_same_drift_same_bytes() -> None:
    for drift in (0, 2):
        assert_same_bytes(
            FoodSite,
            drift,
            (
                "/",
                "/karos/restaurants",
                "/karos/restaurants?sort=price",
                "/search?q=soup",
                restaurant_path(FoodSite(drift).drift, RAMEN),
                "/photos/bay-ramen/2.png",
                "/api/wait?r=bay-ramen",
            ),
        )


def test_drift_changes_order_prices_ids_and_urls() -> None:
    calm, drifted = FoodSite(0), FoodSite(1)
    names = re.compile(r"<h2><a [^>]+>([^<]+)</a>")
    listing = "/port-meridian/restaurants"
    assert names.findall(get(calm, listing).body.decode()) != names.findall(
        get(drifted, listing).body.decode()
    )
    path = restaurant_path(drifted.drift, RAMEN)
    assert re.fullmatch(r"/calder-bay/r/bay-ramen-[0-9a-f]{8}", path)
    page, calm_page = get(drifted, path).body.decode(), get(calm, "/calder-bay/r/bay-ramen").body.decode()
    assert "21.50 EST" in calm_page and "21.50 EST" not in page
    assert 'id="wait-' in page and "&_=' + Date.now()" in page and "Date.now()" not in calm_page
    assert get(drifted, "/calder-bay/r/bay-ramen").status == 404


def test_old_addresses_redirect_from_level_3() -> None:
    moved = FoodSite(3)
    target = restaurant_path(moved.drift, RAMEN)
    assert target.startswith("/v3/calder-bay/r/bay-ramen-")
    for old in ("/calder-bay/r/bay-ramen", restaurant_path(FoodSite(1).drift, RAMEN)):
        assert_redirect(get(moved, old), target)
    assert get(moved, target).status == 200


def test_wait_time_changes_on_every_call_only_under_drift() -> None:
    assert_changes_only_under_drift(FoodSite, lambda site: "/api/wait?r=il-faro", "wait_minutes")


def test_fragments_are_well_formed(site: FoodSite) -> None:
    for fragment in well_formed_fragments(site):
        assert fragment.keyword == "food" and fragment.site == "food"
        assert fragment.city in {c.slug for c in CITIES} and f"/{fragment.city}/r/" in fragment.reference_url
        assert fragment.script[0]["url"].startswith("http://food.mmina.test/")
        text = reference_page(site, fragment).lower()
        assert (fragment.answer.lower() in text) != fragment.multimodal, fragment.goal


def test_served_by_the_fixture_web(fixture_web: FixtureWeb, site: FoodSite) -> None:
    reply = served(fixture_web, site, "/karos/restaurants")
    assert reply.status == 200 and b"Restaurants in Karos" in reply.body
