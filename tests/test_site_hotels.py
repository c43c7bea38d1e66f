"""``hotels.mmina.test``: city listings, filters, pagination, hotel pages, photos and the APIs."""

from __future__ import annotations

import json
import re

from mmina.fixtures.web.base import Request
from mmina.fixtures.web.sites.hotels import HOTELS, HotelsSite, render_photo
from tests.site_testing import PageModel, get, text, visible


def test_search_form_redirects_to_the_city_listing() -> None:
    site = HotelsSite()
    form = PageModel(text(site, "/")).button("Find hotels")
    assert form.submit_url() == "/find?city=port-meridian&checkin=2026-02-10"
    response = get(site, "/find?city=calder-bay&checkin=2026-02-12")
    assert (
        response.status == 302 and dict(response.headers)["Location"] == "/city/calder-bay?checkin=2026-02-12"
    )
    assert "check-in Thursday 12 February 2026" in text(site, "/city/calder-bay?checkin=2026-02-12")


def hotel_names(page: str) -> list[str]:
    return re.findall(r"<h2><a [^>]+>([^<]+)</a></h2>", page)


def test_stars_filter_and_price_sort() -> None:
    site = HotelsSite()
    page = text(site, "/city/karos?stars=4&sort=price")
    names = hotel_names(page)
    assert names and all(h.stars == 4 for h in HOTELS if h.name in names)
    prices = [float(p.replace(",", "")) for p in re.findall(r"from [A-Z]{3} ([\d,.]+) per night", page)]
    assert prices == sorted(prices)
    assert "No hotels match" in text(site, "/city/karos?stars=2") or hotel_names(
        text(site, "/city/karos?stars=2")
    )


def test_pagination_keeps_filters() -> None:
    site = HotelsSite()
    first, second = text(site, "/city/ostrand?sort=rating"), text(site, "/city/ostrand?sort=rating&page=2")
    assert len(hotel_names(first)) == 4 and len(hotel_names(second)) == 2
    assert (
        'href="/city/ostrand?checkin=2026-02-10&amp;stars=any&amp;sort=rating&amp;page=2">Next page' in first
    )
    assert "Previous page" in second and "Next page" not in second


def test_hotel_page_loads_reviews_and_availability_by_fetch() -> None:
    site = HotelsSite()
    hotel = HOTELS[1]
    page = text(site, f"/city/{hotel.city.slug}/{hotel.slug}")
    reviews = json.loads(get(site, f"/api/reviews?hotel={hotel.slug}&lang=en").body)
    assert reviews["count"] == len(hotel.reviews) > 0
    assert all(r["author"] not in page for r in reviews["reviews"])
    assert 'data-xhr="/api/reviews?hotel=old-town-inn&amp;lang=en"' in page
    assert (
        json.loads(get(site, "/api/availability?hotel=old-town-inn&date=2026-02-14").body)["rooms_left"] >= 1
    )


def test_roof_and_pool_are_only_in_the_photo() -> None:
    site = HotelsSite()
    for hotel in HOTELS[:12]:
        words = visible(text(site, f"/city/{hotel.city.slug}/{hotel.slug}")).lower()
        assert re.search(rf"\b{hotel.photo.roof}\b", words) is None
        assert hotel.photo.pool is None or re.search(rf"\b{hotel.photo.pool}\b", words) is None
    assert len({render_photo(h.photo) for h in HOTELS}) > 40


def test_search_accepts_get_and_post() -> None:
    site = HotelsSite()
    assert "Nightjar House" in text(site, "/search?q=nightjar")
    posted = site.handle(Request("POST", "/search", form={"q": "nightjar"}))
    assert posted.status == 200 and b"Nightjar House" in posted.body
    assert "No hotels match" in text(site, "/search?q=zzz")


def test_listing_timestamp_drifts() -> None:
    assert "prices checked 2026-01-15 09:30 UTC" in text(HotelsSite(0), "/city/karos")
    assert "prices checked 2026-01-15 09:30 UTC" not in text(HotelsSite(2), "/city/karos")


def test_slugs_cannot_be_mistaken_for_drift_tokens() -> None:
    assert not [h.slug for h in HOTELS if re.search(r"-[0-9a-f]{6}$", h.slug)]
    assert len({h.slug for h in HOTELS}) == len(HOTELS)
