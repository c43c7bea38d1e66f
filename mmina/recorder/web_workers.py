"""Scripts run in every Web Worker, dedicated or shared, before any of its own code: what init
scripts are to documents (the random seeding of ``seeding.py``, a replay's clock).

Playwright has init scripts for documents only, and no hook before a worker runs. So mmina holds
each worker at its start through DevTools, as a debugger does:

* a page's DevTools session of mmina's own (``devtools.py``, opened before the page loads
  anything) auto-attaches to the page's dedicated workers with ``waitForDebuggerOnStart`` and the
  flat protocol: Chromium then does not start the worker (it does not even fetch its script) until
  that session lets it go;
* meanwhile a second session to the worker, in the non-flat protocol (Playwright's
  ``CDPSession`` routes no flat child session, but passes ``Target.sendMessageToTarget``), sends
  the worker's scripts (``Runtime.evaluate``) and ``Runtime.runIfWaitingForDebugger``: queued
  before the worker exists, they are the first thing it runs — before its global scope is
  complete, so a script may not read ``location`` (that crashed the renderer in Chromium 156) nor
  use ``queueMicrotask`` (not defined yet);
* then the held session is detached, and the worker starts. The second session stays, for what
  the scripts are told later (:meth:`WorkerScripts.tell`: a replay's clock news).

Shared workers are attached the same way by one browser-wide session, but that does not hold
them: Playwright's own browser-wide session releases them at once. What holds a SharedWorker is its
script's response, which the page's session of mmina's own pauses until the worker has its scripts
(``shared_workers.py``, with :meth:`WorkerScripts.ready`), as a replay's router holds its script's
request. Before its scripts, a SharedWorker's channel runs the context's hooks (:data:`SharedHook`:
``shared_workers.py`` enables its Network domain; a replay's router its Fetch domain, to answer the
worker's own requests): :class:`WorkerChannel` sends calls to the worker and hands back its answers
and events.

Nothing in the page changes: the worker's URL, origin, module or classic type, CSP and sharing
are the page's own. A context that has no worker scripts nor hooks attaches to nothing. Workers that a
worker starts (nested dedicated workers) are not held, and service workers are blocked (the
browser context is made with ``service_workers="block"``, ``browser.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from playwright.async_api import Browser, BrowserContext, CDPSession
from playwright.async_api import Error as PlaywrightError

from mmina.recorder.devtools import send

HOLD_MAX_S = 5.0
"""A SharedWorker's script request waits at most this long for the worker's scripts."""
DEDICATED = "worker"
SHARED = "shared_worker"
BLOB_URL = re.compile(r"^blob:(.+?)/[0-9a-f-]{36}$", re.IGNORECASE)


@dataclass(frozen=True)
class WorkerStart:
    """A worker about to start: its kind (``worker`` or ``shared_worker``), its script's URL, and
    how many workers of that kind and URL (a ``blob:`` URL without its random part) its page (a
    shared worker: its context) started before."""

    kind: str
    url: str
    ordinal: int
    target_id: str = ""
    """Its DevTools target (a SharedWorker's is also the network id of its script's request)."""


WorkerScript = Callable[[WorkerStart], "str | None"]
"""The script a worker gets (None: none), made as it starts (a clock's news is of that moment)."""


class WorkerCallError(PlaywrightError):
    """A worker answered a DevTools call with an error, or went away before it answered."""


@dataclass
class WorkerChannel:
    """A non-flat DevTools session to one worker, through its parent's session: what is sent to
    the worker, and what it answers and reports (``Target.receivedMessageFromTarget`` on the parent)."""

    parent: CDPSession
    session_id: str
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    waiting: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    listeners: dict[str, list[Callable[[dict[str, Any]], None]]] = field(default_factory=dict)

    async def post(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send ``method`` to the worker (its answer is not waited for: a held worker answers
        only once it runs)."""
        await self._send(next(self.ids), method, params)

    async def call(
        self, method: str, params: dict[str, Any] | None = None, seconds: float = HOLD_MAX_S
    ) -> dict[str, Any]:
        """The worker's answer to ``method`` within ``seconds`` (else ``TimeoutError``); an error
        answer, or the worker gone, raises :class:`WorkerCallError`."""
        call_id = next(self.ids)
        answer = self.waiting[call_id] = asyncio.get_running_loop().create_future()
        try:
            await self._send(call_id, method, params)
            return await asyncio.wait_for(answer, seconds)
        finally:
            self.waiting.pop(call_id, None)

    def on(self, event: str, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call ``listener`` with the parameters of every ``event`` the worker reports."""
        self.listeners.setdefault(event, []).append(listener)

    async def _send(self, call_id: int, method: str, params: dict[str, Any] | None) -> None:
        message = json.dumps({"id": call_id, "method": method, "params": params or {}})
        await send(
            self.parent, "Target.sendMessageToTarget", {"sessionId": self.session_id, "message": message}
        )

    def heard(self, message: dict[str, Any]) -> None:
        """One message from the worker: an answer to a call, or an event."""
        answer = self.waiting.get(message.get("id", -1))
        if answer is not None and not answer.done():
            if "error" in message:
                answer.set_exception(WorkerCallError(str(message["error"].get("message", "error"))))
            else:
                answer.set_result(message.get("result") or {})
        for listener in self.listeners.get(message.get("method", ""), []):
            listener(message.get("params") or {})

    def gone(self) -> None:
        """The worker went away: no call of it will be answered."""
        for answer in self.waiting.values():
            if not answer.done():
                answer.set_exception(WorkerCallError("the worker went away"))


SharedHook = Callable[[WorkerStart, WorkerChannel], Awaitable[None]]
"""Run on a SharedWorker held at its start, before its scripts are sent (e.g. enable a domain on
its channel: ``mmina.recorder.shared_workers``, a replay's router)."""


class WorkerScripts:
    """What one context's workers run before their own code, and the workers started so far."""

    def __init__(self) -> None:
        self.makers: list[WorkerScript] = []
        self.channels: dict[str, WorkerChannel] = {}
        """The workers that got scripts, by their session, while they live."""
        self.hold_s: list[float] = []
        """How long each worker was held at its start (seconds), for ``bench``."""
        self.ordinals: Counter[tuple[str, str]] = Counter()
        """Shared workers started so far, by kind and URL (dedicated ones count per page)."""
        self.scripted = asyncio.Event()
        """Set once a worker got scripts (what is told to workers need not be looked at before)."""
        self.starting: dict[str, asyncio.Event] = {}
        """Shared workers being scripted, by script URL and by target id: set once their scripts are sent."""
        self.shared_hooks: list[SharedHook] = []
        """Run on every SharedWorker of the context as it starts (see :data:`SharedHook`)."""

    def add(self, maker: WorkerScript) -> None:
        """Give every worker started from now on ``maker``'s script (after those added before)."""
        self.makers.append(maker)

    def on_shared(self, hook: SharedHook) -> None:
        """Run ``hook`` on every SharedWorker started from now on, before its scripts."""
        self.shared_hooks.append(hook)

    def scripts(self, start: WorkerStart) -> list[str]:
        return [script for maker in self.makers if (script := maker(start))]

    async def ready(self, key: str) -> None:
        """Return once a SharedWorker of script URL (or target id) ``key`` being scripted has its
        scripts (at once for any other request, at most ``HOLD_MAX_S``): a replay's router answers
        such a worker's script only then, a recording hands it over only then (see the module)."""
        starting = self.starting.get(key)
        if starting is not None:
            try:
                await asyncio.wait_for(starting.wait(), HOLD_MAX_S)
            except TimeoutError:
                pass

    async def tell(self, expression: str) -> None:
        """Evaluate ``expression`` in every worker that got scripts and still lives."""
        channels = list(self.channels.values())
        await asyncio.gather(
            *(_quietly(c.post("Runtime.evaluate", {"expression": expression})) for c in channels)
        )


_SCRIPTS: weakref.WeakKeyDictionary[BrowserContext, WorkerScripts] = weakref.WeakKeyDictionary()
_SHARED: weakref.WeakKeyDictionary[Browser, _SharedWatch] = weakref.WeakKeyDictionary()


def worker_scripts(context: BrowserContext) -> WorkerScripts:
    """``context``'s worker scripts (add to them before its first page opens)."""
    scripts = _SCRIPTS.get(context)
    if scripts is None:
        scripts = _SCRIPTS[context] = WorkerScripts()
    return scripts


async def watch_page(context: BrowserContext, session: CDPSession) -> None:
    """Hold and script the workers of the page behind ``session`` (its session of mmina's own, as it
    opens: ``Tabs``), and its context's shared workers; nothing where the context has no worker scripts."""
    scripts = _SCRIPTS.get(context)
    if scripts is None or not (scripts.makers or scripts.shared_hooks):
        return
    holder = _Holder(session, lambda _info: scripts)
    await holder.start(DEDICATED)
    browser = context.browser
    if browser is not None:
        await _shared_watch(browser).know(session, scripts)


class _Holder:
    """Auto-attaches one DevTools session to new workers of one kind, held at their start (see the module)."""

    def __init__(
        self, session: CDPSession, scripts_of: Callable[[dict[str, Any]], WorkerScripts | None]
    ) -> None:
        self.session, self.scripts_of = session, scripts_of
        self.ordinals: Counter[tuple[str, str]] = Counter()
        self._busy: set[asyncio.Task[None]] = set()
        self.channels: dict[str, WorkerChannel] = {}
        """This session's channels to workers, by their session id, while they live."""

    async def start(self, kind: str) -> None:
        self.session.on("Target.attachedToTarget", self._attached)
        self.session.on("Target.detachedFromTarget", self._detached)
        self.session.on("Target.receivedMessageFromTarget", self._message)
        params = {
            "autoAttach": True,
            "waitForDebuggerOnStart": True,
            "flatten": True,
            "filter": [{"type": kind}],
        }
        await send(self.session, "Target.setAutoAttach", params)

    def _attached(self, event: dict[str, Any]) -> None:
        if not event.get("waitingForDebugger"):
            return  # a worker running already, or the second session of one being scripted
        info = event.get("targetInfo") or {}
        scripts = self.scripts_of(info)
        if info.get("type") == SHARED and scripts is not None:  # before its script's request is routed
            starting = scripts.starting.setdefault(info.get("url", ""), asyncio.Event())
            scripts.starting.setdefault(info.get("targetId", ""), starting)
        task = asyncio.get_running_loop().create_task(self._run(event))
        self._busy.add(task)
        task.add_done_callback(self._busy.discard)

    def _detached(self, event: dict[str, Any]) -> None:
        for scripts in self._all():
            scripts.channels.pop(event.get("sessionId", ""), None)
        channel = self.channels.pop(event.get("sessionId", ""), None)
        if channel is not None:
            channel.gone()

    def _message(self, event: dict[str, Any]) -> None:
        channel = self.channels.get(event.get("sessionId", ""))
        if channel is not None:
            try:
                channel.heard(json.loads(event.get("message") or "{}"))
            except ValueError:
                pass  # not JSON: nothing a channel could have asked for

    def _all(self) -> list[WorkerScripts]:
        return list(_SCRIPTS.values())

    async def _run(self, event: dict[str, Any]) -> None:
        """Script the held worker of ``event`` through a second session, then let it go."""
        began = time.perf_counter()
        held, info = event["sessionId"], event.get("targetInfo") or {}
        scripts = self.scripts_of(info)
        try:
            if scripts is not None:
                await self._script(info, scripts)
                scripts.hold_s.append(time.perf_counter() - began)
        except (TimeoutError, PlaywrightError):
            pass  # the worker or its page went away meanwhile: nothing left to script
        finally:
            await _quietly(send(self.session, "Target.detachFromTarget", {"sessionId": held}))
            for key in (info.get("url", ""), info.get("targetId", "")):
                starting = scripts.starting.pop(key, None) if scripts is not None else None
                if starting is not None:
                    starting.set()

    async def _script(self, info: dict[str, Any], scripts: WorkerScripts) -> None:
        kind, url = info.get("type", DEDICATED), info.get("url", "")
        counter, named = scripts.ordinals if kind == SHARED else self.ordinals, unblobbed(url)
        start = WorkerStart(kind, url, counter[kind, named], info.get("targetId", ""))
        counter[kind, named] += 1
        texts, hooks = scripts.scripts(start), scripts.shared_hooks if kind == SHARED else []
        if not texts and not hooks:
            return
        attached = await send(
            self.session, "Target.attachToTarget", {"targetId": info["targetId"], "flatten": False}
        )
        channel = self.channels[attached["sessionId"]] = WorkerChannel(self.session, attached["sessionId"])
        for hook in hooks:
            try:
                await hook(start, channel)
            except (TimeoutError, PlaywrightError):
                pass  # what the hook could not do is not done: the worker still gets its scripts
        for text in texts:
            await channel.post("Runtime.evaluate", {"expression": text})
        await channel.post("Runtime.runIfWaitingForDebugger")
        scripts.channels[channel.session_id] = channel
        scripts.scripted.set()


class _SharedWatch:
    """One browser's shared workers, held at their start for the contexts that have worker scripts."""

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self.contexts: dict[str, weakref.ref[WorkerScripts]] = {}
        """Worker scripts by DevTools browser context id."""
        self._started: asyncio.Task[CDPSession] | None = None

    async def know(self, page: CDPSession, scripts: WorkerScripts) -> None:
        """Learn the DevTools id of the context behind ``page`` (a page's session), and watch."""
        info = (await send(page, "Target.getTargetInfo")).get("targetInfo") or {}
        if info.get("browserContextId"):
            self.contexts = {k: v for k, v in self.contexts.items() if v() is not None}  # closed ones go
            self.contexts[info["browserContextId"]] = weakref.ref(scripts)
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())
        await self._started

    async def _start(self) -> CDPSession:
        session = await self.browser.new_browser_cdp_session()
        await _Holder(session, self._scripts_of).start(SHARED)
        return session

    def _scripts_of(self, info: dict[str, Any]) -> WorkerScripts | None:
        found = self.contexts.get(info.get("browserContextId", ""))
        return found() if found is not None else None


def _shared_watch(browser: Browser) -> _SharedWatch:
    watch = _SHARED.get(browser)
    if watch is None:
        watch = _SHARED[browser] = _SharedWatch(browser)
    return watch


async def _quietly(call: Any) -> None:
    try:
        await call
    except (TimeoutError, PlaywrightError):
        pass  # a worker or page going away: nothing more to tell it


def unblobbed(url: str) -> str:
    """A ``blob:`` URL without its random part (the browser draws it anew in every document)."""
    return BLOB_URL.sub(r"blob:\1", url)
