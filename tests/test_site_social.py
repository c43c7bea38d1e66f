"""The social site (``social.mmina.test``) at the HTTP level: routes, drift and hop fragments.

Requests go straight to ``SocialSite.handle``; one test goes through a real ``FixtureWeb`` to
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
from mmina.fixtures.web.sites._social_data import POST_LIST
from mmina.fixtures.web.sites.social import POSTS_BY_TITLE, SocialSite, post_id, post_path
from mmina.fixtures.web.world import CITIES_BY_SLUG

HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
KEYWORDS = ("kiwix", "shop", "flight", "hotel", "carrental", "train", "event", "video", "social", "food",
            "exchange", "guide", "recipe")
LINK = re.compile(r'(?:href|src)="([^"#]+)"')
BAKERY = POSTS_BY_TITLE["Which bakery has the best cardamom buns?"]
BUS = POSTS_BY_TITLE["Spotted this old bus on the harbour road"]


def get(site: SocialSite, url: str, method: str = "GET", form: dict[str, str] | None = None) -> Response:
    """Answer one request for a site-relative URL (query string allowed)."""
    parts = urlsplit(url)
    return site.handle(Request(method, parts.path, dict(parse_qsl(parts.query)), form or {}))


def crawl(site: SocialSite) -> dict[str, Response]:
    """Every page, photo and link reachable from the front page in all three orders."""
    seen: dict[str, Response] = {}
    queue = ["/", "/?sort=new", "/?sort=top", "/communities", "/search?q=the"]
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        seen[url] = response = get(site, url)
        if response.content_type == HTML:
            queue += [link.replace("&amp;", "&") for link in LINK.findall(response.body.decode())
                      if link.startswith("/")]
    return seen


def fetched(site: SocialSite, pid: str) -> str:
    """Every comment a post page can load with "Load more comments"."""
    return " ".join(get(site, f"/api/comments?post={pid}&offset={n}").body.decode() for n in (10, 20))


@pytest.fixture(scope="module")
def site() -> SocialSite:
    return SocialSite(0)


@pytest.mark.parametrize(("url", "status", "content_type", "expected"), [
    ("/", 200, HTML, "Popular on Gulfchat"),
    ("/?sort=top&page=4", 200, HTML, "Page 4 of 4"),
    ("/communities", 200, HTML, "c/photography"),
    ("/c/ostrand", 200, HTML, "c/ostrand: Ostrand"),
    ("/c/ostrand?sort=new", 200, HTML, "Sort posts"),
    (post_path(SocialSite(0).drift, BAKERY), 200, HTML, "Load more comments"),
    (f"/c/ostrand/comments/{BAKERY.pid}", 301, HTML, "has moved"),
    ("/u/nils_p", 200, HTML, "28 January 2017"),
    ("/search?q=ferry", 200, HTML, "Can you take bikes on the Gulf ferry?"),
    ("/search", 200, HTML, "Type a word"),
    (f"/media/{BUS.pid}.png", 200, "image/png", ""),
    (f"/api/comments?post={BAKERY.pid}&offset=10", 200, JSON, "Brindle and Crumb"),
    ("/api/online?c=karos", 200, JSON, "online"),
])
def test_routes(site: SocialSite, url: str, status: int, content_type: str, expected: str) -> None:
    response = get(site, url)
    assert (response.status, response.content_type) == (status, content_type)
    assert expected.encode() in response.body
    if content_type == HTML:
        assert response.body.startswith(b"<!DOCTYPE html>")


@pytest.mark.parametrize("url", [
    "/nothing", "/c/atlantis", "/?page=5", "/?page=0", "/c/karos/comments/zzzzzz/x",
    f"/c/karos/comments/{BAKERY.pid}/x", f"/v3/c/ostrand/comments/{BAKERY.pid}/x", "/u/nobody",
    f"/media/{BAKERY.pid}.png", "/media/zzzzzz.png",
])
def test_unknown_pages_are_404(site: SocialSite, url: str) -> None:
    response = get(site, url)
    assert (response.status, response.content_type) == (404, HTML)


def test_api_errors_and_methods(site: SocialSite) -> None:
    assert get(site, "/api/comments?post=zzzzzz").status == 404
    assert get(site, f"/api/comments?post={BAKERY.pid}&offset=x").status == 404
    assert get(site, "/api/online?c=atlantis").status == 404
    assert get(site, "/c/karos", "POST").status == 405
    posted = get(site, "/search", "POST", {"q": "cardamom"})
    assert posted.status == 200 and BAKERY.title.encode() in posted.body


def test_threads_start_with_ten_comments_and_load_the_rest(site: SocialSite) -> None:
    page = get(site, post_path(site.drift, BAKERY)).body.decode()
    assert page.count("<li><p>u/") == 10 and "Brindle" not in page
    second = json.loads(get(site, f"/api/comments?post={BAKERY.pid}&offset=10").body)
    third = json.loads(get(site, f"/api/comments?post={BAKERY.pid}&offset=20").body)
    assert (len(second["comments"]), second["next"], len(third["comments"]), third["next"]) == (10, 20, 4, None)


def test_sorts_and_labelled_dropdown(site: SocialSite) -> None:
    top = get(site, "/c/calder-bay?sort=top").body.decode()
    assert re.search(r'<label for="([^"]+)">Sort posts</label> <select id="\1"', top)
    points = [int(p.replace(",", "")) for p in re.findall(r'<li class="card"><p>([\d,]+) points', top)]
    assert points == sorted(points, reverse=True)


@pytest.mark.parametrize("drift", [0, 3])
def test_every_url_is_served_and_keeps_to_its_keyword(drift: int) -> None:
    pages = crawl(SocialSite(drift))
    assert len(pages) > len(POST_LIST) + 8  # every post, community and member
    foreign = [k for k in KEYWORDS if k != "social"]
    for url, response in pages.items():
        assert response.status == 200, url
        assert not [k for k in foreign if k in url.lower()], url


def test_same_drift_same_bytes() -> None:
    for drift in (0, 2):
        first, second = SocialSite(drift), SocialSite(drift)
        pid = post_id(first.drift, BUS)
        for url in ("/", "/?sort=top", "/c/karos", "/u/marit_k", "/search?q=the", post_path(first.drift, BUS),
                    f"/media/{pid}.png", f"/api/comments?post={pid}&offset=10", "/api/online?c=karos"):
            assert get(first, url).body == get(second, url).body, (drift, url)


def test_drift_changes_order_scores_ids_and_urls() -> None:
    calm, drifted = SocialSite(0), SocialSite(1)
    titles = re.compile(r"<h2><a [^>]+>([^<]+)</a>")
    assert titles.findall(get(calm, "/").body.decode()) != titles.findall(get(drifted, "/").body.decode())
    path = post_path(drifted.drift, BAKERY)
    assert re.fullmatch(r"/c/ostrand/comments/[0-9a-f]{6}/which-bakery-has-the-best-cardamom-buns", path)
    page, calm_page = get(drifted, path).body.decode(), get(calm, post_path(calm.drift, BAKERY)).body.decode()
    score = re.compile(r"<p>([\d,]+) points</p>")
    assert score.findall(page) != score.findall(calm_page)
    assert 'id="comments-' in page and "&_=' + Date.now()" in page and "Date.now()" not in calm_page
    assert get(drifted, post_path(calm.drift, BAKERY)).status == 404


def test_old_addresses_redirect_from_level_3() -> None:
    moved = SocialSite(3)
    target = post_path(moved.drift, BAKERY)
    assert target.startswith("/v3/c/ostrand/comments/")
    for old in (post_path(SocialSite(0).drift, BAKERY), f"/c/ostrand/comments/{post_id(moved.drift, BAKERY)}"):
        response = get(moved, old)
        assert response.status == 301 and dict(response.headers)["Location"] == target
    assert get(moved, target).status == 200


def test_online_count_changes_on_every_call_only_under_drift() -> None:
    def calls(site: SocialSite) -> list[int]:
        return [json.loads(get(site, "/api/online?c=tessaly").body)["online"] for _ in range(6)]

    assert len(set(calls(SocialSite(0)))) == 1
    drifted = calls(SocialSite(2))
    assert len(set(drifted)) > 1 and drifted == calls(SocialSite(2))


def test_fragments_are_well_formed(site: SocialSite) -> None:
    fragments = site.hop_fragments()
    assert len(fragments) >= 8 and sum(f.multimodal for f in fragments) >= 2
    for fragment in fragments:
        assert fragment.keyword == "social" and fragment.site == "social"
        assert not fragment.city or (fragment.city in CITIES_BY_SLUG and f"/c/{fragment.city}/" in fragment.reference_url)
        assert fragment.script[0]["action"] == "goto"
        assert fragment.script[0]["url"].startswith("http://social.mmina.test/")
        assert all(step["action"] != "stop" for step in fragment.script) and 2 <= len(fragment.script) <= 5
        assert fragment.answer.lower() not in fragment.goal.lower()
        url = fragment.reference_url.removeprefix("http://social.mmina.test")
        response = get(site, url)
        assert response.status == 200
        html = response.body.decode().lower()
        pid = url.split("/comments/")[1].split("/")[0] if "/comments/" in url else ""
        loaded = fetched(site, pid).lower()
        answer = fragment.answer.lower()
        if fragment.multimodal:
            assert answer not in html and answer not in loaded, fragment.goal
        elif "xhr" in fragment.tags:
            assert answer not in html and answer in loaded, fragment.goal
        else:
            assert answer in html, fragment.goal
    assert sum(bool(f.city) for f in fragments) >= 5


def test_served_by_the_fixture_web() -> None:
    with FixtureWeb() as web:
        request = urllib.request.Request(f"http://127.0.0.1:{web.port}/c/karos", headers={"Host": "social.mmina.test"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200 and b"c/karos" in response.read()
