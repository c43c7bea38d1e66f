"""engine.io's transport session id, which redaction keeps where engine.io puts it (see
:data:`TRANSPORT_ID`): the secret rules ask here whether a ``sid`` is that one."""

from __future__ import annotations

import re

from mmina.redaction.secret_patterns import URL_REST

TRANSPORT_ID = "sid"
"""The name of engine.io's transport session id, which is not a secret where engine.io puts it:
in a URL beside its ``EIO=`` protocol parameter and in its open packet (``0{"sid":...}``; socket.io's
``40{"sid":...}``). It names one connection, which ends with the episode: it opens nothing
afterwards, and the page echoes it in every poll's URL (redacted, the replay would serve the
page other bytes than it received). A page's own credentials (cookies, socket.io's ``auth``
payload, tokens) stay secrets."""
ENGINE_IO_URL = re.compile(r"(?:^|&)EIO=\d")
ENGINE_IO_OPEN = re.compile(r"""(?:^|\x1e|\\u001e|["'])(?:\d+:)?4?0(?:/[^,{"']*,)?\{\\?$""")
"""The start of an engine.io open packet or socket.io connect packet, up to its ``{``."""


def opens_transport(text: str, at: int) -> bool:
    """Whether the pair at ``at`` is the first of an engine.io open or socket.io connect packet."""
    return ENGINE_IO_OPEN.search(text, max(0, at - 24), at) is not None


def in_engine_io_query(text: str, at: int) -> bool:
    """Whether the parameter at ``at`` belongs to a query with engine.io's ``EIO=`` in it."""
    start = text.rfind("?", max(0, at - 2048), at + 1)
    if start < 0:
        return False
    query = URL_REST.match(text, start + 1)
    return query is not None and query.end() >= at and ENGINE_IO_URL.search(query.group(0)) is not None
