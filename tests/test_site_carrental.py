"""``carrental.mmina.test``: pick-up search, class filter, vehicle pages, the quote API, photos."""

from __future__ import annotations

import json
import re

from mmina.fixtures.web.sites.carrental import CARS, CARS_BY_KEY, CarRentalSite, render_car
from tests.site_testing import PageModel, get, text, visible


def test_search_form_redirects_to_the_city_offers() -> None:
    site = CarRentalSite()
    form = PageModel(text(site, "/")).button("Search cars")
    assert form.submit_url() == "/pickup?city=port-meridian&date=2026-02-10&class=all"
    response = get(site, "/pickup?city=ambrel&date=2026-02-13&class=suv")
    assert (
        response.status == 302
        and dict(response.headers)["Location"] == "/cars/ambrel?date=2026-02-13&class=suv"
    )


def test_class_filter_sort_and_pagination() -> None:
    site = CarRentalSite()
    vans = text(site, "/cars/tessaly?class=van")
    assert "Van" in vans and "Economy" not in visible(vans).split("Sort by")[1]
    prices = [
        float(p.replace(",", ""))
        for p in re.findall(r'class="price">[A-Z]{3} ([\d,.]+)<', text(site, "/cars/karos"))
    ]
    assert prices == sorted(prices) and len(prices) == 5
    second = text(site, "/cars/karos?page=2")
    assert len(re.findall(r'class="price">', second)) == 3 and "Previous page" in second


def test_quote_api_totals_the_day_price() -> None:
    site = CarRentalSite()
    quote = json.loads(get(site, "/api/quote?city=ambrel&car=tundra-trek&date=2026-02-10&days=4").body)
    assert quote["total"] == "EST 292.00" and quote["days"] == 4  # 4 x EST 73.00
    page = text(site, "/cars/ambrel/tundra-trek?days=4")
    assert "EST 73.00" in page and "days=4" in page and 'data-render="quote"' in page


def test_colour_and_plate_are_only_in_the_photo() -> None:
    site = CarRentalSite()
    for car in CARS[:16]:
        page = text(site, f"/cars/{car.city.slug}/{car.slug}")
        assert re.search(rf"\b{car.colour}\b", visible(page).lower()) is None and car.plate not in page
    assert render_car("suv", "pink", "AM 1000") != render_car("suv", "teal", "AM 1000")
    assert get(site, "/photos/ambrel/tundra-trek.png").body == render_car(
        "suv", CARS_BY_KEY[("ambrel", "tundra-trek")].colour, CARS_BY_KEY[("ambrel", "tundra-trek")].plate
    )


def test_locations_search_and_desk_hours_drift() -> None:
    site = CarRentalSite()
    assert "Car hire in Karos" in text(site, "/locations?q=KRS")
    assert "No location matches" in text(site, "/locations?q=atlantis")
    assert "prices checked 2026-01-15 09:30 UTC" in text(site, "/cars/karos")
    assert "prices checked 2026-01-15 09:30 UTC" not in text(CarRentalSite(1), "/cars/karos")
