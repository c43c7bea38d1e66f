"""Where things live inside a store directory, and how files are named.

    <store>/mmina-store.json                      marker: format and highest schema version
    <store>/<table>/run_id=<run>/<stem>.v<N>.parquet   run-partitioned tables
    <store>/judge_cache/<stem>.v<N>.parquet       store-wide tables
    <store>/blobs/<stem>.v<N>.parquet             blob packs

The schema version is in every file's Parquet metadata and, so that views can route
files by version without opening them, also in the file name. On a local disk, files being
written are hidden as ``.<final name>.<host>.<pid>.<nonce>.tmp`` until renamed into place; on
an object store they are PUT whole at their final key (see ``backends.py`` and ``objects.py``).
The store may be a folder or an object-store prefix: every path here is a ``PurePath``
(an ``ObjectPath`` for object stores) and every access goes through the store's backend.
"""

from __future__ import annotations

import re
import uuid
from pathlib import PurePath

from mmina.errors import StoreError
from mmina.store.backends import Backend
from mmina.store.schema import Table

MARKER = "mmina-store.json"
LOCK = ".lock"
COMMIT_LOCK = ".commit.lock"
BATCH_PREFIX = "batch-"
"""Stem of files holding many episodes (batch writes, compaction); never an episode id."""
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_DATA_NAME = re.compile(r"^(?P<stem>[^.][^/]*)\.v(?P<version>\d+)\.parquet$")


def check_id(kind: str, value: str) -> str:
    """Ids become file and folder names, so only a safe alphabet is allowed."""
    if not _SAFE_ID.match(value):
        raise StoreError(f"invalid {kind} {value!r}: use letters, digits, '.', '_' or '-' (at most 128)")
    return value


def table_dir(root: PurePath, table: Table, run_id: str | None = None) -> PurePath:
    if not table.partitioned_by_run:
        return root / table.name
    if run_id is None:
        raise StoreError(f"table {table.name} needs a run id")
    return root / table.name / f"run_id={check_id('run id', run_id)}"


def data_name(stem: str, version: int) -> str:
    return f"{check_id('file stem', stem)}.v{version}.parquet"


def batch_stem() -> str:
    return f"{BATCH_PREFIX}{uuid.uuid4().hex[:16]}"


def is_batch(path: PurePath) -> bool:
    return file_stem(path).startswith(BATCH_PREFIX)


def file_version(path: PurePath) -> int | None:
    """The schema version a data file's name declares, or None if it is not a data file."""
    found = _DATA_NAME.match(path.name)
    return int(found.group("version")) if found else None


def file_stem(path: PurePath) -> str:
    found = _DATA_NAME.match(path.name)
    return found.group("stem") if found else path.name


def run_of(path: PurePath) -> str | None:
    """The run a file belongs to, from its ``run_id=`` folder."""
    name = path.parent.name
    return name.removeprefix("run_id=") if name.startswith("run_id=") else None


def glob_pattern(root: PurePath, table: Table, version: int, any_depth: bool = False) -> str:
    """The glob matching every committed file of ``table`` at ``version``. ``any_depth`` spells
    the run folders ``**``, which an object store lists in one flat listing (``*`` makes
    fsspec list each run's folder, one request each)."""
    middle = ("**/" if any_depth else "*/") if table.partitioned_by_run else ""
    return f"{root / table.name}/{middle}*.v{version}.parquet"


def data_files(backend: Backend, table: Table, run_id: str | None = None) -> list[PurePath]:
    """Committed files of a table (all versions), sorted for stable reads."""
    if table.partitioned_by_run and run_id:
        base, depth = table_dir(backend.root, table, run_id), 1
    else:
        base, depth = backend.root / table.name, 2 if table.partitioned_by_run else 1
    return sorted(p for p in backend.files(base, depth) if file_version(p) is not None)
