"""Large archived bodies reach the page over a loopback socket, not through Playwright's protocol.

``route.fulfill`` hands a body to Chromium base64-encoded inside a JSON message, twice (from
Python to Playwright's driver, from the driver to the browser): a 6 MB script bundle cost
0.4-0.9 s on a quiet machine and 0.8-2.8 s at load 4-7, against the 0.2 s its live server took
(issue 56). So a body of :data:`LARGE_BODY` bytes or more is offered here instead, once, under an
unguessable path, and the request is *continued* to that address (``route.continue_(url=...)``:
Chromium fetches it from this server, and the change of URL is not observable by the page: it
sees the original URL, origin and headers, CORS included). The same 6 MB then took 0.12-0.25 s.

The server speaks just enough HTTP/1.1 for that one exchange: it reads the request's head (and
discards a body), writes the recorded status, the recorded headers (framing ones replaced by a
``content-length`` of its own) and the body, and closes. :meth:`BodyServer.sent` tells when the
last byte is written, which is when the page's clock may move on (``ArchiveRouter._handle``).

Playwright keeps a continued request's scheme, so the server listens twice: plain for ``http:``
requests, TLS for ``https:`` ones, with a certificate made for the replay
(``mmina.replayer.loopback_tls``) that only contexts which take any certificate accept — an
offline replay context does (``mmina.recorder.browser.Offline``: it reaches no network but this
server); a router told otherwise (``trusted_tls`` false) fulfills ``https:`` bodies instead.
Chromium's Local Network Access checks, which would block a public page's request to a loopback
address, are off in every browser mmina launches (``mmina.recorder.chromium.LOCAL_NETWORK_FEATURES``).
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import ssl
from dataclasses import dataclass
from http import HTTPStatus

from mmina.replayer.archive import HEADER_NAME, LINE_BREAK, Reply
from mmina.replayer.loopback_tls import server_context

LARGE_BODY = 256 * 1024
"""Bodies of this many bytes or more are served here (below it, fulfilling costs a few ms)."""
HEAD_LIMIT = 64 * 1024
"""The most a request's head may take; a larger one is not a browser's and is dropped."""
READ_DEADLINE_S = 10.0
"""How long the server waits for a connected client's request head."""
PATH_PREFIX = "/mmina-body/"
SCHEMES = ("http", "https")
FRAMING = frozenset({"content-length", "transfer-encoding", "connection", "content-encoding"})
"""Headers the server writes itself (or not at all): the body is sent whole and decoded."""


@dataclass
class _Offer:
    reply: Reply
    sent: asyncio.Future[None]


class BodyServer:
    """One loopback HTTP(S) server for one replay context's large bodies. Its sockets are bound at
    once, so its :attr:`addresses` are known before the context exists (an offline context's proxy
    lets them through: ``mmina.recorder.browser.Offline``); each side serves from its first offer on."""

    def __init__(self) -> None:
        self._sockets = {scheme: socket.create_server(("127.0.0.1", 0)) for scheme in SCHEMES}
        self.addresses = {scheme: "127.0.0.1:%d" % s.getsockname()[1] for scheme, s in self._sockets.items()}
        """``host:port`` of each side, by scheme."""
        self._servers: dict[str, asyncio.AbstractServer] = {}
        self._offers: dict[str, _Offer] = {}

    @staticmethod
    def takes(url: str, reply: Reply, large: int = LARGE_BODY, tls: bool = True) -> bool:
        """Whether ``reply`` to a request for ``url`` goes through this server: a body of ``large``
        bytes or more, for an ``http:`` URL, or an ``https:`` one when ``tls`` (the context takes
        the server's certificate)."""
        return (
            len(reply.body) >= large
            and reply.status >= 200
            and _scheme(url) in (SCHEMES if tls else SCHEMES[:1])
        )

    async def offer(self, url: str, reply: Reply) -> tuple[str, str]:
        """The address that serves ``reply`` to the request for ``url`` once (of the same scheme),
        and its key for :meth:`sent` and :meth:`withdraw`."""
        scheme = _scheme(url)
        if scheme not in self._servers:
            self._servers[scheme] = await asyncio.start_server(
                self._serve,
                sock=self._sockets[scheme],
                limit=HEAD_LIMIT,
                ssl=server_context() if scheme == "https" else None,
            )
        key = secrets.token_urlsafe(16)
        self._offers[key] = _Offer(reply, asyncio.get_running_loop().create_future())
        return f"{scheme}://{self.addresses[scheme]}{PATH_PREFIX}{key}", key

    async def sent(self, key: str, deadline_s: float) -> bool:
        """Wait until the body offered under ``key`` is written (at most ``deadline_s``; False:
        the browser never fetched it whole, e.g. its page went away); the offer is then gone."""
        offer = self._offers.get(key)
        if offer is None:
            return False
        try:
            await asyncio.wait_for(asyncio.shield(offer.sent), deadline_s)
            return True
        except TimeoutError:
            return False
        finally:
            self.withdraw(key)

    def withdraw(self, key: str) -> None:
        offer = self._offers.pop(key, None)
        if offer is not None and not offer.sent.done():
            offer.sent.cancel()

    async def close(self) -> None:
        for key in list(self._offers):
            self.withdraw(key)
        for server in self._servers.values():
            server.close()
            await server.wait_closed()
        for bound in self._sockets.values():
            bound.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_DEADLINE_S)
            await asyncio.wait_for(_discard(reader, _request_body_size(head)), READ_DEADLINE_S)
            offer = self._offers.get(_key(head))
            if offer is None or offer.sent.done():
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            else:
                writer.write(response_head(offer.reply))
                writer.write(offer.reply.body)
            await writer.drain()
            if offer is not None and not offer.sent.done():
                offer.sent.set_result(None)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ssl.SSLError,
        ):
            pass  # not a browser's request, or the browser hung up: nothing was delivered
        finally:
            writer.close()


def _scheme(url: str) -> str:
    return url.partition(":")[0].lower()


def _key(head: bytes) -> str:
    """The offer's key in a request head's target (``GET /mmina-body/<key> HTTP/1.1``), or ""."""
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    target = parts[1].decode("latin-1") if len(parts) == 3 else ""
    return target[len(PATH_PREFIX) :] if target.startswith(PATH_PREFIX) else ""


async def _discard(reader: asyncio.StreamReader, size: int) -> None:
    """Read a request's body and drop it (the answer is the recorded one; a body left unread
    could make the browser see the connection reset before it read the answer)."""
    while size > 0:
        chunk = await reader.read(min(size, 1 << 16))
        if not chunk:
            return
        size -= len(chunk)


def _request_body_size(head: bytes) -> int:
    """The ``content-length`` of a request head (0 when none, or not a number)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip()) if value.strip().isdigit() else 0
    return 0


def response_head(reply: Reply) -> bytes:
    """The status line and headers of ``reply`` as HTTP/1.1 bytes: its recorded headers (already
    without framing ones, ``archive.reply_for``; a value joined by newlines is one line each),
    then its own ``content-length`` and ``connection: close``."""
    try:
        reason = HTTPStatus(reply.status).phrase
    except ValueError:
        reason = "Status"
    lines = [f"HTTP/1.1 {reply.status} {reason}"]
    for name, value in reply.headers.items():
        if HEADER_NAME.match(name) and name.lower() not in FRAMING:
            lines += [f"{name}: {part}" for part in LINE_BREAK.split(value)]
    lines += [f"content-length: {len(reply.body)}", "connection: close", "", ""]
    return "\r\n".join(lines).encode("utf-8", "replace")
