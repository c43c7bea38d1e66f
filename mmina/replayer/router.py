"""Playwright side of replay: answer every request of a browser context from the archive.

The only replayer module that touches Playwright. ``ArchiveRouter.prepare`` is handed to
``BrowserSession.episode`` so the context is routed and its clock set before the first page
opens (``Math.random`` and ``crypto`` are seeded by the recorder, with the source episode's seed).

**The clock.** ``clock.install`` starts the page's clock (``Date``, ``performance.now``,
timers; animation frames keep the browser's rendering steps, ``page_clock.FRAMES``) at the
recorded episode's start, and it then runs in real time: it is not pinned with
``set_fixed_time``. A pinned ``Date.now()`` with running timers breaks code that compares the
time with a due time — RxJS ``debounceTime``, lodash ``debounce`` and ``throttle`` re-arm
forever and never fire. So a page reads the recorded start plus the time the replay has taken
so far (a page that prints the time when it loads shows the recorded one, to the second when it
loads as promptly as it did). Real time, not the recorded pace: see docs/replay.md, "The replay
clock".

**The recorded pace.** In a paced replay (stored actions, ``mmina.replayer.pace``) a fetch or
XHR is answered no sooner than its recorded exchange took (at most ``MAX_HOLD_S``): a loading
bar or a status region shows as long as it did, and a long-poll (engine.io, SockJS) is held as
its server held it. Documents, scripts, styles and images are answered at once.

**Sockets.** A WebSocket the page opens is played from its recorded conversation by the clock
(``mmina.replayer.sockets``), and what was said on it is kept for the replay run's ``requests``.

**SharedWorkers.** Playwright routes a SharedWorker's script (the page's request) but not the
requests the worker makes itself: those are paused in the worker (``Fetch`` on its DevTools
channel, from before it runs) and answered here like any other (``mmina.replayer.worker_route``).

**Streams.** A fetch/XHR body recorded in chunks (``x-mmina-chunks``) is fulfilled whole, with
that header, and :data:`STREAMED_FETCH` (an init script) hands it to a page that reads it with
``fetch`` in its recorded chunks at its recorded pace, so a page reading a stream sees what it
saw (a stream it aborted mid-way included).

**The order with the observations.** In a paced replay, a held fetch/XHR response, a socket's
message and a stream's chunk that the recording received after an observation read the page wait until
the replay has taken that observation, and the pacer waits for those received before it
(``mmina.replayer.turns``): a stream's chunks ask for their turn through a binding
(``__mminaChunk``), named by the ``x-mmina-stream`` header of their response.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Hashable
from dataclasses import astuple, dataclass, field, replace
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

from playwright.async_api import BrowserContext, Request, Route, WebSocketRoute
from playwright.async_api import Error as PlaywrightError

from mmina.recorder.browser import REDIRECT_MARK
from mmina.recorder.har import CHUNKS_HEADER, TAKEN_HEADER, RoutedTraffic
from mmina.recorder.web_workers import WorkerChannel, WorkerScripts, WorkerStart
from mmina.redaction.redact import is_text_type
from mmina.replayer.archive import (
    MAX_REDIRECTS,
    NOT_ARCHIVED_STATUS,
    Archive,
    Exchange,
    Matcher,
    MatchKind,
    Reply,
    redirect_loop_reply,
    redirect_target,
    redirected_method,
    reply_for,
    shape,
    unmatched_reply,
)
from mmina.replayer.body_server import LARGE_BODY, BodyServer
from mmina.replayer.echoes import Echoes, differing, places
from mmina.replayer.fidelity import SocketFidelity, compare_sockets
from mmina.replayer.page_clock import FRAMES, PageClock
from mmina.replayer.socket_route import SocketPlayer
from mmina.replayer.sockets import PAGE, SERVER, Message, heartbeat_kind, parse_messages
from mmina.replayer.timeline import GRACE_S, Timeline
from mmina.replayer.turns import Expected, Turns
from mmina.replayer.worker_clock import clock_in_workers
from mmina.replayer.worker_route import WorkerRequest, WorkerRoute

STREAM_HEADER = "x-mmina-stream"
"""Names a paced replay's stream for its chunks' turns (``__mminaChunk``); the page never sees it."""
STREAMED_FETCH = """(() => {
  const native = window.fetch;
  if (!native || native.__mmina) return;
  const HEADER = '%s', STREAM = '%s';
  async function fetch(...args) {
    const response = await native.apply(this, args);
    const timing = response.headers.get(HEADER);
    if (!timing || !response.body) return response;
    const bytes = new Uint8Array(await response.arrayBuffer());
    const chunks = timing.split(',').map(part => part.split('@').map(Number));
    const flowing = window.__mminaStreams = window.__mminaStreams || new Set();
    const key = response.headers.get(STREAM);
    const turn = index => (key && window.__mminaChunk ? \
window.__mminaChunk(key, index) : Promise.resolve()).catch(() => {});
    let inTurn = Promise.resolve();
    const body = new ReadableStream({start(controller) {
      let offset = 0;
      flowing.add(controller);
      chunks.forEach(([size, at], index) => {
        const last = index === chunks.length - 1;
        const piece = bytes.slice(offset, last ? bytes.length : offset + size);
        offset += size;
        setTimeout(() => {
          inTurn = inTurn.then(() => turn(index)).then(() => {
            if (last) flowing.delete(controller);
            try { controller.enqueue(piece); if (last) controller.close(); } catch (e) {}
          });
        }, at);
      });
    }, cancel() { flowing.clear(); turn(-1); }});
    const headers = new Headers(response.headers);
    headers.delete(HEADER);
    headers.delete(STREAM);
    const streamed = new Response(body, {status: response.status, statusText: response.statusText, headers});
    for (const name of ['url', 'redirected', 'type']) Object.defineProperty(streamed, name, {value: response[name]});
    return streamed;
  }
  fetch.__mmina = true;
  window.fetch = fetch;
})();""" % (CHUNKS_HEADER, STREAM_HEADER)
"""Hands a body recorded in chunks to the page in those chunks, each at its recorded time
after the response and, in a paced replay, in its turn (see the module). A stream still flowing
is in ``window.__mminaStreams``, which settling waits on as a recording waits on the network."""
SOCKET_SCHEMES = ("ws://", "wss://")
ENGINE_IO_SEPARATOR = "\x1e"
"""Between the packets of one engine.io (v4) long-poll body."""
HELD_TYPES = frozenset({"fetch", "xhr"})
"""What a paced replay answers in its recorded time: a page's own requests, whose latency it shows
(a loading bar, a status region, a long-poll held by its server until something happened)."""
RESUMED_TYPES = HELD_TYPES | {"document"}
"""What the page's clock runs on as it is handed over (``ArchiveRouter._resume``): what a page computes from."""
ALIGN_MAX_S = 1.0
"""On the timeline, how much longer than its exchange took a response may be held to reach the
page at its recorded moment, when the page asked for it early (``due_on_timeline``)."""
MAX_HOLD_S = 60.0
"""No answer is held longer than this, whatever the recording says."""
OPEN_ALIGN_MAX_S = 5.0
"""On the timeline, a socket the page opens early waits for its recorded opening at most this long."""
RESUME_MAX_S = 1.0
"""How long a page's data waits for the page's frames to hear that time goes on (``_resume``): a
frame told late works on its data at a standing clock (telling took up to 0.24 s at load 8-13,
beside two burners; 0.25 s was the bound before)."""
ROUTE_DEADLINE_S = 10.0
"""A request is answered within this, whatever happens inside the router (a request left
unanswered holds its page, and every read of the page, for good)."""


@dataclass(frozen=True, kw_only=True)
class Served:
    """One request the router answered, for the fidelity report and coverage gaps."""

    at: datetime
    method: str
    url: str
    kind: MatchKind
    status: int
    missing_body: bool = False
    """Matched, but the recording could not keep the response's body (a fidelity defect): served
    empty, or with a repeat's body."""
    failed: bool = False
    """The router could not answer in time (or failed) and answered with an error instead."""
    redacted_body: bool = False
    """Matched, but redaction changed the recorded body: the page got other bytes than it did (a defect)."""
    recorded_url: str | None = None
    """The recorded request that served it (None: unmatched, a synthetic answer)."""
    recorded_order: int | None = None
    """That request's place in the episode's archive (``requests.seq`` order)."""
    recorded_episode: str | None = None
    recorded_seq: int | None = None
    """That request's episode and ``requests.seq`` (the replay's ``requests.replay_source_*``)."""
    handed_at: float | None = None
    """When the router began handing the answer over (wall-clock seconds), after any hold for the
    recorded pace or the timeline (None: it did not, or not yet): the replay's row keeps it
    (``x-mmina-handed``, ``mmina.recorder.har``), so the hand-over's own time is known apart from
    the holding."""

    def columns(self) -> dict[str, object]:
        """The replay's ``requests`` columns saying how this request was answered."""
        return {
            "replay_match": "failed" if self.failed else self.kind.value,
            "replay_source_episode": self.recorded_episode,
            "replay_source_seq": self.recorded_seq,
        }


@dataclass(frozen=True)
class Held:
    """A paced answer held for its turn: its name among the deliveries, and how many slots
    earlier than recorded it may go (0, or less: ``Turns.answer_slot``)."""

    name: Hashable | None
    shift: int = 0
    cap: Hashable | None = None
    """Its cap on the timeline, lifted once the page has it (None: no timeline)."""


@dataclass
class ArchiveRouter:
    """Routes one context to one archive; never continues a request to the network."""

    archive: Archive
    starts_at: datetime
    served: list[Served] = field(default_factory=list)
    paced: bool = False
    """Keep the recorded pace: a fetch/XHR is answered no sooner than it was when recorded."""
    on_socket: Callable[[], None] | None = None
    """Told when the page opens a socket (the pace keeps its timeline from the first one)."""
    turns: Turns | None = None
    """Keeps what reaches the page in its recorded order with the observations (paced replays)."""
    timeline: Timeline | None = None
    """The recorded timeline the page's clock follows (paced replays; ``mmina.replayer.timeline``):
    every response is then held until τ reaches its recorded arrival, documents and scripts included."""
    large_body: int = LARGE_BODY
    """Bodies this large or larger reach the page through the body server (``mmina.replayer.body_server``)."""
    trusted_tls: bool = False
    """Whether the context takes the body server's certificate (an offline one does: ``Offline``),
    so that large ``https:`` bodies go through it too; else they are fulfilled."""

    def __post_init__(self) -> None:
        self.clock = PageClock(self.timeline, self.starts_at) if self.timeline is not None else None
        if self.timeline is not None:
            start_ms = self.starts_at.timestamp() * 1e3
            self.timeline.expect(
                (("request", e.order), (e.started_ms - start_ms) / 1e3, shape(e.method, e.url, None).endpoint)
                for e in self.archive.exchanges
                if e.started_ms is not None
            )
        self.matcher = Matcher(self.archive)
        self._last_match: Exchange | None = None
        self.sockets: list[SocketPlayer] = []
        """The sockets played to the page, with what was said on them (``traffic``)."""
        self._streams: dict[str, list[Expected]] = {}
        """A paced replay's streams: each chunk's slot and when it is due."""
        self._names = itertools.count(1)
        self.echoes = Echoes()
        """The ids the page sent in place of the recorded ones, for the replies that echo them."""
        self._posted: dict[str, list[Message]] = {}
        """What the page posted over engine.io long-polling, by session (``sid``), for the comparison."""
        self.bodies = BodyServer()
        """Serves the large bodies (``mmina.replayer.body_server``)."""
        self.aliases: dict[str, str] = {}
        """The body server's addresses, each with the URL it answered for (the context's HAR has the former)."""
        self.workers: WorkerScripts | None = None
        """The context's Web Worker scripts (``mmina.recorder.web_workers``), once prepared."""
        self._worker_routes: set[asyncio.Task[None]] = set()
        """SharedWorkers' own requests being answered (``mmina.replayer.worker_route``)."""
        self._worker_channels: list[WorkerChannel] = []
        self._workers_live = False
        """Whether SharedWorkers' own requests go to the network (:meth:`let_workers_go`)."""

    async def prepare(self, context: BrowserContext) -> None:
        """Set the clock, stream recorded chunks and route everything (before any page opens;
        see the module). ``Math.random`` is seeded as in the recording (``recorder/seeding.py``)."""
        await context.clock.install(time=self.starts_at)
        await context.add_init_script(FRAMES)  # animation frames stay the browser's (page_clock.py)
        if self.clock is not None:
            await self.clock.prepare(context)
        self.workers = clock_in_workers(context, self.clock, self.starts_at)
        self.workers.on_shared(self._shared_worker)
        await context.add_init_script(STREAMED_FETCH)
        if self.turns is not None:
            await context.expose_binding("__mminaChunk", self._chunk)
        await context.route("**/*", self._handle)
        await context.route_web_socket("**/*", self._socket)
        context.on("close", lambda _context: self.bodies.close())

    async def _shared_worker(self, _start: WorkerStart, channel: WorkerChannel) -> None:
        """A SharedWorker's own requests are answered from the archive too, through its channel
        (``mmina.replayer.worker_route``), from before it runs."""
        if self._workers_live:
            return

        def paused(event: dict[str, object]) -> None:
            route = WorkerRoute(channel, event)
            work = _continued(route) if self._workers_live else self._handle(route)
            task = asyncio.get_running_loop().create_task(work)
            self._worker_routes.add(task)
            task.add_done_callback(self._worker_routes.discard)

        channel.on("Fetch.requestPaused", paused)
        self._worker_channels.append(channel)
        await channel.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})

    async def let_workers_go(self) -> None:
        """From now on SharedWorkers' own requests go to the network, as the context's do once it
        is no longer routed (a hand-over to the live web: ``mmina.replayer.handover``)."""
        self._workers_live = True
        channels, self._worker_channels = self._worker_channels, []
        for channel in channels:
            try:
                await channel.call("Fetch.disable")
            except (TimeoutError, PlaywrightError):
                pass  # the worker went away meanwhile

    async def _socket(self, socket: WebSocketRoute) -> None:
        """A WebSocket the page opens talks to its recorded conversation, played in time
        (``mmina.replayer.sockets``), never to the server."""
        exchange = self._match("GET", socket.url, None, "")
        if exchange is None or exchange.status <= 0:
            await socket.close(code=1011, reason="mmina replay: no such socket in the archive")
            return
        await self._open_on_timeline(exchange)
        self.sockets.append(
            SocketPlayer.start(
                socket, exchange, self.turns, self._polled(exchange), self.echoes, self.timeline
            )
        )
        if self.on_socket is not None:
            self.on_socket()

    async def _open_on_timeline(self, exchange: Exchange) -> None:
        """On the timeline, a socket the page opens earlier than the recording's page had it open
        opens at its recorded moment (the page's WebSocket stays connecting until this handler
        returns), at most ``OPEN_ALIGN_MAX_S`` later, the page's time held there meanwhile. The
        recorded moment is its first message's, either way (a server may hold the handshake:
        jupyter_server until the kernel is ready; the page says something on opening, or the
        server greets it): a notebook page that connects before an observation that the recording
        took before its kernel was ready shows what that observation showed ("Kernel starting")."""
        said = parse_messages(exchange.body, 0.0) if exchange.started_ms else []
        if self.timeline is None or not said:
            return
        asked = self.timeline.now()
        opened = min(m.at for m in said) - self.starts_at.timestamp()
        if opened <= asked:
            return
        due = min(opened, asked + OPEN_ALIGN_MAX_S)
        cap = ("open", next(self._names))
        self.timeline.hold(cap, due)
        try:
            await self.timeline.reach(due)
        finally:
            self.timeline.lift(cap)

    def socket_fidelity(
        self, recorded_until: float | None = None, replayed_until: float | None = None
    ) -> tuple[SocketFidelity, ...]:
        """Every recorded socket compared with the one the page opened again (message by
        message; one the page never opened again has every message missing). Only what was said
        before the episode's last observation (``recorded_until``: when the recording's read the
        page, ``replayed_until``: when the replay's was taken, having waited for what came before
        it while what came after was held; wall-clock seconds, None: everything) is compared:
        what comes later can change no observation, and a replay, which does not wait for
        ``stop``, ends sooner than its recording did."""
        played = {player.exchange.order: player for player in self.sockets}
        return tuple(
            compare_sockets(
                e.url,
                said_before(self._session(e), recorded_until),
                said_before(self._replayed_session(played[e.order]), replayed_until)
                if e.order in played
                else [],
            )
            for e in self.archive.exchanges
            if e.url.startswith(SOCKET_SCHEMES)
        )

    def _session(self, socket: Exchange) -> list[Message]:
        """A recorded socket's session: its messages and what the page posted over long-polling
        in the same session, before its upgrade or after (wall-clock seconds): which transport
        carried a page message follows when the page upgraded, which a replay need not repeat."""
        return sorted(
            [*parse_messages(socket.body, 0.0), *self._polled(socket, since_open=False)], key=lambda m: m.at
        )

    def _replayed_session(self, player: SocketPlayer) -> list[Message]:
        """A replayed socket's session, as :meth:`_session` has the recording's."""
        sid = parse_qs(urlsplit(player.socket.url).query).get("sid", [""])[0]
        return sorted([*player.said(), *self._posted.get(sid, [])], key=lambda m: m.at)

    def _polled(self, socket: Exchange, since_open: bool = True) -> list[Message]:
        """What the recorded page posted over engine.io long-polling in ``socket``'s session
        (the same ``sid``; with ``since_open``, once the socket was open), each packet timed in
        wall-clock seconds."""
        sid = _polling_sid(socket.url.replace("transport=websocket", "transport=polling"))
        if sid is None or socket.started_ms is None:
            return []
        opened = socket.started_ms if since_open else 0.0
        return [
            Message(PAGE, packet, e.started_ms / 1e3)
            for e in self.archive.exchanges
            if e.method == "POST"
            and e.request_body
            and e.started_ms
            and e.started_ms >= opened
            and _polling_sid(e.url) == sid
            for packet in e.request_body.decode("utf-8", "replace").split(ENGINE_IO_SEPARATOR)
        ]

    def traffic(self) -> RoutedTraffic:
        """The sockets played, as HAR entries (a routed socket has none in the context's HAR),
        so the replay run's ``requests`` keep what was said on them (their players stop), the
        body server's addresses with the URLs they answered for, and how each request was
        answered (``requests.replay_match`` and its source), by method and URL in the order asked."""
        for player in self.sockets:
            player.stop()
        columns: dict[tuple[str, str], list[dict[str, object]]] = {}
        handed: dict[tuple[str, str], list[float | None]] = {}
        for served in self.served:
            columns.setdefault((served.method, served.url), []).append(served.columns())
            handed.setdefault((served.method, served.url), []).append(served.handed_at)
        return RoutedTraffic(
            [player.har_entry() for player in self.sockets], dict(self.aliases), columns, handed
        )

    async def _handle(self, route: Route | WorkerRoute) -> None:
        """Answer one request from the archive; every request gets an answer, whatever happens.

        A routed request left unanswered stays paused in the browser for good: its page never
        loads, and a navigation or tree read waiting on it times out. So a failure of our own
        (a bug, a body we cannot read) is answered with a 500 naming it, and an answer not
        ready within ``ROUTE_DEADLINE_S`` with a 504, never left pending.
        """
        request = route.request
        if self.workers is not None:
            await self.workers.ready(request.url)  # a SharedWorker's script: once its scripts are in
        asked = asyncio.get_running_loop().time()
        asked_at = self.timeline.now() if self.timeline is not None else 0.0
        self._feed_sockets(request)
        logged: int | None = None
        try:
            reply, logged = await asyncio.wait_for(self._logged_reply(request), ROUTE_DEADLINE_S)
        except TimeoutError:
            reply = self._failed(request, 504, f"no answer within {ROUTE_DEADLINE_S:g} s")
        except asyncio.CancelledError:  # the context closed first: still a request never answered
            self._failed(request, 504, "the context closed before the answer was ready")
            raise
        except Exception as exc:  # noqa: BLE001 - see above: an unanswered request hangs its page
            reply = self._failed(request, 500, f"{type(exc).__name__}: {exc}")
        held = await self._hold(reply, asked, asked_at, request.resource_type) if self.paced else None
        try:
            await self._resume(held, request.resource_type, reply)
            if reply.status <= 0:  # no response when recorded: fail it again
                await route.abort("failed")
            else:
                if self.clock is not None and request.resource_type == "document":
                    reply = replace(reply, headers=self.clock.document_headers(reply.headers))
                self._handed(logged)
                await self._deliver(route, reply)
        except PlaywrightError:
            pass  # the page or tab went away while we answered: nothing left to serve
        finally:
            if held is not None and held.cap is not None and self.timeline is not None:
                self.timeline.lift(held.cap)
        if held is not None and held.name is not None:
            self._answered(held, reply)

    async def _resume(self, held: Held | None, kind: str, reply: Reply) -> None:
        """A page's own data (a document, a fetch or XHR answer, fulfilled at once: not a large
        body) is handed over once its cap is lifted and, where the page's clock may stand at a cap,
        once every frame has heard, τ standing still meanwhile, that time goes on (for at most
        ``RESUME_MAX_S``): the page's time then runs while the response reaches it and the page
        works on it, as the recording's page's did, instead of standing until the page's next
        question is answered — which a page busy with what it was just handed asks only once its
        work is done (a dashboard stamped its data with the arrival itself, the milliseconds the
        recording's page took to render it missing; a second's rest crossed, "35 seconds ago" read
        "34"). The page's clock may stand at a cap (see :meth:`_caps_to_lift`):

        * where its own cap holds τ;
        * where an action's input is not dispatched yet (``steps.dispatch_ms``), τ standing at its
          recorded end or running towards it: what the input made the page ask for reached it
          (due before the input's recorded end), and the page works on it while the replayed
          input ends (a click's round trip, slower on a loaded machine) — the input's hold is
          lifted with the response's (τ goes on from there), except an input of keys (typing),
          whose later keys must still reach the page at the recorded time;
        * where a frame may still go by a cap lifted since it heard of it (``PageClock.behind``:
          the input's hold lifted as its dispatch ended, just before the page's data came).

        A document's frame has no page to tell until it has it: it reads the news from its own
        headers, the cap lifted. Scripts, styles, images and large bodies keep their cap until
        handed over (a 6 MB bundle served late must not move the page's time on)."""
        if held is None or held.cap is None or self.timeline is None:
            return
        if kind not in RESUMED_TYPES or len(reply.body) >= self.large_body:
            return
        caps = self._caps_to_lift(held.cap, kind)
        if caps is not None and self.clock is not None:
            try:
                await asyncio.wait_for(self.clock.resume(*caps), RESUME_MAX_S)
            except TimeoutError:
                pass  # a frame busy or going away: it hears the news when it can, τ stood meanwhile
        for cap in caps or [held.cap]:
            self.timeline.lift(cap)

    def _caps_to_lift(self, cap: Hashable, kind: str) -> list[Hashable] | None:
        """The caps to lift with a page's data whose cap is ``cap``, when its frames must hear of it
        first (see :meth:`_resume`; None: they need not, only ``cap`` is lifted)."""
        if kind == "document" or self.clock is None or self.timeline is None:
            return None
        inputs = self.timeline.inputs()
        if inputs or self.timeline.standing_at(cap) or self.clock.behind():
            return [cap, *inputs]
        return None

    async def _deliver(self, route: Route | WorkerRoute, reply: Reply) -> None:
        """Hand ``reply`` to the browser: a large body through the loopback body server (once the
        browser has it all: ``mmina.replayer.body_server``), any other by fulfilling the route."""
        if not BodyServer.takes(route.request.url, reply, self.large_body, self.trusted_tls):
            await route.fulfill(status=reply.status, headers=reply.headers, body=reply.body)
            return
        url, key = await self.bodies.offer(route.request.url, reply)
        self.aliases[url] = route.request.url
        try:
            await route.continue_(url=url)
        except PlaywrightError:
            self.bodies.withdraw(key)
            raise
        await self.bodies.sent(key, ROUTE_DEADLINE_S)

    async def _hold(self, reply: Reply, asked: float, asked_at: float, kind: str) -> Held | None:
        """Hold a paced answer as long as its recorded exchange took — on the timeline, any answer,
        the page's time held at its recorded arrival until the page has it; else a fetch/XHR, in
        real time — and, when the replay keeps the order with the observations, until its turn.
        What to do once the page has it (None: nothing)."""
        cap = await self._on_timeline(reply, asked_at, kind) if self.timeline is not None else None
        capped = Held(None, cap=cap) if cap is not None else None
        if kind not in HELD_TYPES:
            return capped
        loop = asyncio.get_running_loop()
        due = asked + reply.recorded_s if cap is None else loop.time()
        if self.turns is None or reply.arrived_at is None:
            await asyncio.sleep(due - loop.time())
            return capped
        slot = self.turns.answer_slot(reply.asked_at, reply.arrived_at)
        held = Held(("fetch", next(self._names)), slot - self.turns.slot(reply.arrived_at), cap)
        self.turns.expect(held.name, slot, due, reply.arrived_at)
        try:
            await asyncio.sleep(due - loop.time())
            if cap is not None and self.timeline is not None and not self.turns.may_deliver(slot):
                self.timeline.lift(cap)  # its turn comes after an observation: the page's time goes on to it
            await self.turns.turn(slot)
        except asyncio.CancelledError:
            self.turns.dropped(held.name)
            if cap is not None and self.timeline is not None:
                self.timeline.lift(cap)
            raise
        return held

    async def _on_timeline(self, reply: Reply, asked_at: float, kind: str) -> Hashable:
        """Hold ``reply`` until τ reaches the moment it reached the recording's page, the page's
        time held there meanwhile: its cap, to lift once the page has it (see :func:`due_on_timeline`).
        Anything but a fetch or XHR is what the page's loading waits on (``Timeline.hold``'s
        ``awaited``: a document, script, style, image)."""
        assert self.timeline is not None
        cap = ("answer", next(self._names))
        landed = reply.landed_at - self.starts_at.timestamp() if reply.landed_at is not None else None
        due = due_on_timeline(asked_at, reply.recorded_s, landed, self.timeline.held_at("observe"))
        self.timeline.hold(cap, due, awaited=kind not in HELD_TYPES)
        try:
            await self.timeline.reach(due, GRACE_S)
        except asyncio.CancelledError:
            self.timeline.lift(cap)
            raise
        return cap

    def _answered(self, held: Held, reply: Reply) -> None:
        """A held answer reached the page; its body's chunks, if it has some, are on their way
        (each in its recorded slot, moved as the answer's was: ``Turns.answer_slot``)."""
        assert self.turns is not None and reply.arrived_at is not None
        now = asyncio.get_running_loop().time()
        stream = reply.headers.get(STREAM_HEADER)
        if stream is not None:
            offsets = [
                float(part.partition("@")[2] or 0) / 1e3 for part in reply.headers[CHUNKS_HEADER].split(",")
            ]
            stood = self.turns.stood()  # the chunks are due on the page's clock from now
            chunks = [
                Expected(
                    self.turns.slot(reply.arrived_at + offset) + held.shift,
                    now + offset,
                    reply.arrived_at + offset,
                    stood=stood,
                )
                for offset in offsets
            ]
            self._streams[stream] = chunks
            self.turns.expect(("stream", stream), *astuple(chunks[0]))  # before: never a moment with neither
        self.turns.delivered(held.name, now)

    async def _chunk(self, _source: object, stream: str, index: int) -> None:
        """A page's stream asks to hand over its chunk ``index`` (-1: the page cancelled it):
        answered in the chunk's turn (see the module)."""
        assert self.turns is not None
        chunks, name = self._streams.get(stream), ("stream", stream)
        if chunks is None or not 0 <= index < len(chunks):
            self.turns.dropped(name)
            return
        await self.turns.turn(chunks[index].slot)
        following = chunks[index + 1] if index + 1 < len(chunks) else None
        self.turns.delivered(name, asyncio.get_running_loop().time(), following)

    def _feed_sockets(self, request: Request | WorkerRequest) -> None:
        """A long-poll POST (engine.io's ``transport=polling``) carries page messages of a session
        whose WebSocket may be open already: that socket's script hears them as if said on it, so
        its server messages follow them whichever transport the page used (it upgrades when it
        does, not when it did)."""
        body = request.post_data_buffer if request.method == "POST" else None
        sid = _polling_sid(request.url) if body else None
        if body is None or sid is None:
            return
        packets = body.decode("utf-8", "replace").split(ENGINE_IO_SEPARATOR)
        self._posted.setdefault(sid, []).extend(Message(PAGE, packet, time.time()) for packet in packets)
        for player in self.sockets:
            if parse_qs(urlsplit(player.socket.url).query).get("sid") == [sid]:
                for packet in packets:
                    player.heard_elsewhere(packet)

    def _handed(self, logged: int | None) -> None:
        """The answer logged at ``served[logged]`` is being handed over now (see ``Served.handed_at``)."""
        if logged is not None:
            self.served[logged] = replace(self.served[logged], handed_at=time.time())

    async def _logged_reply(self, request: Request | WorkerRequest) -> tuple[Reply, int | None]:
        """:meth:`_reply`, and where in :attr:`served` the request itself is logged (None: nowhere).
        Its log entries are the ones :meth:`_reply` appends, before it awaits anything."""
        first = len(self.served)
        reply = await self._reply(request)
        return reply, first if len(self.served) > first else None

    async def _reply(self, request: Request | WorkerRequest) -> Reply:
        """The archive's answer to one request; a body recorded in chunks keeps its timing
        for the page's ``fetch`` (see :data:`STREAMED_FETCH`)."""
        reply = self._answer(request)
        exchange = self._last_match  # the chain's final exchange (matched last, no await between)
        if exchange is None:
            return reply
        if request.resource_type not in HELD_TYPES:
            took = min(max(0.0, exchange.time_ms) / 1e3, MAX_HOLD_S)
            asked = exchange.started_ms / 1e3 if exchange.started_ms else None
            return replace(reply, recorded_s=took, landed_at=asked + took if asked is not None else None)
        if exchange.chunks and request.resource_type == "fetch" and reply.status < 300:
            stream = {STREAM_HEADER: str(next(self._names))} if self.turns is not None else {}
            reply = Reply(
                reply.status, {**reply.headers, CHUNKS_HEADER: exchange.chunks, **stream}, reply.body
            )
        until_headers = _until_headers(exchange) / 1e3
        asked = exchange.started_ms / 1e3 if exchange.started_ms else None
        arrived = asked + until_headers if asked is not None else None
        return replace(
            reply,
            recorded_s=min(until_headers, MAX_HOLD_S),
            arrived_at=arrived,
            asked_at=asked,
            landed_at=asked + max(until_headers, _taken_s(exchange) or 0.0) if asked is not None else None,
        )

    def _failed(self, request: Request | WorkerRequest, status: int, why: str) -> Reply:
        """The error a request gets when the router could not answer it (logged as failed)."""
        self.served.append(
            Served(
                at=datetime.now(UTC),
                method=request.method,
                url=request.url,
                kind=MatchKind.UNMATCHED,
                status=status,
                failed=True,
            )
        )
        return Reply(
            status,
            {"content-type": "text/plain; charset=utf-8", "x-mmina-replay": "router-error"},
            f"mmina replay: could not answer {request.url}: {why}\n".encode(),
        )

    def _answer(self, request: Request | WorkerRequest) -> Reply:
        method, url, body = request.method, request.url, request.post_data_buffer
        exchange = self._match(method, url, body, request.headers.get("content-type", ""))
        if exchange is not None and redirect_target(exchange, url) and request.is_navigation_request():
            return self._redirect_page(method, url, body, exchange)
        reply = self._follow(method, url, body, exchange)
        return self._echoed(reply, exchange, url, body)

    def _echoed(self, reply: Reply, exchange: Exchange | None, url: str, body: bytes | None) -> Reply:
        """``reply`` with the ids the page sent in place of the recorded ones it echoes
        (``mmina.replayer.echoes``): learned from this request and the episode's before it."""
        recorded, replayed = (
            (places(exchange.url, exchange.request_body), places(url, body)) if exchange else ({}, {})
        )
        learning = bool(differing(recorded, replayed))
        if not (learning or self.echoes) or not is_text_type(reply.headers.get("content-type", "")):
            return reply  # nothing to learn or rewrite: a body (a multi-MB bundle) is not read at all
        text = reply.body.decode("utf-8", "replace")
        if learning:
            self.echoes.learn(recorded, replayed, text)
        rewritten = self.echoes.rewrite(text)
        return reply if rewritten == text else replace(reply, body=rewritten.encode())

    def _redirect_page(self, method: str, url: str, body: bytes | None, exchange: Exchange) -> Reply:
        """A navigation the recording redirected: follow the recorded chain inside the archive
        (as Playwright's HAR router does) and answer with a page that replaces itself by the
        chain's final URL, whose own request is then routed and answered like any other.

        Not ``Route._redirect_navigation_request`` (what Playwright's HAR replay uses): in 1.65
        it starts a navigation inside the driver whose failure nobody handles, so when that
        navigation is aborted (the next hop of a 302 -> 301 chain redirecting it again, or the
        page navigating elsewhere first) the driver process dies of an unhandled rejection.
        Cookies the redirects set come with the page (those the recording did not redact);
        ``location.replace`` keeps the history as the redirect left it (one entry, the final
        URL). The final page sees the stand-in's URL as its referrer, not the original one.
        """
        cookies: list[str] = []
        for _hop in range(MAX_REDIRECTS + 1):
            cookies += [c for c in reply_for(exchange).headers.get("set-cookie", "").split("\n") if c]
            target = redirect_target(exchange, url)
            next_method = redirected_method(exchange.status, method)
            body = body if next_method == method else None
            method, url = next_method, target or url
            upcoming = self.matcher.peek(method, url, body, "").exchange
            if upcoming is None or not redirect_target(upcoming, url):
                break
            matched = self._match(method, url, body, "")  # the next hop, logged and served
            assert matched is not None
            exchange = matched
        else:
            return redirect_loop_reply()  # never hand the browser a 3xx: fail it, as when recorded
        if method != "GET":  # a 307/308 keeps its method: a page cannot re-send it, serve the end
            return self._follow(method, url, body, self._match(method, url, body, ""))
        headers = {
            "content-type": "text/html; charset=utf-8",
            "cache-control": "no-store",
            "x-mmina-replay": "redirect",
        }
        if cookies:
            headers["set-cookie"] = "\n".join(cookies)
        return Reply(200, headers, (REDIRECT_PAGE % json.dumps(url).replace("<", "\\u003c")).encode())

    def _follow(self, method: str, url: str, body: bytes | None, exchange: Exchange | None) -> Reply:
        """A subresource's recorded redirects followed inside the archive to the final response
        (a fulfilled 3xx would send the browser to the network for its target)."""
        for _hop in range(MAX_REDIRECTS + 1):
            target = redirect_target(exchange, url) if exchange else None
            if exchange is None or target is None:
                return (
                    reply_for(exchange)
                    if exchange
                    else unmatched_reply(method, url, self.archive.kin(method, url))
                )
            next_method = redirected_method(exchange.status, method)
            body = body if next_method == method else None
            method, url = next_method, target
            exchange = self._match(method, url, body, "")
        return redirect_loop_reply()  # never hand the browser a 3xx: fail it, as when recorded

    def _match(self, method: str, url: str, body: bytes | None, content_type: str) -> Exchange | None:
        """Ask the archive and log the answer (one log entry per request or followed redirect)."""
        match = self.matcher.match(method, url, body, content_type)
        if match.exchange is not None and self.timeline is not None:
            self.timeline.arrived(("request", match.exchange.order))
        exchange = self.archive.revalidated(match.exchange) if match.exchange else None
        status = exchange.status if exchange else NOT_ARCHIVED_STATUS
        missing = exchange is not None and (
            exchange.body_missing or (exchange.body_of is not None and not exchange.cache_hit)
        )
        source = match.exchange
        self.served.append(
            Served(
                at=datetime.now(UTC),
                method=method,
                url=url,
                kind=match.kind,
                status=status,
                missing_body=missing,
                redacted_body=exchange is not None and exchange.redacted_body,
                recorded_url=source.url if source else None,
                recorded_order=source.order if source else None,
                recorded_episode=source.episode_id or None if source else None,
                recorded_seq=source.seq if source else None,
            )
        )
        self._last_match = exchange
        return exchange


async def _continued(route: WorkerRoute) -> None:
    """A SharedWorker's request let go to the network (after a hand-over)."""
    try:
        await route.continue_()
    except PlaywrightError:
        pass  # the worker went away meanwhile


def due_on_timeline(asked: float, took: float, landed: float | None, observed: float | None = None) -> float:
    """When (τ) a response the page asked for at ``asked`` reaches it: at its recorded arrival
    (``landed``, τ) — a page that asked later than the recording's gets it no later, at once if
    need be (held longer, it would miss the observation that showed it), and one that asked
    earlier waits for it, up to ``ALIGN_MAX_S`` more than its exchange took (a replay's click
    sends its request sooner than a live page did, and what the page computes on arrival, "5
    seconds ago", must read the recorded moment) — but never past the next observation
    (``observed``) that it would have preceded: a page that asks more often than recorded is
    handed a later turn's answer (first in, first out), whose recorded arrival says nothing of
    this one. Without a recorded arrival, as long after the asking as the exchange took."""
    natural = asked + took
    if landed is None:
        return natural
    if natural > landed:
        return max(asked, landed)
    aligned = min(landed, natural + ALIGN_MAX_S)
    return natural if observed is not None and natural <= observed < aligned else aligned


def _polling_sid(url: str) -> str | None:
    """The session of an engine.io long-poll (``transport=polling&sid=...``), or None."""
    query = parse_qs(urlsplit(url).query)
    return query["sid"][0] if query.get("transport") == ["polling"] and query.get("sid") else None


def said_before(messages: list[Message], until: float | None) -> list[Message]:
    """The messages said before ``until`` (timed in the same wall-clock seconds; None: all) that
    an observation then could depend on: a page message only when a server message (not a
    heartbeat) followed it. What the page said after the last one (an ack of it, an input sent
    during the tree read) could change nothing the page showed by then, and when it is said
    follows the page's own timing rather than the script's."""
    if until is None:
        return messages
    said = [m for m in messages if m.at < until]
    last = max(
        (i for i, m in enumerate(said) if m.direction == SERVER and heartbeat_kind(m.data) is None),
        default=-1,
    )
    return [m for i, m in enumerate(said) if m.direction == SERVER or i < last]


def _taken_s(exchange: Exchange) -> float | None:
    """When the recording's page's code got this fetch/XHR answer, in seconds after its request
    started (``x-mmina-taken``; None: not recorded): a page busy with its own work when it
    arrived got it that much later, and a replay on the timeline hands it over then, so the page
    reads the time the recording's did as it gets it (the replayed page did that work while its
    time stood still for the archive, and would get it at its arrival)."""
    value = next((v for name, v in exchange.headers if name.lower() == TAKEN_HEADER), None)
    try:
        return float(value) / 1e3 if value is not None else None
    except ValueError:
        return None


def _until_headers(exchange: Exchange) -> float:
    """Milliseconds the recorded response took to begin: its whole time, less the time its body
    took to arrive in chunks (which the page's ``fetch`` is then handed at their pace)."""
    offsets = [float(part.partition("@")[2] or 0) for part in exchange.chunks.split(",") if part]
    return max(0.0, exchange.time_ms - max(offsets, default=0.0))


REDIRECT_PAGE = (
    '<!doctype html><html><head><meta charset="utf-8"><meta name="' + REDIRECT_MARK + '">'
    "<script>(t => location.replace(new URL(t).hash ? t : t + location.hash))(%s)</script></head></html>"
)
"""The stand-in for a recorded redirect of a navigation; ``EpisodeBrowser.settle`` waits while
the page shows it (the meta tag names it). A target without a fragment keeps the fragment of
the URL that was redirected, as a browser does (Fetch standard; a form posted to ``/new#ticket``
and redirected to ``/ticket/1`` lands on ``/ticket/1#ticket``)."""
