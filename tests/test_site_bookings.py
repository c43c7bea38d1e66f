"""The four booking sites (flights, hotels, car rental, trains): what they share, tested alike.

Pages are fetched with ``site.handle`` (no sockets, so the file stays fast); one test per site
goes through a real ``FixtureWeb`` with a ``Host`` header. Every hop fragment's oracle script
is replayed here at the HTTP level by a tiny form-and-link follower, so a script that names a
missing link or lands on a page other than its ``reference_url`` fails without a browser.
The helpers at the top are imported by the per-site test files.
"""
from __future__ import annotations

import io
import json
import re
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from itertools import pairwise
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

import pytest
from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.base import Request, Response, Site
from mmina.fixtures.web.sites.carrental import CarRentalSite
from mmina.fixtures.web.sites.flights import FlightsSite
from mmina.fixtures.web.sites.hotels import HotelsSite
from mmina.fixtures.web.sites.trains import TrainsSite
from mmina.fixtures.web.world import CITIES
from PIL import Image

HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
KEYWORDS = ("kiwix", "shop", "flight", "hotel", "carrental", "train", "event", "video", "social", "food",
            "exchange", "guide", "recipe")


def get(site: Site, url: str) -> Response:
    """GET a path (with query) or an absolute URL of ``site`` through ``site.handle``."""
    parts = urlsplit(url)
    return site.handle(Request("GET", parts.path or "/", dict(parse_qsl(parts.query, keep_blank_values=True))))


def text(site: Site, url: str) -> str:
    """A page that must answer 200, as text."""
    response = get(site, url)
    assert response.status == 200, (url, response.status)
    return response.body.decode()


def visible(html: str) -> str:
    """Page text without tags, scripts and styles (roughly what a reader sees)."""
    html = re.sub(r"<(style|script)>.*?</\1>", " ", html, flags=re.DOTALL)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@dataclass
class Form:
    """A form as the browser would submit it: controls in document order."""

    action: str
    method: str
    controls: list[dict[str, Any]] = field(default_factory=list)

    def submit_url(self) -> str:
        """The GET address the browser builds from the current values."""
        pairs = [(c["name"], c["value"]) for c in self.controls if c.get("name")]
        return f"{self.action}?{urlencode(pairs)}"


class PageModel(HTMLParser):
    """Links, forms, labels and buttons of a page: enough to follow an oracle script."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.forms: list[Form] = []
        self.labels: dict[str, str] = {}
        self._open: dict[str, Any] | None = None
        self._form: Form | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {name: value or "" for name, value in attrs}
        if tag == "form":
            self._form = Form(a.get("action", ""), a.get("method", "get"))
            self.forms.append(self._form)
        elif tag == "input" and self._form is not None:
            self._form.controls.append({"kind": a.get("type", "text"), "id": a.get("id", ""),
                                        "name": a.get("name", ""), "value": a.get("value", "")})
        elif tag == "select" and self._form is not None:
            self._form.controls.append({"kind": "select", "id": a.get("id", ""), "name": a.get("name", ""),
                                        "value": "", "options": []})
        elif tag in ("a", "label", "option", "button"):
            self._open = {"tag": tag, "attrs": a, "text": ""}

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        if self._open is None or self._open["tag"] != tag:
            return
        opened, self._open = self._open, None
        name = " ".join(opened["text"].split())
        if tag == "a":
            self.links.append((opened["attrs"].get("href", ""), name))
        elif tag == "label":
            self.labels[opened["attrs"].get("for", "")] = name
        elif tag == "option" and self._form is not None:
            select = self._form.controls[-1]
            select["options"].append((opened["attrs"].get("value", ""), name))
            if "selected" in opened["attrs"] or len(select["options"]) == 1:
                select["value"] = opened["attrs"].get("value", "")
        elif tag == "button" and self._form is not None:
            self._form.controls.append({"kind": "button", "text": name})

    def labelled(self, label: str) -> tuple[Form, dict[str, Any]]:
        """The form control whose ``<label>`` reads ``label``."""
        for form in self.forms:
            for control in form.controls:
                if control.get("id") and self.labels.get(control["id"]) == label:
                    return form, control
        raise AssertionError(f"no control labelled {label!r}")

    def button(self, name: str) -> Form:
        """The form holding the button named ``name``."""
        return next(f for f in self.forms if any(c.get("text") == name for c in f.controls))


def follow(site: Site, url: str, limit: int = 5) -> tuple[str, Response]:
    """GET ``url`` and follow redirects; returns the final URL and response."""
    for _ in range(limit):
        response = get(site, url)
        location = dict(response.headers).get("Location")
        if response.status not in (301, 302, 303) or location is None:
            return url, response
        url = urljoin(url, location)
    raise AssertionError(f"too many redirects from {url}")


def run_script(site: Site, script: tuple[dict[str, Any], ...]) -> tuple[str, str]:
    """Replay an oracle script at the HTTP level; returns the final URL and page HTML."""
    url, page, model = "", "", PageModel("")
    for step in script:
        action, target = step["action"], step.get("target", {})
        if action == "goto":
            url = step["url"]
        elif action == "click" and target["role"] == "link":
            href = next((h for h, name in model.links if name == target["name"]), None)
            assert href is not None, f"no link {target['name']!r} on {url}"
            url = urljoin(url, href)
        elif action == "click" and target["role"] == "button":
            url = urljoin(url, model.button(target["name"]).submit_url())
        elif action == "type":
            form, control = model.labelled(target["name"])
            if control["kind"] == "select":
                values = [v for v, label in control["options"] if label == step["text"]]
                assert values, f"no option {step['text']!r} in {target['name']!r}"
                control["value"] = values[0]
            else:
                control["value"] = step["text"]
            if step.get("enter"):
                url = urljoin(url, form.submit_url())
        else:
            assert action == "scroll", step
            continue
        if action != "type" or step.get("enter"):
            assert url.startswith(site.origin + "/"), url
            url, response = follow(site, url)
            assert response.status == 200, (url, response.status)
            page = response.body.decode()
            model = PageModel(page)
    return url, page


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
    "flights": Spec(FlightsSite, "/results?from=PMR&to=CBY&date=2026-02-12", "/flight/2026-02-12/PMR-CBY/SA135",
                    "/api/seats?flight=SA135&date=2026-02-12", "seats_left", ("/logos/SA.png", "/terminal-maps/SA135.png"),
                    ("/", "/airports", "/airports?q=bay", "/airport/CBY", "/airport/CBY?date=2026-02-14",
                     "/results?from=PMR&to=CBY&date=2026-02-12&sort=price"),
                    ("/nope", "/results?from=PMR&to=XXX&date=2026-02-12", "/results?from=PMR&to=CBY&date=2026-03-01",
                     "/results?from=PMR&to=CBY&date=2026-02-12&sort=colour", "/flight/2026-02-12/PMR-OST/SA135",
                     "/flight/2026-02-12/PMR-CBY/ZZ999", "/airport/XYZ", "/logos/ZZ.png", "/terminal-maps/ZZ999.png")),
    "hotels": Spec(HotelsSite, "/city/port-meridian", "/city/port-meridian/old-town-inn",
                   "/api/availability?hotel=old-town-inn&date=2026-02-10", "rooms_left",
                   ("/photos/old-town-inn.png",),
                   ("/", "/city/port-meridian?page=2", "/city/karos?stars=4&sort=rating", "/search?q=inn", "/search"),
                   ("/nope", "/city/atlantis", "/city/karos?page=3", "/city/karos?stars=9", "/city/karos/old-town-inn",
                    "/city/port-meridian/no-such-inn", "/photos/nothing.png", "/find?city=atlantis")),
    "carrental": Spec(CarRentalSite, "/cars/ambrel", "/cars/ambrel/tundra-trek",
                      "/api/quote?city=ambrel&car=tundra-trek&date=2026-02-10&days=3", "cars_left",
                      ("/photos/ambrel/tundra-trek.png",),
                      ("/", "/cars/ambrel?page=2", "/cars/ambrel?class=van&sort=price-desc", "/locations",
                       "/locations?q=karos", "/cars/ambrel/tundra-trek?days=7"),
                      ("/nope", "/cars/atlantis", "/cars/ambrel?page=9", "/cars/ambrel?class=tank",
                       "/cars/ambrel/tundra-trek?days=30", "/cars/ambrel/lumen-compact", "/photos/ambrel/x.png",
                       "/pickup?city=atlantis")),
    "trains": Spec(TrainsSite, "/stations", "/journey/2026-02-12/port-meridian/karos/EX1000",
                   "/api/delay?train=EX1000&date=2026-02-12", "delay_minutes", ("/maps/EX1000.png",),
                   ("/", "/timetable?from=port-meridian&to=karos&date=2026-02-12",
                    "/timetable?from=port-meridian&to=karos&date=2026-02-12&show=direct", "/station/ostrand",
                    "/station/ostrand?date=2026-02-16", "/stations?q=bay"),
                   ("/nope", "/timetable?from=port-meridian&to=atlantis&date=2026-02-12",
                    "/journey/2026-02-12/karos/velmora/EX1000",
                    "/station/atlantis", "/maps/XX0000.png", "/journey/2026-02-12/port-meridian/karos/EX9999")),
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
        first, second = spec.cls(level), spec.cls(level)
        for url in (*spec.pages, spec.listing, spec.detail, *spec.images):
            a, b = get(first, url), get(second, url)
            assert (a.status, a.headers, a.body) == (b.status, b.headers, b.body), (level, url)


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
    calm = spec.cls(0)
    assert len({get(calm, spec.xhr).body for _ in range(4)}) == 1
    live, twin = spec.cls(2), spec.cls(2)
    values = [json.loads(get(live, spec.xhr).body)[spec.xhr_field] for _ in range(6)]
    assert all(a != b for a, b in pairwise(values)), values
    assert values == [json.loads(get(twin, spec.xhr).body)[spec.xhr_field] for _ in range(6)]


def crawl(site: Site, limit: int = 120) -> dict[str, Response]:
    """Breadth-first over the site's own links, images and XHR addresses."""
    seen: dict[str, Response] = {}
    queue = ["/"]
    while queue and len(seen) < limit:
        url = queue.pop(0)
        if url in seen:
            continue
        seen[url] = get(site, url)
        if seen[url].content_type == HTML:
            page = seen[url].body.decode().replace("&amp;", "&")
            queue += [u for u in re.findall(r'(?:href|src|data-xhr)="(/[^"]*)"', page) if u not in seen]
    return seen


@pytest.mark.parametrize("level", [0, 3])
def test_every_url_resolves_and_carries_only_its_keyword(spec: Spec, level: int) -> None:
    site = spec.cls(level)
    pages = crawl(site)
    assert len(pages) > 40
    for url, response in pages.items():
        assert response.status == 200, url
        full = f"{site.label}.mmina.test{url}".lower()
        assert [k for k in KEYWORDS if k in full] == [site.keyword], url


def test_served_by_fixture_web_under_its_host(spec: Spec) -> None:
    site = spec.cls()
    with FixtureWeb() as web:
        request = urllib.request.Request(f"http://127.0.0.1:{web.port}{spec.detail}",
                                         headers={"Host": f"{site.label}.mmina.test"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200 and reply.headers["Content-Type"] == HTML
            assert reply.read() == get(site, spec.detail).body


# ---- hop fragments ------------------------------------------------------------------------

def test_fragments_are_well_formed(spec: Spec) -> None:
    site = spec.cls()
    fragments = site.hop_fragments()
    assert len(fragments) >= 8 and sum(f.multimodal for f in fragments) >= 2
    assert len({f.goal + f.question for f in fragments}) == len(fragments)
    for f in fragments:
        assert f.keyword == site.keyword and f.site == site.label
        assert f.reference_url.startswith(site.origin + "/") and f.keyword in f.reference_url.lower()
        assert f.script[0] == {"action": "goto", "url": f.script[0]["url"]}
        assert f.script[0]["url"].startswith(site.origin + "/")
        assert 1 <= len(f.script) <= 6 and all(step["action"] != "stop" for step in f.script)
        assert f.answer and f.answer.lower() not in (f.goal + f.question).lower()
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
