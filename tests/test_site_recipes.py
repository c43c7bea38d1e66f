"""The recipe fixture site, over HTTP and through ``Site.handle`` (no browser)."""
from __future__ import annotations

import io
import json
import re
import urllib.request
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urlsplit

import pytest
from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.base import Request, Response
from mmina.fixtures.web.images import rgb
from mmina.fixtures.web.sites._recipes_data import CATEGORIES, DIETS, RECIPES
from mmina.fixtures.web.sites.recipes import RecipesSite
from mmina.fixtures.web.sites.shop import PRODUCTS_BY_SLUG
from PIL import Image

HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
FOREIGN_KEYWORDS = ("kiwix", "shop", "flight", "hotel", "carrental", "train", "event", "video", "social", "food",
                    "exchange", "guide")


def get(site: RecipesSite, url: str, form: dict[str, str] | None = None) -> Response:
    """Ask the site for a path with its query string, as the server would decode it."""
    parts = urlsplit(url)
    return site.handle(Request("POST" if form is not None else "GET", parts.path, dict(parse_qsl(parts.query)),
                               form or {}))


class _Links(HTMLParser):
    """Collects ``href``, ``src`` and ``data-src`` values."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("href", "src", "data-src") and value]


def links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.urls


@pytest.fixture(scope="module")
def site() -> RecipesSite:
    return RecipesSite(0)


@pytest.mark.parametrize(("path", "content_type", "expected"), [
    ("/", HTML, "Browse by category"),
    ("/recipes", HTML, "Showing 1\u20134 of 15 recipes"),
    ("/recipes?page=4", HTML, "Previous page"),
    ("/category/desserts", HTML, "Heather Honey Cake"),
    ("/search", HTML, "Find recipes"),
    ("/search?q=tea&diet=dairy-free", HTML, "2 recipes found"),
    ("/search?q=tea", HTML, "3 recipes found"),
    ("/search?q=honey&diet=vegan", HTML, "No recipes match"),
    ("/recipe/karos-tea-loaf", HTML, "Buy Vell Mountain Tea, 100 g tin at One Stop Market"),
    ("/photos/heather-honey-cake.png", "image/png", ""),
    ("/api/reviews?recipe=calder-bay-mussels", JSON, '"author":"Lotte Brae"'),
    ("/favicon.ico", "image/x-icon", ""),
])
def test_routes(site: RecipesSite, path: str, content_type: str, expected: str) -> None:
    response = get(site, path)
    assert (response.status, response.content_type) == (200, content_type)
    assert expected.encode() in response.body


@pytest.mark.parametrize("path", ["/nope", "/recipe/unicorn-pie", "/category/snacks", "/recipes?page=5",
                                  "/recipes?page=0", "/category/soups?page=2", "/photos/unicorn-pie.png"])
def test_unknown_pages_are_404(site: RecipesSite, path: str) -> None:
    response = get(site, path)
    assert (response.status, response.content_type) == (404, HTML)


def test_reviews_api_needs_a_known_recipe(site: RecipesSite) -> None:
    assert get(site, "/api/reviews?recipe=unicorn-pie").status == 404
    assert get(site, "/api/reviews").status == 404


def test_catalogue_is_consistent() -> None:
    diets, categories = {slug for slug, _ in DIETS}, {slug for slug, _ in CATEGORIES}
    for recipe in RECIPES:
        assert recipe.diets <= diets and recipe.category in categories
        assert all(i.product in PRODUCTS_BY_SLUG for i in recipe.ingredients if i.product)
    assert {i.product for r in RECIPES for i in r.ingredients} >= {"vell-mountain-tea", "estravian-heather-honey"}


def test_diet_filter_and_posted_search(site: RecipesSite) -> None:
    vegan = get(site, "/search", form={"q": "soup", "diet": "vegan"}).body.decode()
    assert "Solarian Lentil Soup" in vegan and "Meridian Fish Stew" not in vegan
    assert '<option value="vegan" selected>' in vegan


def test_served_over_http_by_host() -> None:
    with FixtureWeb() as web:
        request = urllib.request.Request(f"http://127.0.0.1:{web.port}/recipe/vell-tea-latte",
                                         headers={"Host": "recipes.mmina.test"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200 and b"http://shop.mmina.test/product/vell-mountain-tea" in reply.read()


GOLDEN = ["/", "/recipes?page=2", "/category/mains", "/search?q=tea", "/recipe/heather-honey-cake",
          "/photos/vell-tea-latte.png", "/api/reviews?recipe=calder-bay-mussels"]


@pytest.mark.parametrize("level", [0, 3])
def test_same_drift_same_bytes(level: int) -> None:
    first, second = RecipesSite(level), RecipesSite(level)
    for path in GOLDEN:
        path = path.replace("/recipe/heather-honey-cake", first.recipe_path("heather-honey-cake"))
        assert get(first, path).body == get(second, path).body, path


def test_level_zero_reviews_hold_still(site: RecipesSite) -> None:
    assert len({get(site, "/api/reviews?recipe=vell-tea-latte").body for _ in range(3)}) == 1
    assert b"&_=" not in get(site, "/recipe/vell-tea-latte").body


def test_drift_moves_order_ratings_ids_urls_and_search_method(site: RecipesSite) -> None:
    drifted = RecipesSite(3)
    title = re.compile(r'<a href="[^"]*recipe/[^"]+">([^<]+)</a>')
    assert title.findall(get(site, "/recipes").body.decode()) != title.findall(get(drifted, "/recipes").body.decode())
    path = drifted.recipe_path("karos-tea-loaf")
    assert re.fullmatch(r"/v3/recipe/karos-tea-loaf-[0-9a-f]{8}", path)
    before, after = get(site, "/recipe/karos-tea-loaf").body.decode(), get(drifted, path).body.decode()
    assert "4.6 out of 5 (127 ratings)" in before and "(127 ratings)" not in after
    assert 'id="reviews-' in after and "+ '&_=' + Date.now()" in after
    assert 'method="post"' in get(drifted, "/search").body.decode()


def test_old_recipe_urls_redirect_once_moved() -> None:
    drifted = RecipesSite(3)
    response = get(drifted, "/recipe/karos-tea-loaf")
    assert response.status == 301
    location = dict(response.headers)["Location"]
    assert location.startswith("/v3/") and get(drifted, location).status == 200


def test_cooking_now_changes_on_every_call_under_drift() -> None:
    first, second = RecipesSite(1), RecipesSite(1)
    calls = [json.loads(get(first, "/api/reviews?recipe=vell-tea-latte").body) for _ in range(4)]
    assert len({c["cooking_now"] for c in calls}) > 1
    assert calls == [json.loads(get(second, "/api/reviews?recipe=vell-tea-latte").body) for _ in range(4)]


@pytest.mark.parametrize("level", [0, 3])
def test_every_link_resolves_and_names_no_other_site(level: int) -> None:
    site = RecipesSite(level)
    seen, queue = set(), ["/"]
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        seen.add(url)
        assert not any(word in url.lower() for word in FOREIGN_KEYWORDS), url
        response = get(site, url)
        assert response.status == 200, url
        if response.content_type == HTML:
            found = links(response.body.decode())
            assert all(u.startswith("http://shop.mmina.test/product/") for u in found if urlsplit(u).netloc)
            queue += [u for u in found if not urlsplit(u).netloc]
    assert len(seen) > 40


@pytest.mark.parametrize(("slug", "point", "colour"), [
    ("heather-honey-cake", (120, 60), "pink"),
    ("vell-tea-latte", (96, 40), "purple"),
])
def test_photo_facts_are_only_in_the_picture(site: RecipesSite, slug: str, point: tuple[int, int], colour: str) -> None:
    photo = Image.open(io.BytesIO(get(site, f"/photos/{slug}.png").body))
    assert photo.getpixel(point) == rgb(colour)
    text = get(site, f"/recipe/{slug}").body.decode() + get(site, f"/api/reviews?recipe={slug}").body.decode()
    assert colour not in text.lower()


def test_hop_fragments(site: RecipesSite) -> None:
    fragments = site.hop_fragments()
    assert len(fragments) >= 8 and sum(f.multimodal for f in fragments) >= 2
    for fragment in fragments:
        assert fragment.keyword == "recipe" and fragment.site == "recipes"
        assert fragment.keyword in fragment.reference_url
        assert fragment.script[0] == {"action": "goto", "url": fragment.script[0]["url"]}
        assert fragment.script[0]["url"].startswith(site.origin + "/")
        assert 2 <= len(fragment.script) <= 5 and all(step["action"] != "stop" for step in fragment.script)
        assert fragment.answer not in fragment.goal
        page = get(site, fragment.reference_url.removeprefix(site.origin))
        assert page.status == 200
        text = page.body.decode()
        text += "".join(get(site, url).body.decode() for url in links(text) if url.startswith("/api/"))
        assert (fragment.answer in text) != fragment.multimodal, fragment.goal
