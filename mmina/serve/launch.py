"""Starting the server: where it may listen, with which token, on uvicorn.

Bound to a loopback address (the default, 127.0.0.1) it answers this machine only. Any
other address makes the store readable (and labels writable) by whoever reaches the machine,
so it needs an explicit ``expose`` and a token (one is made up when none is given); every
request must then carry it. The port is taken before uvicorn starts, so a port in use is one clear error.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass

from mmina.errors import MminaError
from mmina.serve.app import LOOPBACK_HOSTS, create_app
from mmina.store import Store

GRACE_S = 2
"""Seconds open requests (pages waiting for changes) get to finish when the server stops."""


class ServeError(MminaError):
    """The server cannot start as asked (an address not allowed, a port in use)."""


@dataclass(frozen=True)
class Binding:
    host: str
    port: int
    token: str | None

    @property
    def url(self) -> str:
        """Where to open the application (with the token, which the page then keeps in a cookie)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_access(host: str, expose: bool, token: str | None) -> str | None:
    """The token requests need: the given one, or, for a non-loopback address (which needs
    ``expose``), a new random one."""
    if is_loopback(host):
        return token
    if not expose:
        raise ServeError(
            f"binding to {host} lets anyone who can reach this machine read the store: pass --expose "
            "to mean it (every request then needs a token: --token, or one is made up and printed)"
        )
    return token or secrets.token_urlsafe(24)


def open_socket(host: str, port: int) -> socket.socket:
    """The listening socket, taken now so that a port in use is a clear error."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise ServeError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (pick another --port)"
        ) from None
    except (ValueError, OverflowError) as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc}") from None
    return sock


@dataclass(frozen=True)
class Labelling:
    """Whose labels the pages save by default, and whether they may save any."""

    labeller: str | None = None
    writable: bool = True


def serve(
    store: Store,
    host: str,
    port: int,
    token: str | None,
    expose: bool,
    evaluator: str,
    ready: Callable[[Binding], None],
    labelling: Labelling = Labelling(),
) -> None:
    """Serve ``store`` until interrupted; ``ready`` is told the address once it is listening."""
    import uvicorn  # here: uvicorn's package brings click, which only the command line may load

    token = check_access(host, expose, token)
    sock = open_socket(host, port)
    hosts = LOOPBACK_HOSTS if is_loopback(host) else None
    app = create_app(store, token, hosts, evaluator, labelling.labeller, labelling.writable)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACE_S, access_log=False)
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    ready(Binding(host, sock.getsockname()[1], token))
    uvicorn.Server(config).run(sockets=[sock])
