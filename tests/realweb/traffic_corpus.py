"""Real traffic for redaction: what real applications sent and received, and real JSON shipped in
packages — the structured places (URLs, form and JSON bodies, NDJSON, event streams, socket
messages) where a name says whether a value is a secret.

Three sources, all built here at test time and cached in the real-web cache (folder
:data:`FOLDER`, gitignored), so the repository holds none of it:

* **the applications' traffic**: each application of ``tests/realweb/apps.py`` is started and its
  scripted episode recorded with mmina's recorder, and the traffic is taken from the browser's
  archive *before* redaction (:func:`raw_traffic`): every request URL, request body, text
  response body and socket message, as the browser sent and received it;
* **an API's recorded traffic**: GitHub's REST API as its client library's test fixtures
  recorded it (:data:`API_FIXTURES`);
* **JSON shipped in packages**: API descriptions and examples (botocore's ``examples-1.json``:
  real requests and responses of AWS APIs, credentials' names among them), JSON schemas and
  OpenAPI documents, manifests and lock files of the installed PyPI and npm packages
  (:data:`PACKAGE_GLOBS`).

Each piece is an :class:`Item`: where it was (:data:`PLACES`), its type, its text.
``tests/realweb/traffic_check.py`` passes them through the redactor with and without planted
credentials.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sysconfig
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from mmina.recorder import episode as episode_module
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.har import PutBlob, RoutedTraffic, completed, read_har, request_text, response_body
from mmina.recorder.recording import RecordConfig, record_run
from mmina.recorder.streams import EventStreams
from mmina.redaction.redact import Redactor
from mmina.redaction.secret_rules import is_text_type
from mmina.store import Store
from tests.built_once import locked
from tests.realweb.apps import APPS, App, RunningApp, write_suite
from tests.realweb.installs import cache_root, npm_packages
from tests.realweb.npm_corpus import FOLDER as NPM_FOLDER
from tests.realweb.npm_corpus import SAMPLE_FOLDER

FOLDER = "traffic-corpus"
URL, REQUEST, RESPONSE, SOCKET = "url", "request", "response", "socket"
PLACES = (URL, REQUEST, RESPONSE, SOCKET)
"""A request's URL, a request body, a response body, one socket message (either direction)."""
AGENT = "tests.realweb.agents:ThinkingOracle"
CODE_TYPES = ("javascript", "ecmascript", "text/css")
"""Response bodies left to the npm corpus (``npm_corpus.py``): bundles and style sheets."""
MAX_ITEM = 2_000_000
"""A larger text (a data dump) is left out: it would be most of the corpus."""
SAMPLE_APPS = ("datasette", "shop")
"""The default test run's applications: Datasette (whose virtualenv ``test_realweb_apps.py``
installs by default too) and the hand-written shop (JSON beacons, a form with a CSRF token),
which need nothing else installed."""
SAMPLE_EVERY = 6
SAMPLE_MAX_BYTES = 60_000
"""The default run checks every 6th package document up to this size (and every one of AWS's
API examples, which name credentials)."""


@dataclass(frozen=True)
class Item:
    """One piece of real traffic or data: where it came from, where it was, its type and text."""

    source: str
    place: str
    mime: str
    """A body's content type; a socket message's direction (``send`` or ``receive``)."""
    text: str


APPLICATION, API, PACKAGE = "applications' traffic", "recorded API traffic", "package JSON"


def kind_of(source: str) -> str:
    """Which of the three sources an item's source is (an application's name, ``api:…``, ``package:…``)."""
    if ":" not in source:
        return APPLICATION
    return API if source.startswith(f"{API_SOURCE}:") else PACKAGE


# ---------------------------------------------------------------- the applications' traffic


def app_items(apps: Iterable[App] = APPS) -> list[Item]:
    """The traffic of each application's recorded episode (recorded once, then read from the cache)."""
    return [item for app in apps for item in _cached(f"{app.name}-{_version(app)}", partial(_record, app))]


def _version(app: App) -> str:
    """What the recording depends on (the application's packages and script): a changed one is
    recorded again, not read from an old cache."""
    described = json.dumps([app.requirements, app.task(1)["reference_script"], app.path], sort_keys=True)
    return hashlib.sha256(described.encode()).hexdigest()[:12]


def _cached(name: str, build: Callable[[], list[Item]]) -> list[Item]:
    """The items cached as ``name`` (built with ``build()`` the first time, by one process at a time)."""
    folder = cache_root() / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    with locked(folder / f"{name}.lock"):
        if not path.exists():
            items = build()
            partial = path.with_suffix(".partial")
            partial.write_text("".join(json.dumps(asdict(i)) + "\n" for i in items))
            partial.rename(path)
    return [Item(**json.loads(line)) for line in path.read_text().splitlines()]


def _record(app: App) -> list[Item]:
    """Start the application with new state, record its episode, and keep the raw traffic."""
    with tempfile.TemporaryDirectory(prefix=f"traffic-{app.name}-") as temporary:
        folder = Path(temporary)
        suite = write_suite(folder / "tasks", (app,))
        store = Store.open(folder / "store", create=True)
        with RunningApp(app, folder) as running, raw_traffic() as entries:
            browser = BrowserConfig(extra_args=tuple(running.chromium_args()))
            record_run(store, RecordConfig(tasks=str(suite), agent=AGENT, browser=browser))
        return unique(item for entry in entries for item in entry_items(app.name, entry))


@contextmanager
def raw_traffic() -> Iterator[list[dict[str, Any]]]:
    """For the block, every episode's traffic as the browser had it (the HAR's entries completed
    as the recorder completes them, bodies inlined), taken before the recorder redacts it."""
    taken: list[dict[str, Any]] = []
    capture = episode_module.capture

    def tee(
        path: Path,
        step_starts: list[datetime],
        put_blob: PutBlob,
        redactor: Redactor,
        streams: EventStreams | None = None,
        routed: RoutedTraffic = RoutedTraffic(),
    ) -> list[dict[str, Any]]:
        entries, archive = read_har(path)
        try:
            taken.extend(_inlined(e, archive) for e in completed(entries, archive, streams, routed))
        finally:
            if archive is not None:
                archive.close()
        return capture(path, step_starts, put_blob, redactor, streams, routed)

    episode_module.capture = tee
    try:
        yield taken
    finally:
        episode_module.capture = capture


def _inlined(entry: dict[str, Any], archive: zipfile.ZipFile | None) -> dict[str, Any]:
    """An entry with its request text and response body read (the archive closes after)."""
    request, response = entry["request"], entry.get("response") or {}
    text, mime = request_text(request, archive)
    content = response.get("content") or {}
    body = response_body(content, archive)
    return {
        "url": request.get("url", ""),
        "request_text": text,
        "request_mime": mime,
        "response_mime": content.get("mimeType") or "",
        "socket": entry.get("_resourceType") == "websocket",
        "response_body": base64.b64encode(body).decode() if body else None,
    }


def entry_items(source: str, entry: dict[str, Any]) -> list[Item]:
    """The items of one exchange: its URL, its request body, its response body as text (not
    code: see :data:`CODE_TYPES`), and for a socket each text message."""
    items = [Item(source, URL, "", entry["url"])]
    if entry["request_text"]:
        items.append(Item(source, REQUEST, entry["request_mime"], entry["request_text"]))
    body = base64.b64decode(entry["response_body"]) if entry["response_body"] else b""
    mime = entry["response_mime"]
    if entry["socket"]:
        return items + [Item(source, SOCKET, direction, text) for direction, text in socket_texts(body)]
    if body and is_text_type(mime) and not any(c in mime for c in CODE_TYPES) and len(body) <= MAX_ITEM:
        items.append(Item(source, RESPONSE, mime, body.decode("utf-8", "replace")))
    return items


def socket_texts(body: bytes) -> list[tuple[str, str]]:
    """The text messages of a recorded socket (the archive's JSON lines, see ``replayer/sockets.py``),
    each with its direction (``send``: the page's, ``receive``: the server's)."""
    texts = []
    for line in body.decode("utf-8", "replace").splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("opcode") == 1 and isinstance(message.get("data"), str):
            texts.append((str(message.get("type")), message["data"]))
    return texts


def unique(items: Iterable[Item]) -> list[Item]:
    """Each text once per place and type (a poll's URL a hundred times is one item)."""
    seen: set[tuple[str, str, str]] = set()
    kept = []
    for item in items:
        key = (item.place, item.mime, hashlib.sha256(item.text.encode("utf-8", "surrogatepass")).hexdigest())
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


# ---------------------------------------------------------------- an API's recorded traffic

API_FIXTURES = ("@octokit/fixtures@23.1.2",)
"""Recorded traffic of a real API that its client library ships for its tests: GitHub's REST API
(132 exchanges of 22 scenarios, in nock's format: URL, request body, response), pinned."""
API_FOLDER = "npm-api-fixtures"
API_SOURCE = "api"
"""Sources of recorded API traffic are named ``api:<scenario>``."""


def api_items() -> list[Item]:
    """Each recorded exchange's URL, request body and response body (installed once from npm)."""
    return _cached("api-fixtures", _api_items)


def _api_items() -> list[Item]:
    modules = npm_packages(API_FIXTURES, API_FOLDER)
    items = []
    for path in sorted(modules.glob("@octokit/fixtures/scenarios/*/*/raw-fixture.json")):
        source = f"{API_SOURCE}:{path.parent.parent.name}/{path.parent.name}"
        for exchange in json.loads(path.read_text()):
            if isinstance(exchange, dict) and "path" in exchange:
                items += _exchange_items(source, exchange)
    return unique(items)


def _exchange_items(source: str, exchange: dict[str, Any]) -> list[Item]:
    """One recorded exchange (``scope``, ``path``, ``body``, ``response``) as items; a parsed
    body is written as JSON again (the recording keeps no bytes)."""
    items = [Item(source, URL, "", str(exchange.get("scope", "")).removesuffix(":443") + exchange["path"])]
    for place, key in ((REQUEST, "body"), (RESPONSE, "response")):
        value = exchange.get(key)
        if value not in (None, ""):
            text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
            items.append(Item(source, place, "application/json; charset=utf-8", text))
    return items


# ---------------------------------------------------------------- JSON shipped in packages

PACKAGE_GLOBS = (
    "**/botocore/data/*/*/examples-1.json",
    "**/*openapi*.json",
    "**/*swagger*.json",
    "**/schemas/**/*.json",
    "**/*.schema.json",
    "**/package.json",
    "**/package-lock.json",
    "**/*fixture*/**/*.json",
    "**/tests/**/*.json",
)
"""Real JSON in installed packages: API examples (requests and responses), OpenAPI and JSON
schema documents, npm manifests and lock files, test fixtures."""
PACKAGE_ROOTS = ("venvs", NPM_FOLDER, SAMPLE_FOLDER, "npm")
"""Where in the real-web cache the packages are: the applications' virtualenvs, the npm corpus."""
PER_GLOB = 400
"""At most this many files per pattern and root (an even spread by name)."""


def package_items() -> list[Item]:
    """Real JSON documents of installed packages (see :data:`PACKAGE_GLOBS`), each once, read as
    a JSON response would be (gathered once, then read from the cache)."""
    return _cached("packages", lambda: _package_items(package_roots()))


def _package_items(roots: Iterable[Path]) -> list[Item]:
    chosen: dict[str, Path] = {}
    for root in roots:
        for pattern in PACKAGE_GLOBS:
            files = sorted(p for p in root.glob(pattern) if p.is_file() and p.stat().st_size <= MAX_ITEM)
            for path in files[:: max(1, len(files) // PER_GLOB)][:PER_GLOB]:
                chosen.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), path)
    items = []
    for path in sorted(chosen.values(), key=str):
        text = path.read_text("utf-8", "replace")
        if _is_json(text):
            items.append(Item(_package_of(path), RESPONSE, "application/json", text))
    return items


def package_roots() -> list[Path]:
    """This interpreter's site-packages (mmina's own dependencies: botocore, moto, cfn-lint...)
    and the real-web cache's package folders that exist."""
    roots = [Path(sysconfig.get_paths()["purelib"])]
    return roots + [cache_root() / name for name in PACKAGE_ROOTS if (cache_root() / name).exists()]


def _package_of(path: Path) -> str:
    """The file as ``package:path inside it`` (each file is a source of its own: a document)."""
    parts = path.parts
    for marker in ("site-packages", "node_modules"):
        if marker in parts:
            at = len(parts) - 1 - parts[::-1].index(marker)
            return f"{parts[at + 1]}:{'/'.join(parts[at + 2 :])}"
    return f"{path.parent.name}:{path.name}"


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def sample_items() -> list[Item]:
    """The default test run's corpus: the sample applications' traffic and a spread of the
    package documents (see :data:`SAMPLE_APPS`, :data:`SAMPLE_EVERY`)."""
    packages = package_items()
    small = [i for i in packages if len(i.text) <= SAMPLE_MAX_BYTES]
    chosen = [i for n, i in enumerate(small) if i.source.startswith("botocore:") or n % SAMPLE_EVERY == 0]
    return app_items([a for a in APPS if a.name in SAMPLE_APPS]) + api_items() + chosen
