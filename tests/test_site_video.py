"""The video site (``video.mmina.test``) at the HTTP level: routes, drift and hop fragments.

Requests go straight to ``VideoSite.handle``; one test goes through a real ``FixtureWeb`` to
check the site is discovered and served under its host name.
"""
from __future__ import annotations

import json
import re
import urllib.request
from urllib.parse import parse_qsl, urlsplit

import pytest

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.base import Request, Response
from mmina.fixtures.web.sites._video_data import VIDEOS
from mmina.fixtures.web.sites.video import VIDEOS_BY_TITLE, VideoSite, video_id, watch_path

HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
KEYWORDS = ("kiwix", "shop", "flight", "hotel", "carrental", "train", "event", "video", "social", "food",
            "exchange", "guide", "recipe")
LINK = re.compile(r'(?:href|src)="([^"#]+)"')
RADIO = VIDEOS_BY_TITLE["Repairing a 1970s valve radio"]
DEPOT = VIDEOS_BY_TITLE["Inside the Tessaly tram depot"]


def get(site: VideoSite, url: str, method: str = "GET", form: dict[str, str] | None = None) -> Response:
    """Answer one request for a site-relative URL (query string allowed)."""
    parts = urlsplit(url)
    return site.handle(Request(method, parts.path, dict(parse_qsl(parts.query)), form or {}))


def crawl(site: VideoSite) -> dict[str, Response]:
    """Every page, thumbnail and link reachable from the home page and a few sorted listings."""
    seen: dict[str, Response] = {}
    queue = ["/", "/results?q=the&sort=views", "/results?q=a&sort=date", "/@streetbeats?sort=oldest"]
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        seen[url] = response = get(site, url)
        if response.content_type == HTML:
            queue += [link.replace("&amp;", "&") for link in LINK.findall(response.body.decode())
                      if link.startswith("/")]
    return seen


def fetched(site: VideoSite, vid: str) -> str:
    """Everything a watch page's scripts fetch: all comment pages and the live count."""
    pages = [get(site, f"/api/comments?v={vid}&page={n}").body.decode() for n in (1, 2)]
    return " ".join(pages + [get(site, f"/api/live?v={vid}").body.decode()])


@pytest.fixture(scope="module")
def site() -> VideoSite:
    return VideoSite(0)


@pytest.mark.parametrize(("url", "status", "content_type", "expected"), [
    ("/", 200, HTML, "Trending on StreamTide"),
    (f"/watch?v={RADIO.vid}", 200, HTML, "Repairing a 1970s valve radio"),
    ("/@norvalenature", 200, HTML, "238,000 subscribers"),
    ("/@reedandthread?page=2", 200, HTML, "Folding paper birds"),
    ("/@norvalenature?sort=popular", 200, HTML, "Most popular"),
    ("/place/calder-bay", 200, HTML, "Videos filmed in Calder Bay"),
    ("/results?q=tram", 200, HTML, "2 videos"),
    ("/results?q=zzzz", 200, HTML, "No videos found"),
    ("/results", 200, HTML, "Type what you want"),
    (f"/thumbs/{RADIO.vid}.png", 200, "image/png", ""),
    (f"/api/comments?v={DEPOT.vid}&page=2", 200, JSON, "Line 14"),
    (f"/api/live?v={DEPOT.vid}", 200, JSON, "watching"),
])
def test_routes(site: VideoSite, url: str, status: int, content_type: str, expected: str) -> None:
    response = get(site, url)
    assert (response.status, response.content_type) == (status, content_type)
    assert expected.encode() in response.body
    if content_type == HTML:
        assert response.body.startswith(b"<!DOCTYPE html>")


@pytest.mark.parametrize("url", [
    "/nothing", "/watch", "/watch?v=nothing", f"/v3/watch?v={RADIO.vid}", "/@nobody", "/@reedandthread?page=3",
    "/place/atlantis", "/place/velmora-x", "/thumbs/nothing.png",
])
def test_unknown_pages_are_404(site: VideoSite, url: str) -> None:
    response = get(site, url)
    assert (response.status, response.content_type) == (404, HTML)


def test_api_errors_and_methods(site: VideoSite) -> None:
    assert get(site, "/api/comments?v=nothing").status == 404
    assert get(site, f"/api/comments?v={RADIO.vid}&page=3").status == 404
    assert get(site, "/api/live?v=nothing").status == 404
    assert get(site, "/@norvalenature", "POST").status == 405
    posted = get(site, "/results", "POST", {"q": "valve"})
    assert posted.status == 200 and RADIO.title.encode() in posted.body


def test_sorting_and_labelled_dropdowns(site: VideoSite) -> None:
    text = get(site, "/results?q=tram&sort=views").body.decode()
    assert re.search(r'<label for="([^"]+)">Sort by</label> <select id="\1"', text)
    assert text.index("Karos tea terraces") < text.index("Inside the Tessaly tram depot")
    popular = get(site, "/@norvalenature?sort=popular").body.decode()
    assert re.search(r'<label for="([^"]+)">Sort videos</label> <select id="\1"', popular)
    assert popular.index("Ospreys of Lake Ambrel") < popular.index("Moss and lichen")


@pytest.mark.parametrize("drift", [0, 3])
def test_every_url_is_served_and_keeps_to_its_keyword(drift: int) -> None:
    pages = crawl(VideoSite(drift))
    assert len(pages) > 2 * len(VIDEOS)  # every watch page and thumbnail
    foreign = [k for k in KEYWORDS if k != "video"]
    for url, response in pages.items():
        assert response.status == 200, url
        assert not [k for k in foreign if k in url.lower()], url


def test_same_drift_same_bytes() -> None:
    for drift in (0, 2):
        first, second = VideoSite(drift), VideoSite(drift)
        vid = video_id(first.drift, RADIO)
        for url in ("/", "/results?q=the", "/@streetbeats", "/place/ostrand", watch_path(first.drift, RADIO),
                    f"/thumbs/{vid}.png", f"/api/comments?v={vid}", f"/api/live?v={vid}"):
            assert get(first, url).body == get(second, url).body, (drift, url)


def test_drift_changes_order_views_ids_and_urls() -> None:
    calm, drifted = VideoSite(0), VideoSite(1)
    titles = re.compile(r"<h3><a [^>]+>([^<]+)</a>")
    assert titles.findall(get(calm, "/").body.decode()) != titles.findall(get(drifted, "/").body.decode())
    path = watch_path(drifted.drift, RADIO)
    assert re.fullmatch(r"/watch\?v=[0-9a-f]{11}", path)
    page = get(drifted, path).body.decode()
    assert "1,614,389" not in page and re.search(r"<dt>Views</dt><dd>[\d,]+</dd>", page)
    assert 'id="comments-' in page and "&_=' + Date.now()" in page
    assert "&_=' + Date.now()" not in get(calm, watch_path(calm.drift, RADIO)).body.decode()
    assert get(drifted, f"/watch?v={RADIO.vid}").status == 404


def test_old_addresses_redirect_from_level_3() -> None:
    moved = VideoSite(3)
    target = watch_path(moved.drift, RADIO)
    assert target.startswith("/v3/watch?v=")
    for old in (f"/watch?v={RADIO.vid}", f"/watch?v={video_id(moved.drift, RADIO)}"):
        response = get(moved, old)
        assert response.status == 301 and dict(response.headers)["Location"] == target
    assert get(moved, target).status == 200


def test_watching_now_changes_on_every_call_only_under_drift() -> None:
    def calls(site: VideoSite) -> list[int]:
        vid = video_id(site.drift, RADIO)
        return [json.loads(get(site, f"/api/live?v={vid}").body)["watching"] for _ in range(6)]

    assert len(set(calls(VideoSite(0)))) == 1
    drifted = calls(VideoSite(2))
    assert len(set(drifted)) > 1 and drifted == calls(VideoSite(2))


def test_comments_come_in_pages(site: VideoSite) -> None:
    first = json.loads(get(site, f"/api/comments?v={DEPOT.vid}").body)
    assert (first["page"], first["pages"], first["total"], len(first["comments"])) == (1, 2, 16, 8)
    assert first["comments"][0]["pinned"] and "Line 14" not in json.dumps(first)


def test_fragments_are_well_formed(site: VideoSite) -> None:
    fragments = site.hop_fragments()
    assert len(fragments) >= 8 and sum(f.multimodal for f in fragments) >= 2
    for fragment in fragments:
        assert fragment.keyword == "video" and fragment.site == "video"
        assert not fragment.city or f"/place/{fragment.city}" in fragment.reference_url
        assert fragment.script[0]["action"] == "goto"
        assert fragment.script[0]["url"].startswith("http://video.mmina.test/")
        assert all(step["action"] != "stop" for step in fragment.script) and 2 <= len(fragment.script) <= 5
        assert fragment.answer.lower() not in fragment.goal.lower()
        url = fragment.reference_url.removeprefix("http://video.mmina.test")
        response = get(site, url)
        assert response.status == 200
        html = response.body.decode().lower()
        loaded = fetched(site, dict(parse_qsl(urlsplit(url).query)).get("v", "")).lower()
        answer = fragment.answer.lower()
        if fragment.multimodal:
            assert answer not in html and answer not in loaded, fragment.goal
        elif "xhr" in fragment.tags:
            assert answer not in html and answer in loaded, fragment.goal
        else:
            assert answer in html, fragment.goal


def test_served_by_the_fixture_web() -> None:
    with FixtureWeb() as web:
        request = urllib.request.Request(f"http://127.0.0.1:{web.port}/place/karos", headers={"Host": "video.mmina.test"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200 and b"Videos filmed in Karos" in response.read()
