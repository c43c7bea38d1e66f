"""The ASGI application of ``mmina serve`` (Starlette): pages, JSON endpoints, images.

Every endpoint but one only reads: ``POST /api/labels`` stores a person's labels (see
``labels.py``, which also guards it against cross-site requests). Whatever a request
carries, the answer is a page or JSON:
a bad parameter is a 400 and an unknown episode a 404, each as ``{"error": "one line"}``
that the page shows; an unexpected failure is a 500 with a one-line message (the server's
log keeps the details), never a stack trace in the browser.
"""

from __future__ import annotations

import asyncio
import csv
import hmac
import io
import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import date, datetime
from decimal import Decimal
from importlib.resources import files
from typing import Any

from plotly.offline import get_plotlyjs
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from mmina import __version__
from mmina.analysis.names import DEFAULT_EVALUATOR
from mmina.analysis.paired import Side
from mmina.errors import MminaError, first_line
from mmina.evaluators.labelling import default_labeller
from mmina.serve import params, payloads
from mmina.serve.catalog import Catalog, StoredEpisode
from mmina.serve.labels import LabelEndpoints, Refused
from mmina.serve.params import BadRequest, NotFound
from mmina.serve.watcher import StoreWatcher
from mmina.store import Store
from mmina.store.sql import run_query

STATIC = "static"
IMMUTABLE = "public, max-age=31536000, immutable"
CHANGES_WAIT_S = 20.0
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
TOKEN_COOKIE = "mmina_token"
IMAGE_TYPES = {b"\xff\xd8\xff": "image/jpeg", b"\x89PNG": "image/png", b"GIF8": "image/gif"}
log = logging.getLogger("mmina.serve")


def plain(value: Any) -> Any:
    """A value DuckDB returns, as JSON: timestamps in ISO 8601, bytes by their size, NaN as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(value))} bytes>"
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return float(value) if isinstance(value, Decimal) else str(value)


class Json(JSONResponse):
    """JSON of any value the store gives (see :func:`plain`)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(plain(content), ensure_ascii=False, separators=(",", ":")).encode()


def error(status: int, message: str) -> Json:
    return Json({"error": message}, status_code=status)


async def mmina_error(request: Request, exc: Exception) -> Response:
    status = exc.status if isinstance(exc, Refused) else 404 if isinstance(exc, NotFound) else 400
    return error(status, str(exc))


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "no such page" if exc.status_code == 404 else str(exc.detail)
    return error(exc.status_code, f"{message}: {request.url.path}")


async def unexpected(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, first_line(exc))
    return error(500, f"the server could not answer: {type(exc).__name__}: {first_line(exc)}")


class Gate:
    """Only requests for this server get through: with a token, those carrying it (a cookie
    set by opening ``/?token=...``, or ``Authorization: Bearer ...``); bound to loopback,
    those whose Host is a loopback name (a web page elsewhere cannot rebind its name to us)."""

    def __init__(self, app: ASGIApp, token: str | None, hosts: Sequence[str] | None) -> None:
        self.app, self.token, self.hosts = app, token, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response = self._refusal(request)
        await (response or self.app)(scope, receive, send)

    def _refusal(self, request: Request) -> Response | None:
        if self.hosts is not None and _host_name(request.headers.get("host", "")) not in self.hosts:
            return error(400, "this server answers requests for 127.0.0.1 or localhost only")
        if self.token is None:
            return None
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            response = RedirectResponse(request.url.remove_query_params("token"), status_code=303)
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
            return response
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if any(
            hmac.compare_digest(v.encode(), self.token.encode())
            for v in (bearer, request.cookies.get(TOKEN_COOKIE, ""))
        ):
            return None
        return error(401, "this server needs its token: open the address it printed (ending in ?token=...)")


def _host_name(host: str) -> str:
    """The name part of a Host header (``[::1]:8787`` → ``::1``)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def image_response(data: bytes, etag: str, request: Request, download: bool = False) -> Response:
    """Bytes that never change under their address: cached for good, and a 304 when the
    browser has them. Anything but an image is sent as an attachment (or as text), so a
    stored page never runs as this server's page."""
    headers = {
        "ETag": f'"{etag}"',
        "Cache-Control": IMMUTABLE,
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
    }
    if request.headers.get("if-none-match") == headers["ETag"]:
        return Response(status_code=304, headers=headers)
    media = next((kind for magic, kind in IMAGE_TYPES.items() if data.startswith(magic)), None)
    if media is None or download:
        as_text = request.query_params.get("view") == "text"
        media = "text/plain; charset=utf-8" if as_text else "application/octet-stream"
        if not as_text:
            headers["Content-Disposition"] = f'attachment; filename="{etag[:16]}"'
    return Response(data, media_type=media, headers=headers)


class Endpoints:
    """The request handlers, over one store's catalog and watcher."""

    def __init__(self, store: Store, evaluator: str, labeller: str, writable: bool) -> None:
        self.catalog = Catalog(store)
        self.watcher = StoreWatcher(store, self.catalog, evaluator)
        self.analyses = payloads.Analyses(self.catalog, self.watcher)
        self.labelling = LabelEndpoints(self.catalog, labeller, writable)
        self._plotly: bytes | None = None

    async def changes(self, request: Request) -> Response:
        """Answers when the store changed after version ``since`` (or after a while): what
        keeps a page current without polling its data."""
        since = params.integer(_multi(request), "since", -1, -1, 2**62)
        version = await self.watcher.changes.wait(since, CHANGES_WAIT_S)
        return Json({"version": version, **self.watcher.progress(), "problem": self.watcher.problem})

    def runs(self, request: Request) -> Response:
        params.check_known(_multi(request), ())
        return Json(payloads.runs_page(self.catalog, self.watcher))

    def evaluators(self, request: Request) -> Response:
        return Json({"evaluators": self.watcher.evaluators()})

    def analysis(self, request: Request) -> Response:
        given = _multi(request)
        params.check_known(given, ("run", "evaluator"))
        return Json(self.analyses.page(params.many(given, "run"), self._evaluator(given)))

    def episodes(self, request: Request) -> Response:
        query = params.episode_query(_multi(request), self.watcher.default_evaluator)
        return Json(payloads.episodes_page(self.catalog, self.watcher, query))

    def facets(self, request: Request) -> Response:
        given = _multi(request)
        params.check_known(given, ("run", "evaluator"))
        return Json(payloads.facets_page(self.watcher, params.many(given, "run"), self._evaluator(given)))

    def episode(self, request: Request) -> Response:
        given = _multi(request)
        params.check_known(given, ("evaluator",))
        return Json(
            payloads.episode_page(
                self.catalog, self.watcher, request.path_params["episode_id"], self._evaluator(given)
            )
        )

    def _evaluator(self, given: params.Params) -> str:
        return (
            params.one(given, "evaluator", self.watcher.default_evaluator) or self.watcher.default_evaluator
        )

    def _episode(self, episode_id: str) -> StoredEpisode:
        """The episode's rows (its run looked up in the index, when it is there)."""
        indexed = self.watcher.index().episode(episode_id)
        return self.catalog.episode(episode_id, indexed["run_id"] if indexed else None)

    def step_image(self, request: Request) -> Response:
        episode_id, step = request.path_params["episode_id"], request.path_params["step"]
        found = self.catalog.step_image(self._episode(episode_id), step)
        if found is None:
            raise NotFound(f"step {step} of episode {episode_id} has no screenshot")
        return image_response(found[0], found[1], request)

    def blob(self, request: Request) -> Response:
        digest = params.digest(request.path_params["digest"])
        given = _multi(request)
        params.check_known(given, ("episode", "download", "view"))
        if request.headers.get("if-none-match") == f'"{digest}"':
            return image_response(b"", digest, request)
        data = self.catalog.blobs([digest], self._packs(params.one(given, "episode"))).get(digest)
        if data is None:
            raise NotFound(f"no blob {digest} in {self.catalog.store.root}")
        return image_response(data, digest, request, download=params.one(given, "download") is not None)

    def _packs(self, episode_id: str | None) -> list[str] | None:
        """Where an episode's blobs are (None, when no episode is named: every pack is searched)."""
        if episode_id is None:
            return None
        indexed = self.watcher.index().episode(episode_id)
        return indexed["blob_packs"] if indexed else self._episode(episode_id).row["blob_packs"]

    def compare(self, request: Request) -> Response:
        given = _multi(request)
        params.check_known(given, ("a", "b", "ea", "eb"))
        default = self.watcher.default_evaluator
        sides = [
            Side(_required(given, run), params.one(given, ev, default) or default)
            for run, ev in (("a", "ea"), ("b", "eb"))
        ]
        return Json(payloads.compare_page(self.catalog, *sides))

    def compare_steps(self, request: Request) -> Response:
        given = _multi(request)
        params.check_known(given, ("a", "b", "evaluator"))
        return Json(
            payloads.side_by_side(
                self.catalog,
                self.watcher,
                _required(given, "a"),
                _required(given, "b"),
                self._evaluator(given),
            )
        )

    async def sql(self, request: Request) -> Response:
        query = await _sql_query(request)
        return Json(await run_in_threadpool(payloads.sql_page, self.catalog, query))

    async def sql_csv(self, request: Request) -> Response:
        query = await _sql_query(request)
        result = await run_in_threadpool(run_query, self.catalog.store, query)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([_csv_cell(v) for v in row] for row in result.rows)
        return Response(
            out.getvalue(),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="mmina-query.csv"'},
        )

    def label_config(self, request: Request) -> Response:
        return Json(self.labelling.config(request))

    def labels(self, request: Request) -> Response:
        return Json(self.labelling.labels(request))

    def label_queue(self, request: Request) -> Response:
        return Json(self.labelling.queue(request))

    async def save_labels(self, request: Request) -> Response:
        return Json(await self.labelling.save(request))

    def plotly(self, request: Request) -> Response:
        if self._plotly is None:
            self._plotly = get_plotlyjs().encode()
        return Response(
            self._plotly,
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=86400", "ETag": f'"plotly-{__version__}"'},
        )


def _multi(request: Request) -> dict[str, list[str]]:
    """The query string as lists of values (names may repeat: ``run=a&run=b``)."""
    return params.grouped(request.query_params.multi_items())


def _required(given: params.Params, name: str) -> str:
    value = params.one(given, name)
    if value is None:
        raise BadRequest(f"parameter {name} is required")
    return value


async def _sql_query(request: Request) -> str:
    """The ``query`` of a JSON body ``{"query": "..."}``."""
    try:
        body = json.loads(await request.body() or b"null")
    except ValueError:
        raise BadRequest('send the query as JSON: {"query": "select ..."}') from None
    query = body.get("query") if isinstance(body, dict) else None
    if not isinstance(query, str) or not query.strip():
        raise BadRequest('send the query as JSON: {"query": "select ..."}')
    return query


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(plain(value), ensure_ascii=False)
    return plain(value)


def create_app(
    store: Store,
    token: str | None = None,
    hosts: Sequence[str] | None = LOOPBACK_HOSTS,
    evaluator: str = DEFAULT_EVALUATOR,
    labeller: str | None = None,
    writable: bool = True,
) -> Starlette:
    """The application over ``store``: ``token`` (if any) is asked of every request, and
    ``hosts`` (if any) are the only Host names answered; labels are saved under ``labeller``
    (default: the operating-system user) unless the page names another, and not at all
    unless ``writable``."""
    handlers = Endpoints(store, evaluator, labeller or default_labeller(), writable)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        handlers.watcher.changes.bind(asyncio.get_running_loop())
        handlers.watcher.start()
        try:
            yield
        finally:
            handlers.watcher.stop()

    app = Starlette(
        routes=_routes(handlers),
        lifespan=lifespan,
        exception_handlers={MminaError: mmina_error, HTTPException: http_error, Exception: unexpected},
    )
    app.add_middleware(Gate, token=token, hosts=hosts)
    app.state.endpoints = handlers
    return app


def _routes(handlers: Endpoints) -> list[Route | Mount]:
    page: Callable[[Request], Response] = lambda request: FileResponse(  # noqa: E731
        _static_file("index.html"), headers={"Cache-Control": "no-cache"}
    )
    return [
        Route("/", page),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/changes", handlers.changes),
        Route("/api/runs", handlers.runs),
        Route("/api/evaluators", handlers.evaluators),
        Route("/api/analysis", handlers.analysis),
        Route("/api/episodes", handlers.episodes),
        Route("/api/facets", handlers.facets),
        Route("/api/episodes/{episode_id}", handlers.episode),
        Route("/api/episodes/{episode_id}/steps/{step:int}/image", handlers.step_image),
        Route("/api/episodes/{episode_id}/labels", handlers.labels),
        Route("/api/labels", handlers.save_labels, methods=["POST"]),
        Route("/api/labels/config", handlers.label_config),
        Route("/api/labels/queue", handlers.label_queue),
        Route("/api/compare", handlers.compare),
        Route("/api/compare/steps", handlers.compare_steps),
        Route("/api/sql", handlers.sql, methods=["POST"]),
        Route("/api/sql.csv", handlers.sql_csv, methods=["POST"]),
        Route("/blobs/{digest}", handlers.blob),
        Route("/static/plotly.min.js", handlers.plotly),
        Mount("/static", StaticFiles(packages=[("mmina.serve", STATIC)])),
    ]


def _static_file(name: str) -> str:
    return str(files("mmina.serve") / STATIC / name)
