"""Compaction: a run's many per-episode files merged into one file per table.

Recording writes a few small files per episode, and every rescoring one ``scores`` file per
run; over thousands of episodes, opening them dominates every query. ``compact`` rewrites,
for each run, the committed rows of ``episodes``, ``steps`` and ``requests`` and all its
``scores`` rows into one batch file per table (upgraded to the
current schema version, grouped by episode) and swaps it in. What readers see never
changes: the new partition folder is built aside (``<store>/.compact/``), holding the merged
file plus hard links to the files it does not merge (e.g. an orphan of a killed writer),
and replaces the live folder in one atomic exchange (``renameat2(RENAME_EXCHANGE)``),
under the exclusive commit lock, so no writer commits into a folder being replaced. A
crash at any point leaves either the old or the new folder live; the leftovers under
``.compact/`` are invisible and removed by the next compaction. Blob packs are not
merged: other episodes refer to them by path.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmina.errors import StoreError
from mmina.store.files import Written, read_file, write_new
from mmina.store.layout import batch_stem, data_files, data_name, file_stem, table_dir
from mmina.store.manifest import Listed, manifest_metadata, read_manifest
from mmina.store.schema import EPISODES, REQUESTS, SCHEMA_VERSION, SCORES, STEPS, Table
from mmina.store.store import Store
from mmina.store.writers import BATCH_STEP_ROW_GROUP

WORK_DIR = ".compact"
COMPACTED = (EPISODES, STEPS, REQUESTS, SCORES)
STANDALONE = (SCORES,)
"""Tables whose files need no commit point: every file is complete, so every file is merged."""
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@dataclass(frozen=True, kw_only=True)
class Compacted:
    run_id: str
    episodes: int
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int


def compact_store(
    store: Store, run_ids: list[str] | None = None, progress: Callable[[str], None] | None = None
) -> list[Compacted]:
    """Compact the given runs (default: all); runs already in one file per table are skipped.
    Only local stores: an object store cannot swap folders atomically (it has no rename)."""
    if not store.backend.local:
        raise StoreError(
            f"mmina store compact works on local stores only: {store.root} is on object storage, which "
            f"cannot swap a folder atomically (compact a local copy, or write batches with the batch writer)"
        )
    chosen = store.select_runs(run_ids or ())
    store.ensure_writable()
    results = []
    for run_id in chosen:
        if progress:
            progress(run_id)
        with store.commit_lock(exclusive=True):  # also keeps a second compaction out of the work folder
            shutil.rmtree(store.root / WORK_DIR, ignore_errors=True)
            result = _compact_run(store, run_id)
            shutil.rmtree(store.root / WORK_DIR, ignore_errors=True)
        if result is not None:
            results.append(result)
    return results


def _compact_run(store: Store, run_id: str) -> Compacted | None:
    live = {table: _local_files(store, table, run_id) for table in COMPACTED}
    committed = store.committed_stems()
    merge = {
        table: [p for p in files if table in STANDALONE or file_stem(p) in committed]
        for table, files in live.items()
    }
    tables = [table for table in COMPACTED if len(merge[table]) > 1]
    if not tables:
        return None
    if EPISODES not in tables and merge[EPISODES] and any(t in tables for t in (STEPS, REQUESTS)):
        tables.append(EPISODES)  # its manifest must list the merged files
    before = (_count(live), _size(live))
    stem = batch_stem()
    built = {
        table: _build(store, table, run_id, stem, merge[table], live[table])
        for table in tables
        if table is not EPISODES
    }
    if EPISODES in tables:
        children = {table: w for table, w in built.items() if table in (STEPS, REQUESTS)}
        _build(
            store,
            EPISODES,
            run_id,
            stem,
            merge[EPISODES],
            live[EPISODES],
            _manifest(store, run_id, merge, children),
        )
    for table in tables:
        _exchange(_work_dir(store, table, run_id), Path(table_dir(store.root, table, run_id)))
    after = {table: _local_files(store, table, run_id) for table in COMPACTED}
    episodes = store.read("episodes", run_id=run_id, columns=["episode_id"]).num_rows
    return Compacted(
        run_id=run_id,
        episodes=episodes,
        files_before=before[0],
        files_after=_count(after),
        bytes_before=before[1],
        bytes_after=_size(after),
    )


def _build(
    store: Store,
    table: Table,
    run_id: str,
    stem: str,
    merge: list[Path],
    live: list[Path],
    metadata: dict[bytes, bytes] | None = None,
) -> Written:
    """The new partition folder: the merged file, plus hard links to every file not merged."""
    work = _work_dir(store, table, run_id)
    work.mkdir(parents=True)
    for path in live:
        if path not in merge:
            os.link(path, work / path.name)
    data = _merged(store, table, merge)
    written = write_new(
        store.backend,
        work / data_name(stem, SCHEMA_VERSION),
        table,
        data,
        row_group_size=BATCH_STEP_ROW_GROUP if table is STEPS else None,
        metadata=metadata,
    )
    if read_file(written.path, table, ["episode_id"]).num_rows != data.num_rows:
        raise StoreError(
            f"compacted {table.name} file of run {run_id} did not read back; nothing was changed"
        )
    return written


def _manifest(
    store: Store, run_id: str, merge: dict[Table, list[Path]], children: dict[Table, Written]
) -> dict[bytes, bytes] | None:
    """The manifest of the compacted ``episodes`` file: the merged files where they will be,
    and what the merged episodes' manifests listed that stays (blob packs, files not merged;
    not the files of an earlier compaction that died before swapping them in);
    none when one of them had no manifest (nothing to vouch for)."""
    merged = {p.relative_to(store.root).as_posix() for table in (STEPS, REQUESTS) for p in merge[table]}
    kept: list[Listed] = []
    for path in merge[EPISODES]:
        listed = read_manifest(pq.read_schema(path).metadata)
        if listed is None:
            return None
        kept += [
            entry for entry in listed if entry.path not in merged and Path(store.root, entry.path).exists()
        ]
    final = [
        Listed(
            (table_dir(store.root, table, run_id) / w.path.name).relative_to(store.root).as_posix(),
            w.rows,
            w.bytes,
        )
        for table, w in children.items()
    ]
    return manifest_metadata(store.root, [*final, *kept])


def _merged(store: Store, table: Table, paths: list[Path]) -> pa.Table:
    """All rows of ``paths`` at the current schema version, grouped by episode (stable order)."""
    data = pa.concat_tables(
        read_file(path, table, migrations=store.migrations).select(table.column_names) for path in paths
    )
    return data.take(pc.sort_indices(data, [("episode_id", "ascending")]))


def _work_dir(store: Store, table: Table, run_id: str) -> Path:
    return Path(store.root, WORK_DIR, table_dir(store.root, table, run_id).relative_to(store.root))


def _local_files(store: Store, table: Table, run_id: str) -> list[Path]:
    """A run's files of ``table`` on the local disk (compaction swaps local folders only)."""
    return [Path(p) for p in data_files(store.backend, table, run_id)]


def _exchange(new: Path, live: Path) -> None:
    """Atomically swap two folders (Linux ``renameat2``); the old content ends up at ``new``."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise StoreError("compaction needs renameat2 (Linux with glibc 2.28 or later)")
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if not live.exists():
        live.mkdir(parents=True)
    if renameat2(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(live), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        hint = (
            " (this file system cannot swap folders atomically)"
            if code in (errno.EINVAL, errno.ENOSYS)
            else ""
        )
        raise StoreError(f"could not swap {live} with its compacted version: {os.strerror(code)}{hint}")


def _count(files: dict[Table, list[Path]]) -> int:
    return sum(len(paths) for paths in files.values())


def _size(files: dict[Table, list[Path]]) -> int:
    return sum(p.stat().st_size for paths in files.values() for p in paths)
