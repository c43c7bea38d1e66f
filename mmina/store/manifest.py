"""Manifests: the files each commit made, so that ``store verify`` can tell a missing or a
duplicated file from a healthy store.

A commit's ``episodes`` file is written last (it is the commit point), so it can list
every other file of the commit: the blob pack, the steps and requests files, each with
its row count and size in bytes. The list is kept in that file's Parquet key-value
metadata (``mmina.manifest``), so no table gains a column and the schema version does not
change: older readers ignore it, and files written before manifests simply have none
(``verify`` then says what it could not check). Compaction writes the manifest of the
files it merges into.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from mmina.store.files import Written

MANIFEST = b"mmina.manifest"
FORMAT = 1


@dataclass(frozen=True)
class Listed:
    """One file of a commit, as its manifest lists it."""

    path: str
    """Relative to the store's root, with ``/``."""
    rows: int
    bytes: int


def manifest_metadata(root: PurePath, files: Sequence[Written | Listed]) -> dict[bytes, bytes]:
    """The key-value metadata that lists ``files`` (made under ``root``)."""
    listed = [_listed(root, f) for f in files]
    document = {
        "format": FORMAT,
        "files": [{"path": f.path, "rows": f.rows, "bytes": f.bytes} for f in listed],
    }
    return {MANIFEST: json.dumps(document, sort_keys=True).encode()}


def _listed(root: PurePath, file: Written | Listed) -> Listed:
    if isinstance(file, Listed):
        return file
    return Listed(file.path.relative_to(root).as_posix(), file.rows, file.bytes)


def read_manifest(metadata: Mapping[bytes, bytes] | None) -> list[Listed] | None:
    """The files a footer's manifest lists; None when there is none (written before manifests).
    Raises ValueError for a manifest that cannot be read."""
    raw = (metadata or {}).get(MANIFEST)
    if raw is None:
        return None
    try:
        document = json.loads(raw)
        return [Listed(str(f["path"]), int(f["rows"]), int(f["bytes"])) for f in document["files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"its manifest cannot be read ({type(exc).__name__}: {exc})") from None
