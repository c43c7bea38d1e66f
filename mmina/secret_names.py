"""Which names hold secrets: of a header, a cookie, a query or form parameter, a JSON key, an
``<input>``, an environment variable.

A name is split into words (``X-CSRFToken`` → x, csrf, token; ``apiKey`` → api, key) and is
secret when a word is a secret word or ends like one (``accesstoken``), unless its last word
only qualifies it (``token_type``, ``api_key_env``) or it is a CORS policy
(``Access-Control-Allow-Credentials``). A name alone never makes a value a secret in a response
body (code and data a page runs on): there the value's shape must agree (``secret_shapes.py``).
"""
from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
SECRET_WORDS = frozenset({
    "pass", "passwd", "password", "passwords", "passphrase", "passcode", "pwd", "pin", "otp", "cvv", "cvc",
    "secret", "secrets", "token", "auth", "authorization", "authentication", "credential", "credentials", "cred",
    "creds", "session", "sess", "sessid", "sessionid", "sid", "cookie", "cookies", "csrf", "xsrf", "apikey", "key",
    "sig", "signature", "jwt", "bearer", "saml"})
SECRET_ENDINGS = ("token", "secret", "password", "passwd", "apikey", "sessid", "sessionid", "cookie", "csrf", "xsrf")
"""A run-together word ending so is secret too: ``accesstoken``, ``PHPSESSID``, ``clientsecret``."""
SECRET_COMPOUNDS = frozenset({"authkey", "secretkey", "accesskey", "privatekey", "sessionkey", "clientkey", "appkey"})
QUALIFIERS = frozenset({
    "count", "counts", "type", "types", "length", "len", "limit", "max", "min", "size", "url", "uri", "urls",
    "endpoint", "env", "name", "names", "field", "fields", "header", "headers", "param", "params", "policy",
    "format", "kind", "version", "hint", "label", "placeholder", "timeout", "ttl", "expires", "expiry",
    "expiration", "required", "enabled", "disabled", "mode", "method", "path", "file", "dir", "prefix", "suffix",
    "strength", "reset", "valid", "usage"})
"""A name ending in one of these describes a secret without holding it: ``token_type``, ``api_key_env``."""
PUBLIC_KEYS = frozenset({"public", "sort", "primary", "foreign", "cache", "partition", "row", "object",
                         "idempotency", "lookup", "map", "dict", "hash", "group", "shortcut", "hot"})
"""``key`` after one of these is not a credential (``public_key``, ``sort_key``)."""


@lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    """Whether a parameter, field, header or variable of this name holds a secret (see the module)."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words or words[-1] in QUALIFIERS or words[:2] == ["access", "control"]:
        return False
    return any(_secret_word(word, words[i - 1] if i else "") for i, word in enumerate(words))


def _secret_word(word: str, before: str) -> bool:
    if word == "key":
        return before not in PUBLIC_KEYS
    return word in SECRET_WORDS or word in SECRET_COMPOUNDS or word.endswith(SECRET_ENDINGS)
