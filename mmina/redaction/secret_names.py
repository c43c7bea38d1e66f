"""Which names hold secrets: of a header, a cookie, a query or form parameter, a JSON key, an
``<input>``, an environment variable.

A name is split into words (``X-CSRFToken`` → x, csrf, token; ``apiKey`` → api, key) and is
secret when a word is a secret word or ends like one (``accesstoken``), unless its last word
only qualifies it (``token_type``, ``api_key_env``) or it is a CORS policy
(``Access-Control-Allow-Credentials``).

Of secret names, :func:`name_kind` tells two kinds apart. A *credential* name can only mean one
(access, refresh and id tokens, client secrets, passwords, API and private keys, auth and session
tokens, CSRF tokens: ``access_token``, ``password``, ``api_key``, ``X-CSRFToken``). An *ambiguous*
word means one only sometimes — ``key``, ``session``, ``sid``, ``sig``, ``pin``, ``auth``, also
inside a longer name (``orderByKey``, ``session_id``) — so a value under it is a secret only when
it is credential-shaped (``secret_shapes.py``), wherever it is.
"""

from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
SECRET_WORDS = frozenset(
    {
        "pass",
        "passwd",
        "password",
        "passwords",
        "passphrase",
        "passcode",
        "pwd",
        "pin",
        "otp",
        "cvv",
        "cvc",
        "secret",
        "secrets",
        "token",
        "auth",
        "authorization",
        "authentication",
        "credential",
        "credentials",
        "cred",
        "creds",
        "session",
        "sess",
        "sessid",
        "sessionid",
        "sid",
        "cookie",
        "cookies",
        "csrf",
        "xsrf",
        "apikey",
        "key",
        "sig",
        "signature",
        "jwt",
        "bearer",
        "saml",
    }
)
SECRET_ENDINGS = (
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "sessid",
    "sessionid",
    "cookie",
    "csrf",
    "xsrf",
)
"""A run-together word ending so is secret too: ``accesstoken``, ``PHPSESSID``, ``clientsecret``."""
SECRET_COMPOUNDS = frozenset(
    {"authkey", "secretkey", "accesskey", "privatekey", "sessionkey", "clientkey", "appkey"}
)
QUALIFIERS = frozenset(
    {
        "count",
        "counts",
        "type",
        "types",
        "length",
        "len",
        "limit",
        "max",
        "min",
        "size",
        "url",
        "uri",
        "urls",
        "endpoint",
        "env",
        "name",
        "names",
        "field",
        "fields",
        "header",
        "headers",
        "param",
        "params",
        "policy",
        "format",
        "kind",
        "version",
        "hint",
        "label",
        "placeholder",
        "timeout",
        "ttl",
        "expires",
        "expiry",
        "expiration",
        "required",
        "enabled",
        "disabled",
        "mode",
        "method",
        "path",
        "file",
        "dir",
        "prefix",
        "suffix",
        "strength",
        "reset",
        "valid",
        "usage",
        "arn",
        "arns",
        "spec",
        "specs",
        "at",
        "date",
        "time",
        "used",
        "created",
        "updated",
        "changed",
        "age",
    }
)
"""A name ending in one of these describes a secret without holding it: ``token_type``, ``api_key_env``,
``KmsKeyArn``, ``CustomerMasterKeySpec``, ``PasswordLastUsed``."""
IDS = frozenset({"id", "ids"})
"""A name ending so names the id of a key or a secret, not the secret (``KeyId``, ``SecretId``,
``private_key_id``) — but ``session_id`` may be the session (see :data:`SESSION_WORDS`)."""
SESSION_WORDS = frozenset({"session", "sess"})
SEQUENCE_TOKENS = frozenset(
    {"next", "page", "continuation", "pagination", "change", "sync", "resume", "cursor", "idempotency"}
)
"""``token`` after one of these is a place in a sequence, not a credential (``NextToken``,
``nextPageToken``, ``ChangeToken``, ``IdempotencyToken``): a replay must match it, too."""
PUBLIC_KEYS = frozenset(
    {
        "public",
        "sort",
        "primary",
        "foreign",
        "cache",
        "partition",
        "row",
        "object",
        "idempotency",
        "lookup",
        "map",
        "dict",
        "hash",
        "group",
        "shortcut",
        "hot",
    }
)
"""``key`` after one of these is not a credential (``public_key``, ``sort_key``)."""


CREDENTIAL = "credential"
AMBIGUOUS = "ambiguous"
AMBIGUOUS_WORDS = frozenset({"key", "session", "sess", "sid", "sig", "signature", "pin", "auth"})
"""Words that name a secret only sometimes (``orderByKey``, ``session_id``, ``sig`` of a share link)."""
KEY_OWNERS = frozenset(
    {
        "api",
        "private",
        "secret",
        "access",
        "client",
        "auth",
        "session",
        "app",
        "signing",
        "master",
        "encryption",
        "license",
        "subscription",
    }
)
"""``key`` after one of these is a credential's (``api_key``, ``private_key``); after another word, ambiguous."""
_RANK = {None: 0, AMBIGUOUS: 1, CREDENTIAL: 2}


@lru_cache(maxsize=8192)
def name_kind(name: str) -> str | None:
    """``CREDENTIAL``, ``AMBIGUOUS`` or None: what a value under this name is (see the module)."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words or words[-1] in QUALIFIERS or words[:2] == ["access", "control"] or "::" in name:
        return None  # a description, a CORS header, a type's name (``AWS::IAM::AccessKey``)
    if words[-1] in IDS and len(words) > 1 and words[-2] not in SESSION_WORDS:
        return None
    return stronger(*(_word_kind(word, words[i - 1] if i else "") for i, word in enumerate(words)))


def stronger(*kinds: str | None) -> str | None:
    """The strongest of name kinds (a credential's over an ambiguous one's over none)."""
    return max(kinds, key=_RANK.__getitem__, default=None)


def is_secret_name(name: str) -> bool:
    """Whether a parameter, field, header or variable of this name holds a secret (see the module)."""
    return name_kind(name) is not None


def _word_kind(word: str, before: str) -> str | None:
    if word == "key":
        return None if before in PUBLIC_KEYS else CREDENTIAL if before in KEY_OWNERS else AMBIGUOUS
    if word in AMBIGUOUS_WORDS:
        return AMBIGUOUS
    if word == "token" and before in SEQUENCE_TOKENS:
        return None
    if word in SECRET_WORDS or word in SECRET_COMPOUNDS or word.endswith(SECRET_ENDINGS):
        return CREDENTIAL
    return None


CONNECTION_WORDS = frozenset({"session", "sess", "sid"})


def connection_kind(name: str) -> str | None:
    """:func:`name_kind` in a WebSocket's own URL and messages, where a session's id (a name whose
    only secret words are ``session``, ``sess`` or ``sid``: ``session_id``, ``sessionId``) names
    the connection itself, which ends with the episode and opens nothing after it: not a secret
    (engine.io's ``sid``, Jupyter's ``?session_id=``, Shiny's ``sessionId``)."""
    kind = name_kind(name)
    if kind != AMBIGUOUS:
        return kind
    words = [w.lower() for w in _WORD.findall(name)]
    return None if all(w in CONNECTION_WORDS for w in words if w in AMBIGUOUS_WORDS) else kind
