"""Drift over real HTTP: level 0 is the untouched reference, every higher level is another, fixed day.

Checks the shared page layer (ad banner, "last updated" line, POST search, session cookie, promo
page) on every site, and the wiki's and shop's own drift (order, prices, ids, tokens in URLs,
redirects, the cache-busting XHR, the XHR whose answer changes on every call).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator

import pytest

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.base import Request
from mmina.fixtures.web.server import SITE_CLASSES
from mmina.fixtures.web.sites.shop import PRODUCTS_BY_SLUG, ShopSite
from tests.site_testing import fetch

WIKI, SHOP = "wiki.mmina.test", "shop.mmina.test"
LEVELS = (0, 1, 2, 3)

# sha256 of the bodies as served before the drift layer existed (recorded from the previous commit's code).
REFERENCE_BODIES = [
    (WIKI, "/", 302, "5456f38a80d39945884a3dfade6fcb0583e99ba06a538c1e7ec4bb97df43cac2"),
    (WIKI, "/kiwix/A/Port_Meridian", 200, "ddf4ca5360fb7c004831ec81da8b41613a2b62610e66c111adf67ce62872b15e"),
    (
        WIKI,
        "/kiwix/A/History_of_Solaria",
        200,
        "9e515753d121e7b7b3b437688442bde5b561df4d8fe802bb7ec6d7deb6dffdca",
    ),
    (
        WIKI,
        "/kiwix/A/Meridian_Lighthouse",
        200,
        "f4f91e3ec26b7ad4b571ed33005b1cf0decfd1364fe395221155fd7366158907",
    ),
    (WIKI, "/kiwix/search", 200, "7437e984f705754cf57f7b839b8accd5c30fa53ac824103bd00b4841c705442f"),
    (WIKI, "/kiwix/search?q=zzzz", 200, "585cfce5f97541c19ecd6f29f2b17d5bb2d15ba784c41582df12bd6ff8da3bcf"),
    (WIKI, "/kiwix/A/Atlantis", 404, "4bd25f1e5c16cbbc71e89ed83fd28415d6eb8ab563bd1bd06c7d1b02a1a2d1a6"),
    (WIKI, "/nope", 404, "e4c2f33c9782809343d7129626ff4138cd91022f5d79100a04786b6bdb572a13"),
    (SHOP, "/", 200, "4946a964c7e5e4390960e36bd8c2ba57d0534b4de68bdacd3f021090daf4605b"),
    (
        SHOP,
        "/product/vell-mountain-tea",
        200,
        "c88c8badd149736065b074bf614c6adeb14f8a58f5cdebb96650be88fde3a228",
    ),
    (SHOP, "/product/knit-beanie", 200, "4de57a1d13c45ab271b90ec37ab8fb7a938726620937118ac1c50b5fc210cc0c"),
    (SHOP, "/search?q=solaria", 200, "072c35c6e72f113aef759e49d30d7d2177a37b195b5a3dd01f7559160898e76f"),
    (SHOP, "/search", 200, "83e3e6b4293c24d383c3dc9726994e4880ac76ce7388eac3c124519316863e6f"),
    (SHOP, "/cart", 200, "d9fb12de6ea706834c04aa9dbaecbe6754806f7ca6312fb029219a8c942aed6f"),
    (
        SHOP,
        "/api/reviews?product=vell-mountain-tea",
        200,
        "8524abb75ef6c5b403f8dca441161bc7028ef5b945bdbfd556a4c1cf24f827f3",
    ),
    (SHOP, "/product/unicorn", 404, "cde1402e9bca23681a5afa40ab66dc167603968a5cbc9d5f4fe563398ae71ee0"),
]
# Pages whose bytes must be the same twice at one level and differ from level 0 (no per-call XHR here).
SAMPLE = [
    (WIKI, "/kiwix/"),
    (WIKI, "/kiwix/A/History_of_Solaria"),
    (WIKI, "/kiwix/search?q=solaria"),
    (SHOP, "/"),
    (SHOP, "/category/grocery"),
    (SHOP, "/product/vell-mountain-tea"),
    (SHOP, "/search?q=tea"),
]


@pytest.fixture(scope="module")
def webs() -> Iterator[dict[int, FixtureWeb]]:
    """One server per level, shared by the module."""
    servers = {level: FixtureWeb(drift=level).start() for level in LEVELS}
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def main_of(text: str) -> str:
    """The ``<main>`` element's content."""
    return text.split("<main>\n", 1)[1].split("\n</main>", 1)[0]


# ---- level 0 is the reference ----


@pytest.mark.parametrize(("host", "path", "status", "digest"), REFERENCE_BODIES)
def test_level_0_serves_the_reference_bytes(
    webs: dict[int, FixtureWeb], host: str, path: str, status: int, digest: str
) -> None:
    reply = fetch(webs[0], host, path)
    assert (reply.status, hashlib.sha256(reply.body).hexdigest()) == (status, digest)
    assert "Set-Cookie" not in reply.headers


def test_level_0_has_no_drift_furniture(webs: dict[int, FixtureWeb]) -> None:
    for host, path in SAMPLE:
        text = fetch(webs[0], host, path).text
        assert 'aria-label="Advertisement"' not in text and "Last updated" not in text, path
        assert 'method="get"' in text and 'id="site-search"' in text
    assert fetch(webs[0], SHOP, "/promo").status == 404


# ---- every level is one fixed day ----


@pytest.mark.parametrize("level", LEVELS[1:])
def test_drifted_level_is_deterministic_and_differs_from_reference(
    webs: dict[int, FixtureWeb], level: int
) -> None:
    with FixtureWeb(drift=level) as again:
        for host, path in SAMPLE:
            first, second = fetch(webs[level], host, path), fetch(again, host, path)
            assert first.body == second.body, (level, path)
            assert first.headers.items() == second.headers.items(), (level, path)
            assert first.body != fetch(webs[0], host, path).body, (level, path)


def test_levels_differ_from_each_other(webs: dict[int, FixtureWeb]) -> None:
    bodies = {level: fetch(webs[level], SHOP, "/category/grocery").body for level in LEVELS}
    assert len(set(bodies.values())) == len(LEVELS)


# ---- the shared page layer, on every site ----


@pytest.mark.parametrize("site", SITE_CLASSES, ids=lambda cls: cls.label)
def test_banner_timestamp_and_cookie_on_every_site(webs: dict[int, FixtureWeb], site: type) -> None:
    host = f"{site.label}.mmina.test"
    home = site.chrome.home
    reply = fetch(webs[1], host, home)
    assert reply.status == 200, home
    main = main_of(reply.text)
    assert main.startswith('<aside class="ad"') and 'aria-label="Advertisement"' in main
    assert re.search(r'<p class="updated">Last updated: 2026-01-16 \d\d:\d\d UTC</p></footer>', reply.text)
    assert re.fullmatch(r"session=[0-9a-f]{16}; Path=/; SameSite=Lax", reply.headers["Set-Cookie"])
    promo = re.search(r'<aside class="ad"[^>]*><a href="([^"]+)">', main)
    assert promo and site.keyword in f"http://{host}{promo.group(1)}".lower()
    landing = fetch(webs[1], host, promo.group(1))
    assert landing.status == 200 and "Special offer" in landing.text


@pytest.mark.parametrize("site", SITE_CLASSES, ids=lambda cls: cls.label)
def test_header_search_posts_from_level_2(webs: dict[int, FixtureWeb], site: type) -> None:
    host, action = f"{site.label}.mmina.test", site.chrome.search.action
    assert f'action="{action}" method="get"' in fetch(webs[1], host, site.chrome.home).text
    assert f'action="{action}" method="post"' in fetch(webs[2], host, site.chrome.home).text
    posted = fetch(webs[2], host, action, {"q": "a"})
    assert posted.status == 200, action
    assert 'value="a"' in posted.text  # the handler saw the query from the form body


def test_posted_search_answers_like_get(webs: dict[int, FixtureWeb]) -> None:
    for host, path in ((WIKI, "/kiwix/search"), (SHOP, "/search")):
        assert fetch(webs[2], host, path, {"q": "tea"}).body == fetch(webs[2], host, f"{path}?q=tea").body


def test_cookie_is_per_level_and_on_error_pages(webs: dict[int, FixtureWeb]) -> None:
    cookies = {
        level: fetch(webs[level], WIKI, "/kiwix/A/Atlantis").headers["Set-Cookie"] for level in LEVELS[1:]
    }
    assert len(set(cookies.values())) == len(cookies)
    assert "Set-Cookie" not in fetch(webs[1], SHOP, "/api/reviews?product=knit-beanie").headers


def test_search_ids_and_promo_path() -> None:
    site = ShopSite(2)
    text = site.handle(Request("GET", "/")).body.decode()
    field = re.search(r'<label for="(site-search-[0-9a-f]{6})">Search products</label>', text)
    assert field and f'id="{field.group(1)}" name="q"' in text
    assert Request("POST", "/search", form={"q": " mug "}).arg("q") == "mug"
    assert Request("GET", "/search", query={"q": ""}, form={"q": "x"}).arg("q") == ""  # the URL wins


# ---- wiki ----


def test_wiki_articles_move_and_old_urls_redirect(webs: dict[int, FixtureWeb]) -> None:
    old = fetch(webs[3], WIKI, "/kiwix/A/Solaria")
    assert (old.status, old.headers["Location"]) == (301, "/kiwix/v3/A/Solaria")
    moved = fetch(webs[3], WIKI, "/kiwix/v3/A/Solaria")
    assert moved.status == 200 and 'href="/kiwix/v3/A/Port_Meridian"' in moved.text
    assert fetch(webs[3], WIKI, "/kiwix/v2/A/Solaria").status == 404
    assert fetch(webs[2], WIKI, "/kiwix/A/Solaria").status == 200
    assert fetch(webs[0], WIKI, "/kiwix/v3/A/Solaria").status == 404


def test_wiki_sections_reorder_with_new_ids_and_an_edit_date(webs: dict[int, FixtureWeb]) -> None:
    def sections(text: str) -> list[tuple[str, str]]:
        return re.findall(r'<h2 id="([^"]+)">([^<]+)</h2>', text)

    reference = sections(fetch(webs[0], WIKI, "/kiwix/A/History_of_Solaria").text)
    text = fetch(webs[1], WIKI, "/kiwix/A/History_of_Solaria").text
    drifted = sections(text)
    assert sorted(h for _, h in drifted) == sorted(h for _, h in reference)
    assert [h for _, h in drifted] != [h for _, h in reference]
    assert all(i.startswith(f"{ref}-") for i, h in drifted for ref, rh in reference if h == rh)
    assert re.search(r"This article was last edited on 2026-01-16 \d\d:\d\d UTC\.", text)
    assert "Recent changes" in fetch(webs[1], WIKI, "/kiwix/").text


def test_wiki_search_results_reorder(webs: dict[int, FixtureWeb]) -> None:
    def titles(level: int) -> list[str]:
        text = fetch(webs[level], WIKI, "/kiwix/search?q=solaria").text
        return re.findall(r'<li><a href="[^"]+">([^<]+)</a><p>', text)

    assert titles(0)[0] == "Solaria"
    assert sorted(titles(1)) == sorted(titles(0)) and titles(1) != titles(0)


# ---- shop ----


def product_href(text: str, slug: str) -> str:
    found = re.search(rf'href="([^"]*/product/{slug}[^"]*)"', text)
    assert found, slug
    return found.group(1)


def test_shop_product_urls_carry_a_token_and_move(webs: dict[int, FixtureWeb]) -> None:
    reference = fetch(webs[0], SHOP, "/search?q=vell").text
    assert product_href(reference, "vell-mountain-tea") == "/product/vell-mountain-tea"
    href1 = product_href(fetch(webs[1], SHOP, "/search?q=vell").text, "vell-mountain-tea")
    assert re.fullmatch(r"/product/vell-mountain-tea/[0-9a-f]{8}", href1)
    assert fetch(webs[1], SHOP, href1).status == 200
    assert (
        fetch(webs[1], SHOP, "/product/vell-mountain-tea").status == 200
    )  # old URL still served before level 3
    assert fetch(webs[1], SHOP, "/product/vell-mountain-tea/00000000").status == 404
    href3 = product_href(fetch(webs[3], SHOP, "/search?q=vell").text, "vell-mountain-tea")
    assert re.fullmatch(r"/v3/product/vell-mountain-tea/[0-9a-f]{8}", href3)
    old = fetch(webs[3], SHOP, "/product/vell-mountain-tea")
    assert (old.status, old.headers["Location"]) == (301, href3)
    assert fetch(webs[3], SHOP, href3).status == 200
    assert fetch(webs[3], SHOP, href1).status == 404


def test_shop_prices_and_order_drift(webs: dict[int, FixtureWeb]) -> None:
    def listing(level: int, path: str) -> list[tuple[str, str]]:
        text = fetch(webs[level], SHOP, path).text
        return re.findall(r'<a href="[^"]+">([^<]+)</a><p class="price">([^<]+)</p>', text)

    reference = listing(0, "/search?q=a")
    drifted = listing(1, "/search?q=a")
    assert sorted(n for n, _ in drifted) == sorted(n for n, _ in reference)
    assert [n for n, _ in drifted] != [n for n, _ in reference]
    assert dict(drifted) != dict(reference)
    assert dict(listing(1, "/category/home-kitchen?sort=price-desc"))  # sorting uses today's prices
    cheapest = listing(1, "/category/grocery?sort=price-asc")[0][1]
    assert cheapest == min((p for _, p in listing(1, "/search?q=grocery")), key=lambda p: float(p[1:]))


def test_shop_cart_uses_todays_price(webs: dict[int, FixtureWeb]) -> None:
    site = ShopSite(1)
    today = site.cents(PRODUCTS_BY_SLUG["stoneware-mug"])
    assert today != PRODUCTS_BY_SLUG["stoneware-mug"].price_cents
    cookie = fetch(webs[1], SHOP, "/cart/add", {"product": "stoneware-mug", "qty": "2"}).headers["Set-Cookie"]
    text = fetch(webs[1], SHOP, "/cart", headers={"Cookie": cookie.split(";")[0]}).text
    assert f"${2 * today // 100}.{2 * today % 100:02d}" in text


def test_reviews_xhr_gets_a_cache_buster(webs: dict[int, FixtureWeb]) -> None:
    reference = fetch(webs[0], SHOP, "/product/vell-mountain-tea").text
    assert "Date.now()" not in reference and 'getElementById("reviews")' in reference
    text = fetch(
        webs[1], SHOP, product_href(fetch(webs[1], SHOP, "/search?q=vell").text, "vell-mountain-tea")
    ).text
    box = re.search(r'<div id="(reviews-[0-9a-f]{6})" data-product', text)
    assert box and f'getElementById("{box.group(1)}")' in text
    assert 'encodeURIComponent(box.dataset.product) + "&_=" + Date.now())' in text
    busted = json.loads(fetch(webs[1], SHOP, "/api/reviews?product=vell-mountain-tea&_=1768469400000").body)
    assert busted == json.loads(fetch(webs[1], SHOP, "/api/reviews?product=vell-mountain-tea").body)
    assert {r["author"] for r in busted["reviews"]} == {"Marta K.", "Ivo P."}


def test_stock_xhr_changes_on_every_call_when_drifting(webs: dict[int, FixtureWeb]) -> None:
    def stock(web: FixtureWeb, times: int) -> list[int]:
        return [
            json.loads(fetch(web, SHOP, f"/api/stock?product=knit-beanie&_={n}").body)["left"]
            for n in range(times)
        ]

    reference = stock(webs[0], 3)
    assert len(set(reference)) == 1
    assert "/api/stock" not in fetch(webs[0], SHOP, "/product/knit-beanie").text
    with FixtureWeb(drift=1) as fresh, FixtureWeb(drift=1) as twin:
        sequence = stock(fresh, 4)
        assert all(a != b for a, b in itertools.pairwise(sequence))
        assert stock(twin, 4) == sequence  # the same sequence from every server start
    page = fetch(
        webs[1], SHOP, product_href(fetch(webs[1], SHOP, "/search?q=beanie").text, "knit-beanie")
    ).text
    assert "/api/stock?product=" in page and "Checking stock" in page
    assert fetch(webs[1], SHOP, "/api/stock?product=unicorn").status == 404
    assert fetch(webs[1], SHOP, "/api/stock").status == 400
