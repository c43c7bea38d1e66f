"""``trains.mmina.test``: planner, timetables, journey pages, route maps, boards and delays."""

from __future__ import annotations

import json
from datetime import date

from mmina.fixtures.web.sites.trains import SERVICES, TrainsSite, render_route_map, station
from tests.site_testing import PageModel, get, text, visible

TIMETABLE = "/timetable?from=port-meridian&to=calder-bay&date=2026-02-11"


def test_planner_builds_a_timetable_url_with_both_cities() -> None:
    form = PageModel(text(TrainsSite(), "/")).button("Find trains")
    assert form.submit_url() == "/timetable?from=port-meridian&to=karos&date=2026-02-10"


def test_direct_filter_and_same_station() -> None:
    site = TrainsSite()
    everything, direct = visible(text(site, TIMETABLE)), visible(text(site, TIMETABLE + "&show=direct"))
    assert "1 change at" in everything and "1 change at" not in direct and "Direct" in direct
    assert get(site, "/timetable?from=karos&to=karos&date=2026-02-12").status == 400


def test_halts_and_line_colour_are_only_on_the_map() -> None:
    site = TrainsSite()
    for service in SERVICES[:20]:
        page = visible(
            text(
                site, f"/journey/2026-02-12/{service.origin.slug}/{service.destination.slug}/{service.ident}"
            )
        )
        assert all(halt not in page for halt in service.halts) and service.line not in page.lower()
    assert render_route_map(("A", "B", "C"), "teal") != render_route_map(("A", "B", "C", "D"), "teal")
    assert get(site, f"/maps/{SERVICES[0].ident}.png").content_type == "image/png"


def test_station_board_is_long_and_timestamped() -> None:
    page = text(TrainsSite(), "/station/ostrand?date=2026-02-16")
    assert page.count("<tr>") > 30 and "updated 2026-01-15 09:30 UTC" in page
    assert "updated 2026-01-15 09:30 UTC" not in text(TrainsSite(3), "/station/ostrand?date=2026-02-16")


def test_weekend_fares_and_delay_api() -> None:
    site = TrainsSite()
    service = SERVICES[0]
    assert site.fare_cents(service, date(2026, 2, 14)) == service.fare_cents - 100  # a Saturday
    assert site.fare_cents(service, date(2026, 2, 12)) == service.fare_cents
    delay = json.loads(get(site, f"/api/delay?train={service.ident}&date=2026-02-12").body)
    assert delay["train"] == service.number and 0 <= delay["delay_minutes"] < 16
    assert station(service.origin) == "Port Meridian Central"
