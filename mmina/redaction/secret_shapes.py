"""What a credential looks like: the shape a value must have to be redacted from code or data a
page runs on, and to be learned as a secret to scrub wherever it appears.

A location says where a secret may be (``secret_names.py``, ``secret_rules.py``); the shape says
whether this value is one. Credentials are made by machines: long runs of letters and digits
drawn at random (hex, base64, UUIDs, ``sk-…`` keys, JWTs). Identifiers, words, versions, paths,
numbers and short strings are not: ``authorizationCode``, ``6.0.0-beta1``, ``#/definitions/expr``,
``fahrenheit``, ``5`` are never redacted from a response body nor learned.

A run is random-looking when it changes between lower case, upper case and digits often (its
*segments*, ``Zq81fKx0`` → Zq 81 f Kx 0, are short) and its characters are varied (Shannon
entropy); a run of words (``sha256WithRSAEncryption``: sha 256 With RSA Encryption) has long
segments. Values of the well-known formats (:data:`KNOWN_KEYS`) are credentials whatever else.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import math
import re
from collections import Counter
from functools import lru_cache
from urllib.parse import quote, quote_plus

KNOWN_KEYS = re.compile(
    r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"  # a JWT
    r"|\bsk-(?:[A-Za-z0-9]+-)*(?=[A-Za-z]*[0-9])[A-Za-z0-9]{16,}"  # OpenAI-style keys (sk-..., sk-proj-...): drawn
    # at random, with digits (a CSS animation named ``sk-circleBounceDelay`` in Dash's bundle is not one)
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_\-]{35}"  # AWS access key ids, Google API keys
    r"|\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abprs]-[A-Za-z0-9-]{10,})"
)
"""Keys of a well-known format, secrets wherever they are (a page's code included)."""
KEY_PREFIXES = (
    "eyJ",
    "sk-",
    "AKIA",
    "ASIA",
    "AIza",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xox",
)
"""What every :data:`KNOWN_KEYS` match starts with."""


def might_hold_known_key(text: str) -> bool:
    """Whether :data:`KNOWN_KEYS` can match at all: substring searches, far faster than the regex."""
    return any(prefix in text for prefix in KEY_PREFIXES)


MIN_CREDENTIAL = 8
"""Shorter values are never credential-shaped (``sid=1``, ``lang=en``, a PIN)."""
MAX_CREDENTIAL = 4096
"""Longer single tokens are data (an inline image, a source map's mappings), not a credential."""
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
"""A session id is often a UUID; shaped, but not a key to redact wherever it is (code has constant ones)."""
_BASE64 = re.compile(r"[A-Za-z0-9+/_\-]+={0,2}")
_RUN = re.compile(r"[A-Za-z0-9_\-+/]+")
"""A token's runs: letters and digits, with the ``-_+/`` of base64 inside (see :func:`_parts`)."""
_NUMBER_LITERAL = re.compile(r"0[xX][0-9a-fA-F]{1,16}n?|0[bB][01]+n?|0[oO][0-7]+n?")
"""A script's number literal of 64 bits at most (``0x6a09e667f3bcc908``, ``0b0111n``): a
hex token beginning ``0b`` (1 in 256 of them) is not one, a 0x-prefixed key of 32 bytes neither."""
_FILE = re.compile(
    r"[\w.\-/]*[\w\-]\.(?:[mc]?js|css|map|json|html?|png|jpe?g|gif|svg|webp|ico|woff2?|ttf|otf|wasm"
    r"|txt|xml|ya?ml|py|ts|tsx|vue|md|pdf|zip|gz|csv|parquet)"
)
"""A file's name or path (``0763704a3becbcec20722167680ff91b/table.js``, ``index-4f3c2a1b9e8d.js``): a
content-hashed asset is named by a random-looking hash, but a credential has no file extension."""
_SEGMENT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_HEX = re.compile(
    r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{16,}|(?=[0-9A-F]*[0-9])(?=[0-9A-F]*[A-F])[0-9A-F]{16,}"
)
MIN_RANDOM_RUN = 8
MIN_DIGIT_GROUPS = 3
"""A run with this many separate groups of digits among letters is random (``Zq81fKx02LmA9w``,
``68b25f31``); identifiers have one or two (``readUInt16LE``, ``vec3ToVec4``)."""
SEGMENT_RATIO = 0.3
"""Segments per character with those digit groups (``sha256WithRSAEncryption`` has 0.22)."""
LETTERS_RATIO = (0.45, 0.4)
"""Segments per character of a run of 12 to 15, and of 16 or more, without them: random base64
changes case every other character or so (about 0.5); camelCase words do not (``miCopyLinesUp``
0.31). Measured on 110,000 identifiers of the npm corpus and 10,000 random tokens (hex, base64,
base64url, lower case and digits): 96% of the tokens pass, ~1 identifier in 500 (and base64
data inlined in bundles, which is not in a secret place)."""
MIN_ENTROPY = 3.0
"""Bits per character of a random-looking run of 12 or more (one of 8 has at most 3)."""


MIN_TOKEN = 6
"""Shorter values under a credential's name in a response are no token (``"pin": "1"``, a flag)."""


_VERSION_OR_NUMBER = re.compile(
    r"[~^<>=vV]*\d[\d.:/\-]*(?:[-+.][0-9A-Za-z.\-]*)?|[\d.:/\-+ ]+"
    r"|\d{4}-\d\d-\d\d[T ][\d:.]+(?:Z|[+-]\d\d:?\d\d)?"
)
"""A version (``^4.6.6``, ``v1.2.30``, ``6.0.0-beta1``), a date, a time (``2016-09-08T21:47:36Z``),
an address: data."""


def token_like(value: str) -> bool:
    """Whether a value under a credential's name in a response could be the credential: one token
    of ``MIN_TOKEN`` characters or more with a digit in it (every drawn one of that length has
    one), or credential-shaped — not a word or an identifier (``"password": "Password"``, a form's
    label in a page's strings; ``authorizationCode``, ``csrf_token``) (``secret_rules.Rules.named``)."""
    if len(value) < MIN_TOKEN or any(c.isspace() for c in value) or "REDACTED" in value:
        return False
    return any(c.isdigit() for c in value) or credential_shaped(value)


def data_token(value: str) -> bool:
    """:func:`token_like`, and not a version, a date or a time (``"glsl-token-string": "^1.0.1"``
    in a lock file, ``2016-09-08T21:47:36Z``) unless credential-shaped: what a page received
    under a credential's name (``secret_rules.Rules.named``)."""
    if _VERSION_OR_NUMBER.fullmatch(value) and not value.isdigit():
        return credential_shaped(value)
    return token_like(value)


@lru_cache(maxsize=16384)
def credential_shaped(value: str) -> bool:
    """Whether ``value`` looks like a credential (see the module): one token of
    :data:`MIN_CREDENTIAL` to :data:`MAX_CREDENTIAL` characters holding a well-known key or a
    random-looking run of letters and digits."""
    if (
        not MIN_CREDENTIAL <= len(value) <= MAX_CREDENTIAL
        or "REDACTED" in value
        or any(c.isspace() for c in value)
    ):
        return False
    if KNOWN_KEYS.search(value) or _UUID.search(value):
        return True
    if _encoded_text(value) or _FILE.fullmatch(value):
        return False
    return any(_random_run(part) for run in _RUN.findall(value) for part in _parts(run))


def _encoded_text(value: str) -> bool:
    """Base64 of readable text (``eyJzZXNzaW9uX2lkIjogImRlZmF1bHQifQ`` is ``{"session_id":
    "default"}``, Bokeh's default token in its bundle): data, not drawn at random (random bytes
    are almost never all printable)."""
    if not _BASE64.fullmatch(value):
        return False
    try:
        decoded = base64.urlsafe_b64decode(
            value.replace("+", "-").replace("/", "_") + "=" * (-len(value) % 4)
        )
    except (binascii.Error, ValueError):
        return False
    return bool(decoded) and all(32 <= byte < 127 or byte in (9, 10, 13) for byte in decoded)


def _parts(run: str) -> list[str]:
    """A run as base64 (its ``-_+/`` dropped) and each piece between them
    (``session-token-planted-<hex>``: the hex alone)."""
    pieces = re.split(r"[-_+/]", run)
    return [run] if len(pieces) == 1 else ["".join(pieces), *pieces]


def _random_run(run: str) -> bool:
    """A run of letters and digits drawn at random: hex of 16+ with both, or short segments
    (frequent changes of case and digit) and varied characters."""
    if len(run) < MIN_RANDOM_RUN or _NUMBER_LITERAL.fullmatch(run):
        return False
    if _HEX.fullmatch(run):
        return True
    if run.isdigit() or run.isalpha() and (run.islower() or run.isupper()):
        return False  # numbers, words and SHOUTED_WORDS; a random token mixes
    if _entropy(run) < min(MIN_ENTROPY, math.log2(len(run)) - 0.5):
        return False
    segments = _SEGMENT.findall(run)
    ratio = len(segments) / len(run)
    if sum(s.isdigit() for s in segments) >= MIN_DIGIT_GROUPS and ratio >= SEGMENT_RATIO:
        return True
    return len(run) >= 12 and ratio >= LETTERS_RATIO[len(run) >= 16]


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def variants(value: str) -> set[str]:
    """How a value appears in the texts we store: as is, percent-encoded, JSON- and HTML-escaped."""
    return {
        value,
        quote(value, safe=""),
        quote_plus(value, safe=""),
        quote(value, safe="/:@"),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        html.escape(value),
    }
