"""``store info`` and ``store verify``: what a store holds, and whether it is whole.

``verify`` reads every file completely and reports, each with its path: files a writer
that is gone left unfinished (``partial``, ``upload``), files of episodes that were never
committed (``orphan``), unreadable files (``corrupt``: truncated, random bytes, empty; also
a file holding another table's rows), files of a newer mmina (``newer_version``), files a
commit's manifest lists that are gone or differ (``missing``, ``changed``), files of a
committed stem its manifest does not list (``unlisted``), an episode committed in two files
(``duplicate``), blobs referred to but stored nowhere (``missing_blob``), a file where a folder
belongs (``not_a_folder``) and committed episodes without a verdict their run stores with each
episode (``unscored``: a crash between the commit and the verdicts; ``record --resume`` adds
it). Episodes committed before manifests cannot be checked for missing files; the report says
how many (``unchecked``). With ``repair``, leftovers of writers that are gone are removed first
(``leftovers.py``); damaged data is never touched. With ``redacted``, it also lists the response
bodies redaction changed (:func:`redacted_bodies`): not damage, but what a replay serves differs
there from what the browser received.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmina.errors import CorruptFileError, MminaError, SchemaVersionError, StoreError
from mmina.store.compact import WORK_DIR
from mmina.store.files import arrow_buffer, read_failure, version_in
from mmina.store.layout import file_stem, file_version, is_batch, run_of
from mmina.store.leftovers import Leftover, orphans, remove_leftovers
from mmina.store.manifest import Listed, read_manifest
from mmina.store.migrations import check_readable
from mmina.store.runs import run_config, verdicts_expected
from mmina.store.schema import BLOBS, EPISODES, REQUESTS, RUNS, SCHEMA_VERSION, SCORES, STEPS, TABLES, Table
from mmina.store.store import READERS, Store
from mmina.store.writers import ORPHAN_GRACE_S


@dataclass(frozen=True)
class TableInfo:
    name: str
    files: int
    rows: int
    bytes: int
    unreadable: int = 0
    """Files whose footer cannot be read (skipped with a warning; see ``store verify``)."""


@dataclass(frozen=True, kw_only=True)
class StoreInfo:
    root: str
    schema_version: int
    runs: int
    episodes: int
    steps: int
    tables: list[TableInfo]

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.tables)


def store_info(store: Store) -> StoreInfo:
    """Counts from Parquet footers (no data read); steps count committed episodes only; an
    unreadable file is counted apart (and warned about), never a reason to fail."""
    committed = store.committed_stems()
    tables = [_table_info(store, table, committed) for table in TABLES.values()]
    rows = {t.name: t.rows for t in tables}
    return StoreInfo(
        root=str(store.root),
        schema_version=store.marker_version(),
        runs=rows["runs"],
        episodes=rows["episodes"],
        steps=rows["steps"],
        tables=tables,
    )


def _table_info(store: Store, table: Table, committed: set[str]) -> TableInfo:
    files = store.files(table.name)
    if table in (STEPS, REQUESTS):
        files = [f for f in files if file_stem(f) in committed]
    rows, unreadable = 0, 0
    for path in files:
        try:
            rows += pq.read_metadata(str(path), filesystem=store.backend.arrow).num_rows
        except (OSError, pa.ArrowException) as exc:
            failure = read_failure(path, exc)
            if not isinstance(failure, CorruptFileError):
                raise failure from None
            store.skip_file(path, failure.reason)
            unreadable += 1
    return TableInfo(table.name, len(files), rows, sum(store.backend.size(f) for f in files), unreadable)


@dataclass(frozen=True)
class Problem:
    path: str
    kind: str
    message: str


@dataclass(frozen=True, kw_only=True)
class RedactedBody:
    """A response body stored other than received: redaction changed it (schema version 7 on)."""

    run_id: str
    episode_id: str
    step_index: int
    seq: int
    url: str
    mime_type: str
    received_size: int
    stored_size: int


@dataclass
class VerifyReport:
    root: str
    files_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    """What could not be checked, and why (e.g. episodes committed before manifests)."""
    repaired: list[Leftover] = field(default_factory=list)
    redacted_bodies: list[RedactedBody] | None = None
    """With ``redacted``: the bodies redaction changed (a fidelity defect, not a problem of the store)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, path: PurePath | str, kind: str, message: str) -> None:
        self.problems.append(Problem(str(path), kind, message))


@dataclass(frozen=True, kw_only=True)
class FileFacts:
    """What verify learnt from reading one file whole (the later checks read nothing again)."""

    rows: int
    size: int
    metadata: dict[bytes, bytes]
    episode_ids: list[str]
    blobs: frozenset[str] = frozenset()
    """Blob hashes: those a pack stores, or those a steps or requests file refers to."""
    values: dict[str, list[Any]] = field(default_factory=dict)
    """The columns of :data:`KEPT_COLUMNS` (a run's configuration, the verdicts' keys)."""


BLOB_COLUMNS = {
    BLOBS.name: ("sha256",),
    STEPS.name: ("screenshot", "screenshot_som"),
    REQUESTS.name: ("request_body", "response_body"),
}
KEPT_COLUMNS = {RUNS.name: ("config_json",), SCORES.name: ("episode_id", "evaluator", "level")}


Readable = dict[str, dict[PurePath, FileFacts]]
"""Per table, the files that read whole, with their facts."""


def verify_store(store: Store, repair: bool = False, redacted: bool = False) -> VerifyReport:
    """Read every file completely; report what is damaged, missing, duplicated or left over
    (and with ``redacted``, the bodies redaction changed).

    Never raises for a bad file: every failure becomes a :class:`Problem` with its path.
    """
    report = VerifyReport(str(store.root))
    if repair:
        report.repaired = remove_leftovers(store, wait=True)
    _check_unfinished(store, report)
    readable = {table.name: _read_table(store, table, report) for table in TABLES.values()}
    _check_episodes(readable, report)
    _check_orphans(store, report)
    _check_manifests(store, readable, report)
    _check_blob_refs(readable, report)
    _check_verdicts(store, readable, report)
    if redacted:
        report.redacted_bodies = redacted_bodies(store)
    return report


REDACTED_COLUMNS = [
    "run_id",
    "episode_id",
    "step_index",
    "seq",
    "url",
    "mime_type",
    "response_body",
    "response_body_size",
    "received_body_sha256",
    "received_body_size",
]


def redacted_bodies(store: Store) -> list[RedactedBody]:
    """Every committed response body whose stored bytes differ from those the browser received
    (``received_body_sha256`` is not the stored blob's hash), in run, episode and request order."""
    data = store.read("requests", columns=REDACTED_COLUMNS)
    received = data.column("received_body_sha256")
    changed = pc.and_(
        pc.is_valid(received), pc.not_equal(received, pc.fill_null(data.column("response_body"), ""))
    )
    rows = data.filter(pc.fill_null(changed, False)).to_pylist()
    return sorted(
        (
            RedactedBody(
                run_id=r["run_id"],
                episode_id=r["episode_id"],
                step_index=r["step_index"],
                seq=r["seq"],
                url=r["url"],
                mime_type=r["mime_type"] or "",
                received_size=r["received_body_size"] or 0,
                stored_size=r["response_body_size"] or 0,
            )
            for r in rows
        ),
        key=lambda b: (b.run_id, b.episode_id, b.seq),
    )


def _check_unfinished(store: Store, report: VerifyReport) -> None:
    for item in store.backend.unfinished():
        if item.alive:
            report.in_progress.append(str(item.path))
        else:
            kind = "partial" if store.backend.local else "upload"
            report.add(
                item.path,
                kind,
                f"unfinished file of a writer that is gone ({item.writer}); ignored by "
                f"readers, removed by `mmina store verify --repair`",
            )


def _read_table(store: Store, table: Table, report: VerifyReport) -> dict[PurePath, FileFacts]:
    """Every file of the table read whole, ``READERS`` at a time (on an object store each is
    one request, mostly waiting), its problem reported in the files' order."""
    try:
        paths = store.files(table.name)
    except StoreError as exc:
        report.add(store.root / table.name, "not_a_folder", str(exc))
        return {}
    with ThreadPoolExecutor(max(1, min(READERS, len(paths)))) as pool:
        outcomes = list(pool.map(lambda path: _check_file(store, path, table), paths))
    readable = {}
    for path, outcome in zip(paths, outcomes):
        report.files_checked += 1
        if isinstance(outcome, Problem):
            report.problems.append(outcome)
        else:
            readable[path] = outcome
    return readable


def _check_file(store: Store, path: PurePath, table: Table) -> FileFacts | Problem:
    try:
        return _read_fully(path, table, store.backend.read_bytes(path))
    except SchemaVersionError as exc:
        return Problem(str(path), "newer_version", str(exc))
    except Exception as exc:  # noqa: BLE001 - verify must report every failure, never crash
        message = str(exc) if isinstance(exc, MminaError) else f"{type(exc).__name__}: {exc}"
        return Problem(str(path), "corrupt", message)


def _read_fully(path: PurePath, table: Table, content: bytes) -> FileFacts:
    """Decode every page of the file and check its declared table, version and columns.

    The file was fetched whole (one request on an object store, where a file opened through
    fsspec costs a request for each range Arrow reads) and is decoded from memory Arrow owns:
    Arrow's threads then never call into Python, which at the interpreter's exit aborted the
    process after the report was printed ("terminate called without an active exception":
    a thread taking the GIL during finalization is ended mid-way through Arrow's code)."""
    try:
        with pq.ParquetFile(pa.BufferReader(arrow_buffer(content))) as parquet:
            metadata = dict(parquet.schema_arrow.metadata or {})
            version = version_in(metadata, path, table)
            check_readable(version, str(path))
            if version != file_version(path):
                raise MminaError(
                    f"file name says version {file_version(path)} but its metadata says {version}"
                )
            data = parquet.read()
    except (OSError, pa.ArrowException) as exc:
        raise read_failure(path, exc) from None
    missing = set(table.column_names) - set(data.column_names)
    if version == SCHEMA_VERSION and missing:
        raise MminaError(f"missing column(s) {', '.join(sorted(missing))}")
    ids = data.column("episode_id").to_pylist() if table is EPISODES else []
    kept = {c: data.column(c).to_pylist() for c in KEPT_COLUMNS.get(table.name, ()) if c in data.column_names}
    return FileFacts(
        rows=data.num_rows,
        size=len(content),
        metadata=metadata,
        episode_ids=ids,
        blobs=_blob_hashes(table, data),
        values=kept,
    )


def _blob_hashes(table: Table, data: pa.Table) -> frozenset[str]:
    """The blobs a pack stores, or a steps or requests file refers to (older files may lack
    some of the reference columns)."""
    present = [c for c in BLOB_COLUMNS.get(table.name, ()) if c in data.column_names]
    found = {v for c in present for v in pc.drop_null(data.column(c)).to_pylist() if v}
    if table is STEPS and "images" in data.column_names:
        flat = pc.list_flatten(data.column("images"))
        found |= {v for v in pc.struct_field(flat, "blob").to_pylist() if v} if len(flat) else set()
    return frozenset(found)


def _check_episodes(readable: Readable, report: VerifyReport) -> None:
    """An episode committed in two files (a copied file): readers count the first file's row."""
    first: dict[str, PurePath] = {}
    for path, facts in sorted(readable[EPISODES.name].items(), key=_original_first):
        twice = sorted({i for i in facts.episode_ids if i in first})
        if twice:
            report.add(
                path,
                "duplicate",
                f"episode {twice[0]}{f' and {len(twice) - 1} more' if len(twice) > 1 else ''} "
                f"also committed in {first[twice[0]]}; readers count the first",
            )
        for episode_id in facts.episode_ids:
            first.setdefault(episode_id, path)


def _original_first(item: tuple[PurePath, FileFacts]) -> tuple[bool, PurePath]:
    """Files named as their commit named them (the episode id, or a batch) before copies."""
    path, facts = item
    return not (is_batch(path) or file_stem(path) in facts.episode_ids), path


def _check_orphans(store: Store, report: VerifyReport) -> None:
    """Files of a stem whose ``episodes`` file never landed (writer killed between renames or
    PUTs); on an object store a young one may be a commit under way. Not checked when the
    store's layout is damaged (reported as ``not_a_folder``)."""
    try:
        found = orphans(store)[0]
    except StoreError:
        return
    for path in found:
        if not store.backend.local and store.backend.age_s(path) < ORPHAN_GRACE_S:
            report.in_progress.append(str(path))
            continue
        report.add(
            path,
            "orphan",
            f"a file of {file_stem(path)}, which was never committed; ignored by readers, "
            f"removed by `mmina store verify --repair`",
        )


def _check_manifests(store: Store, readable: Readable, report: VerifyReport) -> None:
    """Every file a commit's manifest lists is there, whole; every file of a committed stem is
    listed. Runs whose compaction died between its swaps are left to the next compaction."""
    listed: dict[str, tuple[PurePath, Listed]] = {}
    without = 0
    pending = _compacting(store, report)
    for path, facts in readable[EPISODES.name].items():
        if run_of(path) in pending:
            continue
        try:
            entries = read_manifest(facts.metadata)
        except ValueError as exc:
            report.add(path, "corrupt", str(exc))
            continue
        if entries is None:
            without += 1
        for entry in entries or ():
            listed[entry.path] = (path, entry)
            _check_listed(store, readable, path, entry, report)
    _check_unlisted(store, readable, listed, report)
    if without:
        report.unchecked.append(
            f"{without} episodes file(s) written before manifests: files missing from their "
            f"episodes cannot be detected (steps, requests and packs are still read whole)"
        )


def _check_listed(
    store: Store, readable: Readable, owner: PurePath, entry: Listed, report: VerifyReport
) -> None:
    path = store.root / entry.path
    facts = readable.get(entry.path.split("/", 1)[0], {}).get(path)  # read whole: its size is known
    if facts is None and not store.backend.exists(path):
        report.add(
            path, "missing", f"listed by {owner} ({entry.rows} rows) but gone: that commit is incomplete"
        )
        return
    if facts is not None and (facts.rows, facts.size) != (entry.rows, entry.bytes):
        report.add(
            path,
            "changed",
            f"{facts.rows} rows and {facts.size} bytes, but {owner} committed {entry.rows} "
            f"rows and {entry.bytes} bytes",
        )


def _compacting(store: Store, report: VerifyReport) -> set[str | None]:
    """Runs with files waiting in the compaction's work folder (it died between its swaps)."""
    work = store.root / WORK_DIR
    runs = {run_of(p) for p in store.backend.files(work, 3)} if store.backend.local else set()
    for run in sorted(r for r in runs if r):
        report.unchecked.append(
            f"run {run}: a compaction died between its swaps (its work is in {work}); readers see "
            f"the same rows, the next `mmina store compact` finishes it; manifests not checked"
        )
    return runs


def _check_unlisted(store: Store, readable: Readable, listed: dict[str, Any], report: VerifyReport) -> None:
    """A file of a committed stem that the stem's manifest does not list (a copy)."""
    manifested = {file_stem(store.root / path) for path in listed}
    for table in (STEPS, REQUESTS, BLOBS):
        for path in readable[table.name]:
            relative = path.relative_to(store.root).as_posix()
            if relative not in listed and file_stem(path) in manifested:
                report.add(
                    path,
                    "unlisted",
                    f"a {table.name} file of {file_stem(path)} that its commit did not write",
                )


def _check_verdicts(store: Store, readable: Readable, report: VerifyReport) -> None:
    """Committed episodes without a verdict their run stores with every episode (see
    :data:`mmina.store.runs.VERDICTS_KEY`): one problem per run, naming the command that adds them."""
    episodes: dict[str | None, list[str]] = {}
    for path, facts in sorted(readable[EPISODES.name].items()):
        episodes.setdefault(run_of(path), []).extend(facts.episode_ids)
    scores: dict[str | None, list[tuple[Any, ...]]] = {}
    for path, facts in readable[SCORES.name].items():
        keys = zip(*(facts.values.get(c, []) for c in KEPT_COLUMNS[SCORES.name]))
        scores.setdefault(run_of(path), []).extend(keys)
    for path, facts in sorted(readable[RUNS.name].items()):
        run_id = run_of(path)
        expected = verdicts_expected(run_config((facts.values.get("config_json") or [None])[0]))
        missing = unscored(episodes.get(run_id, []), scores.get(run_id, []), expected)
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            report.add(
                store.root / SCORES.name / f"run_id={run_id}",
                "unscored",
                f"episode {missing[0]}{more} committed without a {'/'.join(expected)} verdict (a crash between "
                f"the commit and its verdicts): `mmina record --resume --run-id {run_id}` adds them",
            )


def unscored(
    episode_ids: Sequence[str], scores: Iterable[tuple[Any, ...]], evaluators: Sequence[str]
) -> list[str]:
    """The episodes (once each, in order) lacking a task verdict of any of ``evaluators``;
    ``scores`` are (episode id, evaluator, level) of the scores rows."""
    scored = {(episode, evaluator) for episode, evaluator, level in scores if level == "task"}
    return [e for e in dict.fromkeys(episode_ids) if any((e, ev) not in scored for ev in evaluators)]


def unscored_episodes(store: Store, run_id: str, evaluators: Sequence[str]) -> list[str]:
    """:func:`unscored` for one run of the store, read through its readers."""
    scores = store.read("scores", run_id=run_id, columns=list(KEPT_COLUMNS[SCORES.name]))
    episodes = store.read("episodes", run_id=run_id, columns=["episode_id"]).column("episode_id").to_pylist()
    return unscored(
        episodes, zip(*(scores.column(c).to_pylist() for c in KEPT_COLUMNS[SCORES.name])), evaluators
    )


def _check_blob_refs(readable: Readable, report: VerifyReport) -> None:
    """Every blob a step or request refers to must be in some pack."""
    stored = frozenset().union(*(facts.blobs for facts in readable[BLOBS.name].values()))
    for table in (STEPS, REQUESTS):
        for path, facts in readable[table.name].items():
            missing = facts.blobs - stored
            if missing:
                report.add(
                    path,
                    "missing_blob",
                    f"{len(missing)} referenced blob(s) not in any pack, e.g. {min(missing)}",
                )
