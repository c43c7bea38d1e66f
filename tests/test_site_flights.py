"""``flights.mmina.test``: search, sorting, codeshare logos, terminal maps and boards."""

from __future__ import annotations

import json
import re

from mmina.fixtures.web.base import Request
from mmina.fixtures.web.sites.flights import AIRLINES, FLIGHTS, FlightsSite, render_logo, route_flights
from mmina.fixtures.web.world import CITIES_BY_AIRPORT
from tests.site_testing import PageModel, get, text, visible

RESULTS = "/results?from=PMR&to=CBY&date=2026-02-12"


def test_search_form_builds_a_results_url_with_both_codes() -> None:
    form = PageModel(text(FlightsSite(), "/")).button("Search flights")
    labels = [c["options"][0][1] for c in form.controls if c["kind"] == "select"]
    assert labels == ["Port Meridian (PMR)", "Port Meridian (PMR)", "Tuesday 10 February 2026"]
    assert form.submit_url() == "/results?from=PMR&to=CBY&date=2026-02-10"


def column(page: str, index: int) -> list[str]:
    """One column of the results table, as text."""
    rows = re.findall(r"<tr>(.*?)</tr>", page.split("<tbody>")[1])
    return [visible(re.findall(r"<td[^>]*>(.*?)</td>", row)[index]).strip() for row in rows]


def test_sort_dropdown_orders_results() -> None:
    site = FlightsSite()
    prices = [int(p.strip("$")) for p in column(text(site, RESULTS + "&sort=price"), 6)]
    assert prices == sorted(prices) and len(prices) == len(
        route_flights(CITIES_BY_AIRPORT["PMR"], CITIES_BY_AIRPORT["CBY"])
    )
    assert column(text(site, RESULTS + "&sort=departure"), 2) == sorted(column(text(site, RESULTS), 2))
    assert column(text(site, RESULTS), 2) != sorted(column(text(site, RESULTS), 2))  # "Recommended" is opaque


def test_same_airport_twice_is_a_400() -> None:
    assert get(FlightsSite(), "/results?from=PMR&to=PMR&date=2026-02-12").status == 400


def test_operator_is_only_in_the_logo() -> None:
    site = FlightsSite()
    codeshares = [f for f in FLIGHTS if f.operator != f.airline]
    assert len(codeshares) > 20
    for flight in codeshares[:10]:
        page = text(
            site, f"/flight/2026-02-11/{flight.origin.airport}-{flight.destination.airport}/{flight.ident}"
        )
        assert flight.operator.name not in page and flight.airline.name in page
        assert f'<img src="/logos/{flight.operator.code}.png" alt="Operating airline logo"' in page
    assert len({render_logo(airline) for airline in AIRLINES}) == len(AIRLINES)


def test_gate_is_only_on_the_terminal_map() -> None:
    site = FlightsSite()
    for flight in FLIGHTS[:20]:
        page = text(
            site, f"/flight/2026-02-11/{flight.origin.airport}-{flight.destination.airport}/{flight.ident}"
        )
        assert flight.gate not in visible(page)
    maps = {get(site, f"/terminal-maps/{f.ident}.png").body for f in FLIGHTS[:20]}
    assert len(maps) == len({(f.gate, f.terminal) for f in FLIGHTS[:20]})


def test_departure_board_is_long() -> None:
    page = text(FlightsSite(), "/airport/OST?date=2026-02-13")
    assert page.count("<tr>") > 25 and "Friday 13 February 2026" in page


def test_airport_search_accepts_get_and_post() -> None:
    site = FlightsSite()
    assert "Calder Bay (CBY)" in text(site, "/airports?q=calder") and "Karos" not in visible(
        text(site, "/airports?q=calder")
    )
    posted = site.handle(Request("POST", "/airports", form={"q": "calder"}))
    assert posted.status == 200 and b"Calder Bay (CBY)" in posted.body


def test_seats_api_and_prices_drift() -> None:
    calm, drifted = FlightsSite(0), FlightsSite(2)
    url = "/api/seats?flight=SA135&date=2026-02-12"
    assert json.loads(get(calm, url).body) == json.loads(get(calm, url).body)
    assert 1 <= json.loads(get(drifted, url).body)["seats_left"] <= 9
    assert "prices updated 2026-01-15 09:30 UTC" in text(calm, RESULTS)
    assert "prices updated 2026-01-15 09:30 UTC" not in text(drifted, RESULTS)
