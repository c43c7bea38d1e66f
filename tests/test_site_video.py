"""The video site (``video.mmina.test``) at the HTTP level: routes, drift and hop fragments.

Requests go straight to ``VideoSite.handle``; one test goes through a real ``FixtureWeb`` to
check the site is discovered and served under its host name.
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qsl, urlsplit

import pytest

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.sites._video_data import VIDEOS
from mmina.fixtures.web.sites.video import VIDEOS_BY_TITLE, VideoSite, video_id, watch_path
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

RADIO = VIDEOS_BY_TITLE["Repairing a 1970s valve radio"]
DEPOT = VIDEOS_BY_TITLE["Inside the Tessaly tram depot"]
# Every page, thumbnail and link reachable from the home page and a few sorted listings.
SEEDS = ("/", "/results?q=the&sort=views", "/results?q=a&sort=date", "/@streetbeats?sort=oldest")


def fetched(site: VideoSite, vid: str) -> str:
    """Everything a watch page's scripts fetch: all comment pages and the live count."""
    pages = [get(site, f"/api/comments?v={vid}&page={n}").body.decode() for n in (1, 2)]
    return " ".join(pages + [get(site, f"/api/live?v={vid}").body.decode()])


@pytest.fixture(scope="module")
def site() -> VideoSite:
    return VideoSite(0)


@pytest.mark.parametrize(
    ("url", "status", "content_type", "expected"),
    [
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
    ],
)
def test_routes(site: VideoSite, url: str, status: int, content_type: str, expected: str) -> None:
    assert_page(get(site, url), status, content_type, expected)


@pytest.mark.parametrize(
    "url",
    [
        "/nothing",
        "/watch",
        "/watch?v=nothing",
        f"/v3/watch?v={RADIO.vid}",
        "/@nobody",
        "/@reedandthread?page=3",
        "/place/atlantis",
        "/place/velmora-x",
        "/thumbs/nothing.png",
    ],
)
def test_unknown_pages_are_404(site: VideoSite, url: str) -> None:
    assert_page(get(site, url), 404, HTML)


def test_api_errors_and_methods(site: VideoSite) -> None:
    assert get(site, "/api/comments?v=nothing").status == 404
    assert get(site, f"/api/comments?v={RADIO.vid}&page=3").status == 404
    assert get(site, "/api/live?v=nothing").status == 404
    assert get(site, "/@norvalenature", "POST").status == 405
    posted = get(site, "/results", form={"q": "valve"})
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
    site = VideoSite(drift)
    pages = crawl_site(site, SEEDS)
    assert len(pages) > 2 * len(VIDEOS)  # every watch page and thumbnail
    assert_keeps_to_its_keyword(site, pages)


def test_same_drift_same_bytes() -> None:
    for drift in (0, 2):
        site = VideoSite(drift)
        vid = video_id(site.drift, RADIO)
        assert_same_bytes(
            VideoSite,
            drift,
            (
                "/",
                "/results?q=the",
                "/@streetbeats",
                "/place/ostrand",
                watch_path(site.drift, RADIO),
                f"/thumbs/{vid}.png",
                f"/api/comments?v={vid}",
                f"/api/live?v={vid}",
            ),
        )


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
        assert_redirect(get(moved, old), target)
    assert get(moved, target).status == 200


def test_watching_now_changes_on_every_call_only_under_drift() -> None:
    assert_changes_only_under_drift(
        VideoSite, lambda site: f"/api/live?v={video_id(site.drift, RADIO)}", "watching"
    )


def test_comments_come_in_pages(site: VideoSite) -> None:
    first = json.loads(get(site, f"/api/comments?v={DEPOT.vid}").body)
    assert (first["page"], first["pages"], first["total"], len(first["comments"])) == (1, 2, 16, 8)
    assert first["comments"][0]["pinned"] and "Line 14" not in json.dumps(first)


def test_fragments_are_well_formed(site: VideoSite) -> None:
    for fragment in well_formed_fragments(site):
        assert fragment.keyword == "video" and fragment.site == "video"
        assert not fragment.city or f"/place/{fragment.city}" in fragment.reference_url
        assert fragment.script[0]["url"].startswith("http://video.mmina.test/")
        html = reference_page(site, fragment).lower()
        vid = dict(parse_qsl(urlsplit(fragment.reference_url).query)).get("v", "")
        loaded = fetched(site, vid).lower()
        answer = fragment.answer.lower()
        if fragment.multimodal:
            assert answer not in html and answer not in loaded, fragment.goal
        elif "xhr" in fragment.tags:
            assert answer not in html and answer in loaded, fragment.goal
        else:
            assert answer in html, fragment.goal


def test_served_by_the_fixture_web(fixture_web: FixtureWeb, site: VideoSite) -> None:
    reply = served(fixture_web, site, "/place/karos")
    assert reply.status == 200 and b"Videos filmed in Karos" in reply.body
