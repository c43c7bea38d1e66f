"""Where things live inside a store directory, and how files are named.

    <store>/mmina-store.json                      marker: format and highest schema version
    <store>/<table>/run_id=<run>/<stem>.v<N>.parquet   run-partitioned tables
    <store>/judge_cache/<stem>.v<N>.parquet       store-wide tables
    <store>/blobs/<stem>.v<N>.parquet             blob packs

The schema version is in every file's Parquet metadata and, so that views can route
files by version without opening them, also in the file name. Files being written are
hidden as ``.<final name>.<host>.<pid>.<nonce>.tmp`` until renamed into place.
"""
from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from mmina.errors import StoreError
from mmina.store.schema import Table

MARKER = "mmina-store.json"
LOCK = ".lock"
COMMIT_LOCK = ".commit.lock"
BATCH_PREFIX = "batch-"
"""Stem of files holding many episodes (batch writes, compaction); never an episode id."""
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_DATA_NAME = re.compile(r"^(?P<stem>[^.][^/]*)\.v(?P<version>\d+)\.parquet$")
_TMP_NAME = re.compile(r"^\.(?P<final>.+\.parquet)\.(?P<host>[^.]+)\.(?P<pid>\d+)\.(?P<nonce>[0-9a-f]+)\.tmp$")


def check_id(kind: str, value: str) -> str:
    """Ids become file and folder names, so only a safe alphabet is allowed."""
    if not _SAFE_ID.match(value):
        raise StoreError(f"invalid {kind} {value!r}: use letters, digits, '.', '_' or '-' (at most 128)")
    return value


def table_dir(root: Path, table: Table, run_id: str | None = None) -> Path:
    if not table.partitioned_by_run:
        return root / table.name
    if run_id is None:
        raise StoreError(f"table {table.name} needs a run id")
    return root / table.name / f"run_id={check_id('run id', run_id)}"


def data_name(stem: str, version: int) -> str:
    return f"{check_id('file stem', stem)}.v{version}.parquet"


def batch_stem() -> str:
    return f"{BATCH_PREFIX}{uuid.uuid4().hex[:16]}"


def is_batch(path: Path) -> bool:
    return file_stem(path).startswith(BATCH_PREFIX)


def file_version(path: Path) -> int | None:
    """The schema version a data file's name declares, or None if it is not a data file."""
    found = _DATA_NAME.match(path.name)
    return int(found.group("version")) if found else None


def file_stem(path: Path) -> str:
    found = _DATA_NAME.match(path.name)
    return found.group("stem") if found else path.name


def run_of(path: Path) -> str | None:
    """The run a file belongs to, from its ``run_id=`` folder."""
    name = path.parent.name
    return name.removeprefix("run_id=") if name.startswith("run_id=") else None


def glob_pattern(root: Path, table: Table, version: int) -> str:
    """The glob matching every committed file of ``table`` at ``version``."""
    middle = "*/" if table.partitioned_by_run else ""
    return f"{root / table.name}/{middle}*.v{version}.parquet"


def data_files(root: Path, table: Table, run_id: str | None = None) -> list[Path]:
    """Committed files of a table (all versions), sorted for stable reads."""
    base = root / table.name
    if table.partitioned_by_run:
        dirs = [table_dir(root, table, run_id)] if run_id else sorted(_subdirs(base))
    else:
        dirs = [base]
    return sorted(p for d in dirs if d.is_dir() for p in _files(d) if file_version(p) is not None)


def _subdirs(base: Path) -> list[Path]:
    return [Path(e.path) for e in os.scandir(base) if e.is_dir()] if base.is_dir() else []


def _files(directory: Path) -> list[Path]:
    return [Path(e.path) for e in os.scandir(directory) if e.is_file()]


HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]) or "host"


def worker_name() -> str:
    """``host:pid`` of this process, recorded with what it writes."""
    return f"{HOST}:{os.getpid()}"


def tmp_path(final: Path) -> Path:
    """A hidden name next to ``final``, unique to this process, never matched by view globs."""
    return final.parent / f".{final.name}.{HOST}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"


@dataclass(frozen=True)
class TmpFile:
    path: Path
    final_name: str
    host: str
    pid: int

    @property
    def writer_alive(self) -> bool:
        """True when the writing process still runs on this host (its file is in progress)."""
        if self.host != HOST:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def tmp_files(root: Path) -> list[TmpFile]:
    """Every unfinished file in the store (in progress, or left by a killed writer)."""
    found = []
    for path in sorted(root.rglob(".*.tmp")):
        match = _TMP_NAME.match(path.name)
        if match:
            found.append(TmpFile(path, match["final"], match["host"], int(match["pid"])))
    return found
