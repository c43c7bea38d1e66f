"""Element ids derived from the elements themselves, so what an agent sees never depends on
timing (pure, standard library only).

An id is a function of the one snapshot it is shown in — never of earlier observations or
of the order elements appeared in — so two observations of the same page show the same ids,
whenever each was taken, and an element keeps its id across steps as long as what identifies
it stays the same:

* an element with a label (its accessible name, else its only text, else its placeholder) or
  a link target is identified by its role, label, link target, heading level, and how many
  elements with all of these came before it in the page;
* an element without any (a ``generic`` container, a ``list`` ...) by its role, its parent's
  identity, and how many such siblings came before it — its place in the tree.

The identity is hashed (BLAKE2b) to a number of four digits on a page of up to 1,125
elements, five up to 11,250, and so on (at most one number in eight is used, so collisions
stay rare); the id is shown as that number, e.g. ``[4821]``, the way
WebArena's observations show DOM node ids. Two elements whose numbers collide are settled in
the order of their identities' hashes (never by page order): the first keeps the number, the
other takes the next number its hash gives, so ids are unique within an observation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from mmina.observations.aria_snapshot import AriaLine

_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
MIN_DIGITS = 4
LOAD = 8
"""At least LOAD numbers per element: the id space grows by a digit before it is 1/8 used."""


def assign_ids(lines: Sequence[AriaLine]) -> dict[int, str]:
    """Index of each line with a browser ref → the id shown for its element."""
    identities = _identities(lines)
    referenced = {
        index: identities[index] for index, line in enumerate(lines) if line.ref and index in identities
    }
    digits = id_digits(len(referenced))
    low, span = 10 ** (digits - 1), 9 * 10 ** (digits - 1)
    taken: set[int] = set()
    ids: dict[int, str] = {}
    for index, identity in sorted(referenced.items(), key=lambda item: item[1]):
        number = _first_free(identity, low, span, taken)
        taken.add(number)
        ids[index] = str(number)
    return ids


def id_digits(elements: int) -> int:
    """How many digits ids have on a page of this many elements."""
    digits = MIN_DIGITS
    while elements * LOAD > 9 * 10 ** (digits - 1):
        digits += 1
    return digits


def _identities(lines: Sequence[AriaLine]) -> dict[int, bytes]:
    """Index of each node line → the digest of what identifies its element (see the module)."""
    identities: dict[int, bytes] = {}
    seen: dict[str, int] = {}
    parents: list[tuple[int, bytes]] = []  # (depth, identity) of the enclosing nodes
    for index, line in enumerate(lines):
        if not line.is_node:
            continue
        while parents and parents[-1][0] >= line.depth:
            parents.pop()
        base = _base(line, _properties(lines, index), parents[-1][1] if parents else b"")
        occurrence = seen.get(base, 0)
        seen[base] = occurrence + 1
        key = f"{base}#{occurrence}".encode("utf-8", "surrogatepass")  # a name may hold a lone surrogate
        identities[index] = hashlib.blake2b(key, digest_size=16).digest()
        parents.append((line.depth, identities[index]))
    return identities


def _base(line: AriaLine, properties: dict[str, str], parent: bytes) -> str:
    """What identifies an element before counting its like: its label and link, else its place."""
    label = line.name or line.value or properties.get("/placeholder", "")
    url = properties.get("/url", "")
    level = [a for a in line.attributes if a.startswith("level=")]
    if label or url:
        return _ENCODE(["labelled", line.role, label, url, level])
    return _ENCODE(["placed", line.role, parent.hex()])


def _properties(lines: Sequence[AriaLine], index: int) -> dict[str, str]:
    """The ``/url`` and ``/placeholder`` properties written right under the node at ``index``."""
    found: dict[str, str] = {}
    depth, following = lines[index].depth + 1, index + 1
    while (
        following < len(lines) and lines[following].depth == depth and lines[following].role.startswith("/")
    ):
        found[lines[following].role] = lines[following].value or ""
        following += 1
    return found


def _first_free(identity: bytes, low: int, span: int, taken: set[int]) -> int:
    """The first number of ``identity``'s probe sequence not taken yet."""
    probe = 0
    while True:
        digest = hashlib.blake2b(identity + probe.to_bytes(4, "big"), digest_size=8).digest()
        number = low + int.from_bytes(digest, "big") % span
        if number not in taken:
            return number
        probe += 1
