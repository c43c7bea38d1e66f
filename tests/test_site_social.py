"""The social site (``social.mmina.test``) at the HTTP level: routes, drift and hop fragments.

Requests go straight to ``SocialSite.handle``; one test goes through a real ``FixtureWeb`` to
check the site is discovered and served under its host name.
"""

from __future__ import annotations

import json
import re

import pytest

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.sites._social_data import POST_LIST
from mmina.fixtures.web.sites.social import POSTS_BY_TITLE, SocialSite, post_id, post_path
from mmina.fixtures.web.world import CITIES_BY_SLUG
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

BAKERY = POSTS_BY_TITLE["Which bakery has the best cardamom buns?"]
BUS = POSTS_BY_TITLE["Spotted this old bus on the harbour road"]
# Every page, photo and link reachable from the front page in all three orders.
SEEDS = ("/", "/?sort=new", "/?sort=top", "/communities", "/search?q=the")


def fetched(site: SocialSite, pid: str) -> str:
    """Every comment a post page can load with "Load more comments"."""
    return " ".join(get(site, f"/api/comments?post={pid}&offset={n}").body.decode() for n in (10, 20))


@pytest.fixture(scope="module")
def site() -> SocialSite:
    return SocialSite(0)


@pytest.mark.parametrize(
    ("url", "status", "content_type", "expected"),
    [
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
    ],
)
def test_routes(site: SocialSite, url: str, status: int, content_type: str, expected: str) -> None:
    assert_page(get(site, url), status, content_type, expected)


@pytest.mark.parametrize(
    "url",
    [
        "/nothing",
        "/c/atlantis",
        "/?page=5",
        "/?page=0",
        "/c/karos/comments/zzzzzz/x",
        f"/c/karos/comments/{BAKERY.pid}/x",
        f"/v3/c/ostrand/comments/{BAKERY.pid}/x",
        "/u/nobody",
        f"/media/{BAKERY.pid}.png",
        "/media/zzzzzz.png",
    ],
)
def test_unknown_pages_are_404(site: SocialSite, url: str) -> None:
    assert_page(get(site, url), 404, HTML)


def test_api_errors_and_methods(site: SocialSite) -> None:
    assert get(site, "/api/comments?post=zzzzzz").status == 404
    assert get(site, f"/api/comments?post={BAKERY.pid}&offset=x").status == 404
    assert get(site, "/api/online?c=atlantis").status == 404
    assert get(site, "/c/karos", "POST").status == 405
    posted = get(site, "/search", form={"q": "cardamom"})
    assert posted.status == 200 and BAKERY.title.encode() in posted.body


def test_threads_start_with_ten_comments_and_load_the_rest(site: SocialSite) -> None:
    page = get(site, post_path(site.drift, BAKERY)).body.decode()
    assert page.count("<li><p>u/") == 10 and "Brindle" not in page
    second = json.loads(get(site, f"/api/comments?post={BAKERY.pid}&offset=10").body)
    third = json.loads(get(site, f"/api/comments?post={BAKERY.pid}&offset=20").body)
    assert (len(second["comments"]), second["next"], len(third["comments"]), third["next"]) == (
        10,
        20,
        4,
        None,
    )


def test_sorts_and_labelled_dropdown(site: SocialSite) -> None:
    top = get(site, "/c/calder-bay?sort=top").body.decode()
    assert re.search(r'<label for="([^"]+)">Sort posts</label> <select id="\1"', top)
    points = [int(p.replace(",", "")) for p in re.findall(r'<li class="card"><p>([\d,]+) points', top)]
    assert points == sorted(points, reverse=True)


@pytest.mark.parametrize("drift", [0, 3])
def test_every_url_is_served_and_keeps_to_its_keyword(drift: int) -> None:
    site = SocialSite(drift)
    pages = crawl_site(site, SEEDS)
    assert len(pages) > len(POST_LIST) + 8  # every post, community and member
    assert_keeps_to_its_keyword(site, pages)


def test_same_drift_same_bytes() -> None:
    for drift in (0, 2):
        site = SocialSite(drift)
        pid = post_id(site.drift, BUS)
        assert_same_bytes(
            SocialSite,
            drift,
            (
                "/",
                "/?sort=top",
                "/c/karos",
                "/u/marit_k",
                "/search?q=the",
                post_path(site.drift, BUS),
                f"/media/{pid}.png",
                f"/api/comments?post={pid}&offset=10",
                "/api/online?c=karos",
            ),
        )


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
    for old in (
        post_path(SocialSite(0).drift, BAKERY),
        f"/c/ostrand/comments/{post_id(moved.drift, BAKERY)}",
    ):
        assert_redirect(get(moved, old), target)
    assert get(moved, target).status == 200


def test_online_count_changes_on_every_call_only_under_drift() -> None:
    assert_changes_only_under_drift(SocialSite, lambda site: "/api/online?c=tessaly", "online")


def test_fragments_are_well_formed(site: SocialSite) -> None:
    fragments = well_formed_fragments(site)
    for fragment in fragments:
        assert fragment.keyword == "social" and fragment.site == "social"
        assert not fragment.city or (
            fragment.city in CITIES_BY_SLUG and f"/c/{fragment.city}/" in fragment.reference_url
        )
        assert fragment.script[0]["url"].startswith("http://social.mmina.test/")
        html = reference_page(site, fragment).lower()
        url = fragment.reference_url
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


def test_served_by_the_fixture_web(fixture_web: FixtureWeb, site: SocialSite) -> None:
    reply = served(fixture_web, site, "/c/karos")
    assert reply.status == 200 and b"c/karos" in reply.body
