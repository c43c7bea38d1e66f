"""Helpers the fixture-site tests share: asking a site for a page, crawling it, checking hop fragments.

Pages are fetched with ``site.handle`` (no sockets, so the tests stay fast) or, where a test is
about the real server, over HTTP with a ``Host`` header as the browser's host-resolver rule
delivers them. Where the site test files used to check one thing in slightly different ways,
the helper here does the strictest of them, so sharing them loosened nothing.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.base import Request, Response, Site
from mmina.fixtures.web.hops import HopFragment

HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
KEYWORDS = (
    "kiwix",
    "shop",
    "flight",
    "hotel",
    "carrental",
    "train",
    "event",
    "video",
    "social",
    "food",
    "exchange",
    "guide",
    "recipe",
)
"""Every site's procedure keyword: a URL naming another site's keyword would fool the official runner."""


class Page(Protocol):
    """What a crawl needs of an answer, whether it came from ``site.handle`` or over HTTP."""

    status: int
    body: bytes

    @property
    def content_type(self) -> str: ...


# ---- asking a site directly ----------------------------------------------------------------


def get(site: Site, url: str, method: str | None = None, form: dict[str, str] | None = None) -> Response:
    """Answer one request for a path (query allowed) or absolute URL of ``site``; a ``form`` makes it a POST."""
    parts = urlsplit(url)
    verb = method or ("POST" if form is not None else "GET")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return site.handle(Request(verb, parts.path or "/", query, form or {}))


def text(site: Site, url: str) -> str:
    """A page that must answer 200, as text."""
    response = get(site, url)
    assert response.status == 200, (url, response.status)
    return response.body.decode()


def visible(html: str) -> str:
    """Page text without tags, scripts and styles (roughly what a reader sees)."""
    html = re.sub(r"<(style|script)>.*?</\1>", " ", html, flags=re.DOTALL)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def assert_page(response: Response, status: int, content_type: str, expected: str = "") -> None:
    """Status, type and an expected snippet; an HTML answer must be a whole document."""
    assert (response.status, response.content_type) == (status, content_type)
    assert expected.encode() in response.body
    if content_type == HTML:
        assert response.body.startswith(b"<!DOCTYPE html>")


def assert_redirect(response: Response, location: str) -> None:
    """A permanent redirect to ``location``: how moved detail pages answer their old addresses."""
    assert response.status == 301 and dict(response.headers)["Location"] == location


# ---- links and crawling --------------------------------------------------------------------


class _Links(HTMLParser):
    """Collects the addresses a page links to, shows or fetches (``href``, ``src``, ``data-src``, ``data-xhr``)."""

    ATTRIBUTES = ("href", "src", "data-src", "data-xhr")

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in self.ATTRIBUTES and value]


def links(html: str) -> list[str]:
    """Every address in a page, in document order, entities decoded."""
    parser = _Links()
    parser.feed(html)
    return parser.urls


def local_links(html: str) -> list[str]:
    """The page's addresses on its own site (no host), without ``#fragments``; in-page anchors are dropped."""
    found = (url.split("#", 1)[0] for url in links(html) if not urlsplit(url).netloc)
    return [url for url in found if url]


def crawl(
    fetch_page: Callable[[str], Page], seeds: Iterable[str], limit: int | None = None
) -> dict[str, Page]:
    """Breadth-first over the local links of every HTML page reached from ``seeds`` (at most ``limit`` pages)."""
    seen: dict[str, Page] = {}
    queue = deque(seeds)
    while queue and (limit is None or len(seen) < limit):
        url = queue.popleft()
        if url in seen:
            continue
        seen[url] = page = fetch_page(url)
        if page.content_type == HTML:
            queue += local_links(page.body.decode())
    return seen


def crawl_site(site: Site, seeds: Iterable[str] = ("/",), limit: int | None = None) -> dict[str, Response]:
    """:func:`crawl` through ``site.handle``."""
    return crawl(lambda url: get(site, url), seeds, limit)  # type: ignore[return-value]


def assert_keeps_to_its_keyword(site: Site, pages: dict[str, Response]) -> None:
    """Every crawled address answers 200 and names its own site's keyword only (host included)."""
    for url, response in pages.items():
        assert response.status == 200, url
        full = f"{site.label}.mmina.test{url}".lower()
        assert [k for k in KEYWORDS if k in full] == [site.keyword], url


def fetched_apis(site: Site, html: str) -> str:
    """The answers of the ``/api/`` addresses a page names: what its scripts add after load."""
    return "".join(get(site, url).body.decode() for url in links(html) if url.startswith("/api/"))


# ---- drift ---------------------------------------------------------------------------------


def assert_same_bytes(cls: type[Site], level: int, urls: Iterable[str]) -> None:
    """Two fresh instances at one level answer every URL with the same status, headers and bytes."""
    first, second = cls(level), cls(level)
    for url in urls:
        a, b = get(first, url), get(second, url)
        assert (a.status, a.headers, a.body) == (b.status, b.headers, b.body), (level, url)


def xhr_answers(site: Site, url: str, calls: int) -> list[dict[str, Any]]:
    """The JSON answers of ``calls`` calls to one endpoint, in order."""
    return [json.loads(get(site, url).body) for _ in range(calls)]


def assert_changes_only_under_drift(
    cls: type[Site], url_of: Callable[[Site], str], key: str, *, level: int = 2, calls: int = 6
) -> list[dict[str, Any]]:
    """The endpoint answers the same bytes every time at level 0 and a new ``key`` under drift.

    The drifted sequence must be the same from a fresh start, so recordings stay reproducible;
    it is returned for checks of its own.
    """
    calm = cls(0)
    assert len({get(calm, url_of(calm)).body for _ in range(calls)}) == 1
    live, twin = cls(level), cls(level)
    answers = xhr_answers(live, url_of(live), calls)
    assert len({answer[key] for answer in answers}) > 1, answers
    assert answers == xhr_answers(twin, url_of(twin), calls)
    return answers


# ---- over HTTP -----------------------------------------------------------------------------


class Reply:
    """Status, headers and body of one HTTP exchange."""

    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    @property
    def content_type(self) -> str:
        return self.headers["Content-Type"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Let redirects reach the test instead of following them."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


OPENER = urllib.request.build_opener(_NoRedirect)


def fetch(
    web: FixtureWeb,
    host: str,
    path: str,
    data: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """GET (or POST a form when ``data`` is given) one path on one fixture host, not following redirects."""
    body = urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{web.port}{path}", data=body, headers={"Host": host, **(headers or {})}
    )
    try:
        with OPENER.open(request, timeout=10) as response:
            return Reply(response.status, response.headers, response.read())
    except urllib.error.HTTPError as error:
        with error:
            return Reply(error.code, error.headers, error.read())


def served(web: FixtureWeb, site: Site, path: str) -> Reply:
    """``path`` of ``site`` as the fixture web serves it under the site's host name."""
    return fetch(web, f"{site.label}.mmina.test", path)


# ---- hop fragments -------------------------------------------------------------------------


def well_formed_fragments(
    site: Site, *, at_least: int = 8, multimodal: int = 2, steps: tuple[int, int] = (2, 5)
) -> list[HopFragment]:
    """The site's fragments after the checks every site shares; returned for the site's own checks.

    Enough of them (some multimodal), none twice, each on its own site and keyword, each script
    opening with a bare ``goto`` on the site and never stopping, and no answer given away.
    """
    fragments = site.hop_fragments()
    assert len(fragments) >= at_least and sum(f.multimodal for f in fragments) >= multimodal
    assert len({f.goal + f.question for f in fragments}) == len(fragments)
    low, high = steps
    for f in fragments:
        assert f.keyword == site.keyword and f.keyword in f.reference_url, f.goal
        assert f.site == site.label and f.reference_url.startswith(site.origin + "/"), f.goal
        assert f.script[0] == {"action": "goto", "url": f.script[0]["url"]}, f.goal
        assert f.script[0]["url"].startswith(site.origin + "/"), f.goal
        assert low <= len(f.script) <= high and all(step["action"] != "stop" for step in f.script), f.goal
        assert f.answer and f.answer.lower() not in (f.goal + f.question).lower(), f.goal
    return fragments


def reference_page(site: Site, fragment: HopFragment) -> str:
    """The page a fragment ends on (it must answer 200), as text."""
    return text(site, fragment.reference_url.removeprefix(site.origin))


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
            self._form.controls.append(
                {
                    "kind": a.get("type", "text"),
                    "id": a.get("id", ""),
                    "name": a.get("name", ""),
                    "value": a.get("value", ""),
                }
            )
        elif tag == "select" and self._form is not None:
            self._form.controls.append(
                {
                    "kind": "select",
                    "id": a.get("id", ""),
                    "name": a.get("name", ""),
                    "value": "",
                    "options": [],
                }
            )
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
