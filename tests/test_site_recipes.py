"""The recipe fixture site, over HTTP and through ``Site.handle`` (no browser)."""

from __future__ import annotations

import io
import re
from urllib.parse import urlsplit

import pytest
from PIL import Image

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.images import rgb
from mmina.fixtures.web.sites._recipes_data import CATEGORIES, DIETS, RECIPES
from mmina.fixtures.web.sites.recipes import RecipesSite
from mmina.fixtures.web.sites.shop import PRODUCTS_BY_SLUG
from tests.site_testing import (
    HTML,
    JSON,
    assert_changes_only_under_drift,
    assert_keeps_to_its_keyword,
    assert_page,
    assert_same_bytes,
    crawl_site,
    fetched_apis,
    get,
    links,
    reference_page,
    served,
    well_formed_fragments,
)


@pytest.fixture(scope="module")
def site() -> RecipesSite:
    return RecipesSite(0)


@pytest.mark.parametrize(
    ("path", "content_type", "expected"),
    [
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
    ],
)
def test_routes(site: RecipesSite, path: str, content_type: str, expected: str) -> None:
    assert_page(get(site, path), 200, content_type, expected)


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/recipe/unicorn-pie",
        "/category/snacks",
        "/recipes?page=5",
        "/recipes?page=0",
        "/category/soups?page=2",
        "/photos/unicorn-pie.png",
    ],
)
def test_unknown_pages_are_404(site: RecipesSite, path: str) -> None:
    assert_page(get(site, path), 404, HTML)


def test_reviews_api_needs_a_known_recipe(site: RecipesSite) -> None:
    assert get(site, "/api/reviews?recipe=unicorn-pie").status == 404
    assert get(site, "/api/reviews").status == 404


def test_catalogue_is_consistent() -> None:
    diets, categories = {slug for slug, _ in DIETS}, {slug for slug, _ in CATEGORIES}
    for recipe in RECIPES:
        assert recipe.diets <= diets and recipe.category in categories
        assert all(i.product in PRODUCTS_BY_SLUG for i in recipe.ingredients if i.product)
    assert {i.product for r in RECIPES for i in r.ingredients} >= {
        "vell-mountain-tea",
        "estravian-heather-honey",
    }


def test_diet_filter_and_posted_search(site: RecipesSite) -> None:
    vegan = get(site, "/search", form={"q": "soup", "diet": "vegan"}).body.decode()
    assert "Solarian Lentil Soup" in vegan and "Meridian Fish Stew" not in vegan
    assert '<option value="vegan" selected>' in vegan


def test_served_over_http_by_host(fixture_web: FixtureWeb, site: RecipesSite) -> None:
    reply = served(fixture_web, site, "/recipe/vell-tea-latte")
    assert reply.status == 200 and b"http://shop.mmina.test/product/vell-mountain-tea" in reply.body


GOLDEN = [
    "/",
    "/recipes?page=2",
    "/category/mains",
    "/search?q=tea",
    "/recipe/heather-honey-cake",
    "/photos/vell-tea-latte.png",
    "/api/reviews?recipe=calder-bay-mussels",
]


@pytest.mark.parametrize("level", [0, 3])
def test_same_drift_same_bytes(level: int) -> None:
    cake = RecipesSite(level).recipe_path("heather-honey-cake")
    assert_same_bytes(
        RecipesSite, level, (path.replace("/recipe/heather-honey-cake", cake) for path in GOLDEN)
    )


def test_level_zero_reviews_hold_still(site: RecipesSite) -> None:
    assert len({get(site, "/api/reviews?recipe=vell-tea-latte").body for _ in range(3)}) == 1
    assert b"&_=" not in get(site, "/recipe/vell-tea-latte").body


def test_drift_moves_order_ratings_ids_urls_and_search_method(site: RecipesSite) -> None:
    drifted = RecipesSite(3)
    title = re.compile(r'<a href="[^"]*recipe/[^"]+">([^<]+)</a>')
    assert title.findall(get(site, "/recipes").body.decode()) != title.findall(
        get(drifted, "/recipes").body.decode()
    )
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
    assert_changes_only_under_drift(
        RecipesSite, lambda site: "/api/reviews?recipe=vell-tea-latte", "cooking_now", level=1, calls=4
    )


@pytest.mark.parametrize("level", [0, 3])
def test_every_link_resolves_and_names_no_other_site(level: int) -> None:
    site = RecipesSite(level)
    pages = crawl_site(site)
    assert_keeps_to_its_keyword(site, pages)
    for response in pages.values():
        if response.content_type == HTML:
            found = links(response.body.decode())
            assert all(u.startswith("http://shop.mmina.test/product/") for u in found if urlsplit(u).netloc)
    assert len(pages) > 40


@pytest.mark.parametrize(
    ("slug", "point", "colour"),
    [
        ("heather-honey-cake", (120, 60), "pink"),
        ("vell-tea-latte", (96, 40), "purple"),
    ],
)
def test_photo_facts_are_only_in_the_picture(
    site: RecipesSite, slug: str, point: tuple[int, int], colour: str
) -> None:
    photo = Image.open(io.BytesIO(get(site, f"/photos/{slug}.png").body))
    assert photo.getpixel(point) == rgb(colour)
    text = get(site, f"/recipe/{slug}").body.decode() + get(site, f"/api/reviews?recipe={slug}").body.decode()
    assert colour not in text.lower()


def test_hop_fragments(site: RecipesSite) -> None:
    for fragment in well_formed_fragments(site):
        assert fragment.keyword == "recipe" and fragment.site == "recipes"
        text = reference_page(site, fragment)
        text += fetched_apis(site, text)
        assert (fragment.answer in text) != fragment.multimodal, fragment.goal
