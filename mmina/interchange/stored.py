"""What every export shares: which episodes, read one file at a time, and what they say about
themselves (the mmina and schema version they came from, the parts a redaction touched).

Exports stream: episodes are read file by file (an episode's own files, or one episode at a
time out of a batch file, whose row groups the episode id narrows), so a run of 100,000
episodes costs the memory of one episode and the list of its file names, never its size.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

import pyarrow as pa

from mmina import __version__
from mmina.errors import SEE_EPISODES, CorruptFileError, MminaError, not_found
from mmina.outputs import output_path
from mmina.recorder.har import BODY_HEADER, MISSING
from mmina.redaction.secret_rules import MARKERS
from mmina.store import Store
from mmina.store.blobs import PackReader
from mmina.store.files import read_file
from mmina.store.layout import file_stem
from mmina.store.schema import EPISODES, REQUESTS, SCHEMA_VERSION, STEPS, Table

Row = dict[str, Any]


class InterchangeError(MminaError):
    """An export or import cannot be done as asked (no such run, a file that is not WARC...)."""


@dataclass(frozen=True)
class Selection:
    """Which episodes to export: a run (``--run``), episodes by id (``--episode``), and
    optionally only some tasks (``--task``) of those."""

    run: str | None = None
    episodes: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()


@dataclass
class StoredEpisode:
    """One episode as the store holds it: its row, steps (by index) and requests (by order)."""

    run_id: str
    row: Row
    steps: list[Row] = field(default_factory=list)
    requests: list[Row] = field(default_factory=list)

    @property
    def episode_id(self) -> str:
        return self.row["episode_id"]


class BlobReader:
    """Reads episodes' blobs for an export: from each episode's packs a row group at a time
    (the packs' directories kept for the next episodes, which often share a pack), and what
    they lack from the whole store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.packs = PackReader(store.backend, store.skip_file)

    def read(self, episode: StoredEpisode, digests: Iterable[str | None]) -> dict[str, bytes]:
        """The blobs of ``episode`` with these digests (looked up in its own packs first)."""
        wanted = sorted({d for d in digests if d})
        if not wanted:
            return {}
        found = self.packs.read(wanted, list(episode.row.get("blob_packs") or ()))
        missing = [d for d in wanted if d not in found]
        return {**found, **self.store.read_blobs(missing)} if missing else found


def selected_runs(store: Store, selection: Selection) -> list[str]:
    """The runs a selection reads: its run, else the runs of its episodes (each checked to exist)."""
    if selection.run:
        return [store.resolve_run(selection.run)]
    if not selection.episodes:
        raise InterchangeError("name what to export: --run REF or --episode ID")
    rows = store.read("episodes", columns=["episode_id", "run_id"]).to_pylist()
    runs = {r["episode_id"]: r["run_id"] for r in rows}
    unknown = [e for e in selection.episodes if e not in runs]
    if unknown:
        raise InterchangeError(not_found("episode", unknown[0], str(store.root), runs, SEE_EPISODES))
    return list(dict.fromkeys(runs[e] for e in selection.episodes))


def stream_episodes(
    store: Store,
    selection: Selection,
    step_columns: Sequence[str] | None = None,
    request_columns: Sequence[str] | None = None,
) -> Iterator[StoredEpisode]:
    """The selected episodes one at a time (file order, then start time within a file), each
    with its steps and requests; an unreadable file is skipped with a warning (as reads do)."""
    wanted = set(selection.episodes) or None
    tasks = set(selection.tasks) or None
    seen: set[str] = set()
    for run_id in selected_runs(store, selection):
        children = {
            table: {file_stem(p): p for p in store.files(table.name, run_id)} for table in (STEPS, REQUESTS)
        }
        for path in store.files("episodes", run_id):
            rows = [
                r
                for r in _rows(store, path, EPISODES)
                if r["episode_id"] not in seen
                and (wanted is None or r["episode_id"] in wanted)
                and (tasks is None or r["task_id"] in tasks)
            ]
            for row in sorted(rows, key=lambda r: (r["started_at"], r["episode_id"])):
                seen.add(row["episode_id"])
                yield _episode(store, run_id, row, children, path, step_columns, request_columns)


def _episode(
    store: Store,
    run_id: str,
    row: Row,
    children: dict[Table, dict[str, PurePath]],
    path: PurePath,
    step_columns: Sequence[str] | None,
    request_columns: Sequence[str] | None,
) -> StoredEpisode:
    """One episode with its child rows, read from the files of its stem (narrowed to it)."""
    stem = file_stem(path)
    where = {"episode_id": row["episode_id"]}
    steps = _rows(store, children[STEPS].get(stem), STEPS, step_columns, where)
    requests = _rows(store, children[REQUESTS].get(stem), REQUESTS, request_columns, where)
    return StoredEpisode(
        run_id,
        {**row, "run_id": run_id},
        sorted(steps, key=lambda s: s["step_index"]),
        sorted(requests, key=lambda r: r["seq"]),
    )


def _rows(
    store: Store,
    path: PurePath | None,
    table: Table,
    columns: Sequence[str] | None = None,
    where: dict[str, Any] | None = None,
) -> list[Row]:
    if path is None:
        return []
    needed = (
        None
        if columns is None
        else sorted(
            {
                *columns,
                "episode_id",
                *(["step_index"] if table is STEPS else []),
                *(["seq"] if table is REQUESTS else []),
            }
        )
    )
    try:
        data: pa.Table = read_file(path, table, needed, store.migrations, store.backend.arrow, where)
    except CorruptFileError as exc:
        store.skip_file(path, exc.reason)
        return []
    return data.to_pylist()


def count_episodes(store: Store, selection: Selection) -> int:
    """How many episodes a selection holds (for progress), from the ``episodes`` table alone."""
    total = 0
    wanted, tasks = set(selection.episodes), set(selection.tasks)
    for run_id in selected_runs(store, selection):
        rows = store.read("episodes", run_id=run_id, columns=["episode_id", "task_id"]).to_pylist()
        total += sum(
            1
            for r in rows
            if (not wanted or r["episode_id"] in wanted) and (not tasks or r["task_id"] in tasks)
        )
    if not total:
        raise InterchangeError("the selection holds no finished episode")
    return total


def provenance(store: Store) -> dict[str, Any]:
    """What an export states about where it came from."""
    return {
        "software": f"mmina {__version__}",
        "mmina_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "store_schema_version": store.marker_version(),
        "store": store.location,
    }


REDACTION_NOTE = (
    "secrets were redacted by mmina before they reached the store (credentials in headers, cookies, "
    "secret query values and body fields, typed secrets): each is replaced by [REDACTED] "
    "(%5BREDACTED%5D inside URLs); every other byte is as the browser received it. Bodies are "
    "decoded (no Content-Encoding); a body the recording could not keep is absent."
)


def redacted_parts(request: Row, request_body: bytes | None, response_body: bytes | None) -> list[str]:
    """Which parts of one exchange carry a redaction marker (url, request-headers, request-body,
    response-headers, response-body): what the export says per record."""
    parts = {
        "url": _marked(request.get("url")),
        "request-headers": any(_marked(h["value"]) for h in request.get("request_headers") or ()),
        "request-body": _marked_bytes(request_body),
        "response-headers": any(_marked(h["value"]) for h in request.get("response_headers") or ()),
        "response-body": _marked_bytes(response_body),
    }
    return [name for name, marked in parts.items() if marked]


def body_missing(request: Row) -> bool:
    """The recording had a response body it could not keep (``x-mmina-body: missing``)."""
    return any(
        h["name"].lower() == BODY_HEADER and h["value"] == MISSING
        for h in request.get("response_headers") or ()
    )


def _marked(text: str | None) -> bool:
    return any(marker in text for marker in MARKERS) if text else False


def _marked_bytes(data: bytes | None) -> bool:
    return any(marker.encode() in data for marker in MARKERS) if data else False


@contextmanager
def written_whole(output: Path) -> Iterator[Path]:
    """A temporary path beside ``output`` (checked first: :func:`mmina.outputs.output_path`) to
    write to, renamed to ``output`` when the block ends well and removed when it fails: an
    export appears whole or not at all."""
    output_path(output)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    try:
        yield partial
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)


@contextmanager
def written_folder(output: Path) -> Iterator[Path]:
    """A new folder beside ``output`` (which must be new or empty) to write into, renamed to
    ``output`` when the block ends well and removed when it fails: a folder export appears
    whole or not at all."""
    output_path(output, folder=True)
    if output.exists() and any(output.iterdir()):
        raise InterchangeError(f"{output} is not empty: name a new folder to write")
    if not output.parent.is_dir():
        raise InterchangeError(f"cannot write {output}: no folder {output.parent}")
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        yield partial
        if output.exists():
            output.rmdir()
        os.replace(partial, output)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def folder_bytes(folder: Path) -> int:
    """The size of every file under ``folder``."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
