"""The fixture web over real HTTP, and the built-in task followed in a real Chromium.

Requests go to ``http://127.0.0.1:<port>`` with an explicit ``Host`` header, exactly as the
browser's host-resolver rule delivers them.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import pytest
from PIL import Image

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.hops import HopFragment
from mmina.fixtures.web.sites.shop import PRODUCTS, Product, ShopSite
from mmina.fixtures.web.sites.wiki import WikiSite
from mmina.fixtures.web.world import CITIES, CURRENCIES
from tests.site_testing import HTML, crawl, fetch, well_formed_fragments

WIKI, SHOP = "wiki.mmina.test", "shop.mmina.test"
TASK_FILE = resources.files("mmina.fixtures") / "tasks" / "normal" / "1.json"


@pytest.fixture
def web(fixture_web: FixtureWeb) -> FixtureWeb:
    """The session's fixture web (``conftest.py``), under the short name these tests use."""
    return fixture_web


def test_public_attributes(web: FixtureWeb) -> None:
    assert {WIKI, SHOP} <= set(web.hosts)
    assert web.port > 0
    assert web.chromium_args() == [f"--host-resolver-rules=MAP *.mmina.test 127.0.0.1:{web.port}"]
    with pytest.raises(ValueError):
        FixtureWeb(drift=-1)


@pytest.mark.parametrize(
    ("host", "path", "expected"),
    [
        (WIKI, "/kiwix/", "Welcome to MMInA Wiki"),
        (WIKI, "/kiwix/A/Solaria", "National product"),
        (WIKI, "/kiwix/A/Port_Meridian", "capital and largest city"),
        (WIKI, "/kiwix/A/History_of_Solaria", "Contemporary Solaria"),
        (WIKI, "/kiwix/search?q=solaria", "Search results for"),
        (WIKI, "/kiwix/search?q=zzzz", "No articles match"),
        (SHOP, "/", "Shop by category"),
        (SHOP, "/category/grocery", "Next page"),
        (SHOP, "/category/grocery?page=2", "Previous page"),
        (SHOP, "/product/vell-mountain-tea", "$23.75"),
        (SHOP, "/search?q=solaria", "2 items found"),
        (SHOP, "/cart", "Your cart is empty."),
    ],
)
def test_pages_are_html(web: FixtureWeb, host: str, path: str, expected: str) -> None:
    reply = fetch(web, host, path)
    assert reply.status == 200
    assert reply.headers["Content-Type"] == HTML
    assert int(reply.headers["Content-Length"]) == len(reply.body)
    assert reply.text.startswith("<!DOCTYPE html>")
    assert re.search(r"<title>[^<]+</title>", reply.text)
    assert expected in reply.text


def test_search_lists_exact_title_first(web: FixtureWeb) -> None:
    text = fetch(web, WIKI, "/kiwix/search?q=Solaria").text
    assert text.index('href="/kiwix/A/Solaria"') < text.index('href="/kiwix/A/History_of_Solaria"')
    assert 'value="Solaria"' in text  # the search box keeps the query


def test_long_article_needs_scrolling(web: FixtureWeb) -> None:
    text = fetch(web, WIKI, "/kiwix/A/History_of_Solaria").text
    assert text.count("<section>") >= 10
    assert len(re.sub(r"<[^>]+>", "", text)) > 8000


GOLDEN_PATHS = [
    (WIKI, "/kiwix/A/Solaria"),
    (WIKI, "/kiwix/I/Flag_of_Solaria.png"),
    (WIKI, "/favicon.ico"),
    (SHOP, "/product/vell-mountain-tea"),
    (SHOP, "/images/vell-mountain-tea.png"),
    (SHOP, "/api/reviews?product=vell-mountain-tea"),
    (SHOP, "/nope"),
    ("other.mmina.test", "/"),
]


def test_same_drift_gives_identical_bytes(web: FixtureWeb) -> None:
    with FixtureWeb(drift=0) as other:
        for host, path in GOLDEN_PATHS:
            first, second = fetch(web, host, path), fetch(other, host, path)
            assert first.body == second.body, path
            assert first.headers.items() == second.headers.items(), path
            assert "Date" not in first.headers


@pytest.mark.parametrize(
    ("host", "path"),
    [
        ("unknown.mmina.test", "/"),
        (WIKI, "/nope"),
        (WIKI, "/kiwix/A/Atlantis"),
        (WIKI, "/kiwix/I/Nothing.png"),
        (SHOP, "/product/unicorn"),
        (SHOP, "/category/toys"),
        (SHOP, "/category/grocery?page=3"),
        (SHOP, "/category/grocery?page=x"),
        (SHOP, "/images/unicorn.png"),
    ],
)
def test_unknown_host_or_path_is_404(web: FixtureWeb, host: str, path: str) -> None:
    reply = fetch(web, host, path)
    assert reply.status == 404
    assert reply.headers["Content-Type"] == HTML


def test_host_header_port_is_ignored(web: FixtureWeb) -> None:
    assert fetch(web, f"{SHOP}:80", "/").status == 200


def test_root_redirects_to_kiwix(web: FixtureWeb) -> None:
    reply = fetch(web, WIKI, "/")
    assert reply.status == 302
    assert reply.headers["Location"] == "/kiwix/"


def test_cart_add_sets_cookie_and_redirects(web: FixtureWeb) -> None:
    first = fetch(web, SHOP, "/cart/add", {"product": "vell-mountain-tea", "qty": "2"})
    assert first.status == 303
    assert first.headers["Location"] == "/cart"
    assert first.headers["Set-Cookie"].startswith("cart=vell-mountain-tea:2;")
    cookie = first.headers["Set-Cookie"].split(";")[0]
    second = fetch(web, SHOP, "/cart/add", {"product": "vell-mountain-tea", "qty": "1"}, {"Cookie": cookie})
    cookie = second.headers["Set-Cookie"].split(";")[0]
    assert cookie == "cart=vell-mountain-tea:3"
    cart = fetch(web, SHOP, "/cart", headers={"Cookie": f"theme=dark; {cookie}"}).text
    assert "Vell Mountain Tea, 100 g tin" in cart
    assert "$71.25" in cart  # 3 x $23.75


@pytest.mark.parametrize(
    "form",
    [
        {"product": "unicorn", "qty": "1"},
        {"product": "knit-beanie", "qty": "0"},
        {"product": "knit-beanie", "qty": "lots"},
    ],
)
def test_cart_add_rejects_bad_input(web: FixtureWeb, form: dict[str, str]) -> None:
    reply = fetch(web, SHOP, "/cart/add", form)
    assert reply.status == 400
    assert "Set-Cookie" not in reply.headers


def test_cart_add_needs_post(web: FixtureWeb) -> None:
    reply = fetch(web, SHOP, "/cart/add")
    assert reply.status == 405
    assert reply.headers["Allow"] == "POST"


def test_reviews_api(web: FixtureWeb) -> None:
    reply = fetch(web, SHOP, "/api/reviews?product=vell-mountain-tea")
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/json; charset=utf-8"
    payload = json.loads(reply.body)
    assert payload["product"] == "vell-mountain-tea"
    assert payload["count"] == len(payload["reviews"]) == 2
    assert payload["average_rating"] == 4.5
    assert set(payload["reviews"][0]) == {"author", "rating", "title", "text"}
    assert json.loads(fetch(web, SHOP, "/api/reviews?product=canvas-tote-bag").body)["count"] == 0
    assert fetch(web, SHOP, "/api/reviews?product=unicorn").status == 404
    assert fetch(web, SHOP, "/api/reviews").status == 400


@pytest.mark.parametrize(
    ("host", "path"),
    [
        (WIKI, "/kiwix/I/Flag_of_Solaria.png"),
        (WIKI, "/kiwix/I/Mount_Karos.png"),
        (SHOP, "/images/solarian-sun-basket.png"),
    ],
)
def test_images_are_small_pngs(web: FixtureWeb, host: str, path: str) -> None:
    reply = fetch(web, host, path)
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "image/png"
    image = Image.open(io.BytesIO(reply.body))
    assert (image.format, image.size) == ("PNG", (240, 180))


def test_product_photos_differ(web: FixtureWeb) -> None:
    tea = fetch(web, SHOP, "/images/vell-mountain-tea.png").body
    tin = fetch(web, SHOP, "/images/enamel-storage-tin.png").body
    assert tea != tin


@pytest.mark.parametrize("host", [WIKI, SHOP])
def test_favicon(web: FixtureWeb, host: str) -> None:
    reply = fetch(web, host, "/favicon.ico")
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "image/x-icon"
    assert Image.open(io.BytesIO(reply.body)).format == "ICO"


PATTERN_WORDS = {"solid": r"\bsolid", "stripes": r"\bstripe", "dots": r"\bdot", "checks": r"\bcheck"}


@pytest.mark.parametrize("product", PRODUCTS, ids=lambda product: product.slug)
def test_product_looks_are_only_in_the_photo(web: FixtureWeb, product: Product) -> None:
    """Colour and pattern must be read from the image: no alt text, page text or review names them."""
    page = fetch(web, SHOP, f"/product/{product.slug}").text
    visible = re.sub(r"<(style|script)>.*?</\1>", "", page, flags=re.DOTALL)
    assert f'<img src="/images/{product.slug}.png" alt="product photo"' in visible
    texts = [re.sub(r"<[^>]+>", " ", visible), fetch(web, SHOP, f"/api/reviews?product={product.slug}").text]
    looks = re.compile(rf"\b{product.photo.colour}\b|{PATTERN_WORDS[product.photo.pattern]}", re.IGNORECASE)
    for text in texts:
        assert not looks.search(text)


def test_category_sort_dropdown(web: FixtureWeb) -> None:
    text = fetch(web, SHOP, "/category/home-kitchen?sort=price-desc").text
    assert '<label for="sort">Sort by</label> <select id="sort" name="sort">' in text
    assert '<option value="price-desc" selected>Price: high to low</option>' in text
    names = re.findall(r'<a href="/product/[^"]+">([^<]+)</a>', text)
    assert names[0] == "Solarian Sun Basket, large"
    assert (
        'href="/category/home-kitchen?page=2&amp;sort=price-desc"' in text
        or 'href="/category/home-kitchen?page=2&sort=price-desc"' in text
    )
    cheapest = fetch(web, SHOP, "/category/grocery?sort=price-asc").text
    assert cheapest.index("$4.25") < cheapest.index("$9.99") < cheapest.index("$12.40")
    assert fetch(web, SHOP, "/category/grocery?sort=bogus").body == fetch(web, SHOP, "/category/grocery").body


def test_stock_api_is_fixed_at_level_0(web: FixtureWeb) -> None:
    answers = {fetch(web, SHOP, "/api/stock?product=stoneware-mug").body for _ in range(3)}
    assert len(answers) == 1
    assert 5 <= json.loads(answers.pop())["left"] <= 24


def test_wiki_agrees_with_the_shared_world(web: FixtureWeb) -> None:
    """Every world city has an article naming its airport code; country currencies match world.py."""
    for city in CITIES:
        text = fetch(web, WIKI, "/kiwix/A/" + city.name.replace(" ", "_")).text
        assert city.country in text, city.name
        if city.name not in ("Port Meridian", "Calder Bay"):  # capitals whose articles predate airports
            assert f"({city.airport})" in text, city.name
    for country, code in (("Solaria", "SOL"), ("Estravia", "EST"), ("Norvale", "NRV")):
        text = fetch(web, WIKI, f"/kiwix/A/{country}").text
        assert f"{CURRENCIES[code]} ({code})" in text


# ---- hop fragments ----

SITES_WITH_FRAGMENTS = [(WikiSite, WIKI, 10, 2), (ShopSite, SHOP, 10, 3)]


@pytest.mark.parametrize(
    ("site", "host", "at_least", "multimodal"),
    SITES_WITH_FRAGMENTS,
    ids=lambda value: getattr(value, "label", None),
)
def test_fragments_are_well_formed(site: type, host: str, at_least: int, multimodal: int) -> None:
    for f in well_formed_fragments(site(0), at_least=at_least, multimodal=multimodal):
        url = f.reference_url.lower()
        assert f.script[0]["url"].startswith(f"http://{host}/")
        assert all(set(step.get("target", {})) <= {"role", "name"} for step in f.script)
        assert not f.goal.endswith(".")  # the task generator joins goal and question with ". "
        assert not f.city or f.city in url
        assert not f.shop or (site is ShopSite and url == f"http://{host}/product/{f.shop}")


def _reference_texts(web: FixtureWeb, host: str, f: HopFragment) -> str:
    """The reference page's HTML, plus the reviews its script loads (answers that arrive by XHR)."""
    path, headers = urlsplit(f.reference_url), {}
    if "cart" in f.tags:  # replay the script's add-to-cart: the product page it opens, the quantity it types
        slug = f.script[0]["url"].rsplit("/", 1)[1]
        qty = next(step["text"] for step in f.script if step["action"] == "type")
        added = fetch(web, host, "/cart/add", {"product": slug, "qty": qty})
        headers["Cookie"] = added.headers["Set-Cookie"].split(";")[0]
    reply = fetch(web, host, path.path + (f"?{path.query}" if path.query else ""), headers=headers)
    assert reply.status == 200, f.reference_url
    if f.shop:
        return reply.text + fetch(web, host, f"/api/reviews?product={f.shop}").text
    return reply.text


@pytest.mark.parametrize(("site", "host"), [(WikiSite, WIKI), (ShopSite, SHOP)], ids=["wiki", "shop"])
def test_fragment_answers_are_on_the_reference_page_or_only_in_its_image(
    web: FixtureWeb, site: type, host: str
) -> None:
    for f in site(0).hop_fragments():
        text = _reference_texts(web, host, f)
        if f.multimodal:
            assert not re.search(rf"\b{re.escape(f.answer)}\b", text, re.IGNORECASE), f.question
            assert re.search(r'<img src="[^"]+\.png"', text)
        else:
            assert f.answer in text, (f.goal, f.answer)


@pytest.mark.parametrize(("host", "start"), [(WIKI, "/kiwix/"), (SHOP, "/")])
def test_every_link_resolves(web: FixtureWeb, host: str, start: str) -> None:
    replies = crawl(lambda path: fetch(web, host, path), [start])
    for path, reply in replies.items():
        assert reply.status == 200, path
    assert len(replies) > 15


def test_stop_frees_the_port() -> None:
    server = FixtureWeb().start()
    port = server.port
    assert fetch(server, WIKI, "/kiwix/").status == 200
    server.stop()
    server.stop()  # idempotent
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with FixtureWeb(port=port) as again:  # the same port can be served again at once
        assert fetch(again, WIKI, "/kiwix/").status == 200


# ---- the built-in task, followed by its reference script in a real Chromium ----

SNAPSHOT_LINE = re.compile(
    r'^\s*- (?P<role>[\w-]+) (?P<name>"(?:[^"\\]|\\.)*")[^\n]*?\[ref=(?P<ref>[^\]]+)\]'
)


def chromium_path() -> str | None:
    """The system Chromium this machine uses (Playwright cannot download its own here)."""
    if os.path.exists("/usr/lib/chromium/chromium"):
        return "/usr/lib/chromium/chromium"
    return shutil.which("chromium")


def resolve(page: Any, target: dict[str, str]) -> Any:
    """The element named by ``target`` in the page's aria snapshot; it must be unique."""
    snapshot = page.aria_snapshot(mode="ai")
    refs = [
        m["ref"]
        for m in map(SNAPSHOT_LINE.match, snapshot.splitlines())
        if m and m["role"] == target["role"] and json.loads(m["name"]) == target["name"]
    ]
    assert len(refs) == 1, f"{target} matched {len(refs)} elements on {page.url}:\n{snapshot}"
    return page.locator(f"aria-ref={refs[0]}")


def perform(page: Any, step: dict[str, Any]) -> None:
    """Carry out one reference-script step the way an oracle agent would."""
    action = step["action"]
    if action in ("click", "hover"):
        getattr(resolve(page, step["target"]), action)()
    elif action == "type":
        element = resolve(page, step["target"])
        element.fill(step["text"])
        if step.get("enter"):
            element.press("Enter")
    elif action == "press":
        page.keyboard.press(step["key"])
    elif action == "scroll":
        page.mouse.wheel(0, 600 if step["direction"] == "down" else -600)
    elif action == "goto":
        page.goto(step["url"])
    elif action == "go_back":
        page.go_back()
    page.wait_for_load_state("load")


def test_reference_script_solves_task_in_chromium(web: FixtureWeb) -> None:
    """Hops end where the script leaves a site (``goto``) or stops; each URL must carry its keyword."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium on this machine")
    from playwright.sync_api import sync_playwright

    task = json.loads(TASK_FILE.read_text())
    hop_urls: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=web.chromium_args())
        try:
            page = browser.new_page()
            page.goto(task["start_url"])
            for step in task["reference_script"]:
                if step["action"] in ("goto", "stop"):
                    hop_urls.append(page.url.lower())
                if step["action"] == "stop":
                    break
                perform(page, step)
            page.get_by_text("average rating").wait_for(timeout=60_000)  # reviews arrived by fetch()
            final_text = page.inner_text("main")
        finally:
            browser.close()

    keywords = task["procedure"][:-1]
    assert task["procedure"][-1] == "end" and task["cnt_hop"] == len(keywords) + 1
    for keyword, url in zip(keywords, hop_urls, strict=True):
        assert keyword in url, (keyword, url)
    assert hop_urls[0] == "http://wiki.mmina.test/kiwix/a/solaria"
    assert hop_urls[-1] == task["eval"]["reference_url"] and task["shop"] in hop_urls[-1]
    answer = task["reference_script"][-1]["answer"]
    for keyword in task["eval"]["reference_answers"]["must_include"]:
        assert keyword in final_text and keyword in answer


def test_a_client_gone_mid_answer_prints_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """A lost worker's browser goes away mid-answer: the site says nothing of the broken pipe (a
    `record --workers` run printed socketserver's traceback for it), and still prints any other
    error of its own."""
    from mmina.fixtures.web.server import _Server

    server = _Server(("127.0.0.1", 0), lambda host, request: None)  # type: ignore[arg-type, return-value]
    with socket.socket() as client:
        try:
            for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
                try:
                    raise gone
                except ConnectionError:
                    server.handle_error(client, ("127.0.0.1", 1))
            assert capfd.readouterr().err == ""
            try:
                raise ValueError("the site's own bug")
            except ValueError:
                server.handle_error(client, ("127.0.0.1", 1))
            assert "ValueError: the site's own bug" in capfd.readouterr().err
        finally:
            server.server_close()
