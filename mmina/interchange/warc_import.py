"""``mmina import warc``: a WARC made by any tool as a run an agent can be replayed against.

The user gives the tasks (an MMInA task file or folder); every task gets one episode of no
steps whose ``requests`` are every exchange of the WARC(s), so ``mmina replay --agent X --run
<run>`` runs X on each task against the archived web: exact, fuzzy and nearest matching and
the coverage gaps as for any recorded run. Bodies are stored once whatever the number of tasks.

Read in two passes over each file, one record at a time: the first collects the ``request``
records (method, headers, body) and teaches the redactor every secret of the traffic; the
second turns each ``response`` (and ``revisit``) record into a ``requests`` row with its
request, the body decoded as the browser would receive it (chunked transfer undone, gzip /
deflate / br content coding undone), redacted as the recorder redacts. A revisit gets the body
of the record it refers to (by ``WARC-Refers-To``, else by payload digest, else by target URI
and date); a ``304`` revisit keeps that record's status and headers.

A WebSocket written as IIPC warc-specifications #115 proposes (``warc_sockets``: a
``resource`` record at the ``ws(s)://`` URL holding the frames as JSON lines, tied to its
handshake's ``101`` by ``WARC-Concurrent-To`` in either direction, as mmina and Browsertrix
write it) becomes one socket row whose body is the conversation, which replay plays by the clock.

A WARC that ``mmina export warc`` wrote restores its episodes (``warc_restore``) when no tasks
are given: the run, its tasks, every episode with its own steps, screenshots and traffic.
Other records (``warcinfo``, other ``metadata`` and ``resource`` records, ``conversion``)
are counted and skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mmina.interchange.stored import InterchangeError, Row
from mmina.interchange.warc_records import (
    Headers,
    HttpMessage,
    WarcRecord,
    dechunk,
    decode_content,
    parse_http,
    read_records,
)
from mmina.interchange.warc_restore import ORIGIN, Restore, exchange_columns, mmina_headers
from mmina.interchange.warc_sockets import SOCKET_MIME, is_socket_url, stored_log
from mmina.recorder.har import BODY_HEADER, MISSING
from mmina.redaction.redact import Redactor, configured_secrets
from mmina.redaction.secret_rules import is_text_type
from mmina.store import Store
from mmina.store.layout import check_id
from mmina.store.runs import SuiteRef, run_row
from mmina.store.writers import BatchWriter
from mmina.tasks.task import Task, id_slug, task_row
from mmina.tasks.taskcheck import load_suite

AGENT = "warc"
DEFAULT_VIEWPORT = (1280, 2048)
"""The recorder's default viewport (a WARC does not say what the page was shown in)."""
HTTP_RECORDS = ("response", "revisit")
Progress = Callable[[int], None]


@dataclass
class WarcImport:
    run_id: str
    store: str
    files: int = 0
    records: int = 0
    exchanges: int = 0
    revisits: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    """Records not imported, by why (their type, or an unresolved revisit)."""
    undecodable: int = 0
    tasks: int = 0
    sockets: int = 0
    """WebSockets read from their frames' ``resource`` records (IIPC #115)."""
    socket_frames: int = 0
    control_frames: int = 0
    """Close, ping and pong frames: the browser answers them, a replay does not play them."""
    restored_episodes: int = 0
    """Episodes of an mmina export restored with their steps (``warc_restore``)."""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Request:
    method: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None


@dataclass(frozen=True)
class _Stored:
    """What a later revisit needs of an imported response."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: str | None
    size: int
    mime: str


class _Reader:
    """The state of one import: requests by record id, and responses for revisits."""

    def __init__(self, report: WarcImport) -> None:
        self.report = report
        self.writer: BatchWriter | None = None
        """Set for the second pass (the first checks every file before the store is touched)."""
        self.redactor = Redactor(configured_secrets())
        self.requests: dict[str, _Request] = {}
        self.request_for: dict[str, str] = {}
        """Response record id → its request record's id (a request record names its response)."""
        self.by_record: dict[str, _Stored] = {}
        self.by_digest: dict[str, _Stored] = {}
        self.by_uri: dict[tuple[str, str], _Stored] = {}
        self.rows: list[Row] = []
        self.sockets: dict[str, WarcRecord] = {}
        """WebSocket frame records (IIPC #115) by record id."""
        self.upgrades: dict[str, list[str]] = {}
        """``101`` response record id → the records it names (``WARC-Concurrent-To``)."""
        self.socket_of: dict[str, str] = {}
        """A ``101`` response's record id → its socket's frame record id (linked either way)."""
        self.tied: set[str] = set()
        """Frame records a ``101`` response is tied to (that response makes the socket's row)."""
        self.answered: set[str] = set()
        """Request record ids a response record answered."""
        self.restore = Restore()

    # pass 1
    def learn(self, record: WarcRecord) -> None:
        """Keep a request record; learn every exchange's secrets."""
        url = _uri(record)
        self.redactor.learn_text(url)
        self.restore.notice(record)
        if record.kind == "resource" and is_socket_url(url):
            self._learn_socket(record)
        elif record.kind == "request":
            message = parse_http(record.block)
            body = message.body or None
            request = _Request(message.start.split(" ", 1)[0].upper() or "GET", tuple(message.headers), body)
            self.requests[record.get("warc-record-id")] = request
            for response_id in record.concurrent():
                self.request_for[response_id] = record.get("warc-record-id")
            self.redactor.learn_headers(message.headers)
            if body:
                self.redactor.learn_body(body, message.header("content-type"), response=False)
        elif record.kind in HTTP_RECORDS:
            message = parse_http(record.block)
            self.answered.update(record.concurrent())
            if message.status == 101:
                self.upgrades[record.get("warc-record-id")] = record.concurrent()
            self.redactor.learn_headers(message.headers)
            body = self._decoded(message, count=False)
            if body and is_text_type(message.header("content-type")):
                self.redactor.learn_body(body, message.header("content-type"), response=True)

    def _learn_socket(self, record: WarcRecord) -> None:
        """Keep a socket's frame record, tie it to its handshake, learn its secrets."""
        self.sockets[record.get("warc-record-id")] = record
        log = stored_log(record.block, _date(record.get("warc-date")))
        if log.body:
            self.redactor.learn_body(log.body, SOCKET_MIME, response=True)

    def link_sockets(self) -> None:
        """After pass 1: tie each ``101`` response to its socket's frames, whichever names the other."""
        named_by = {other: rid for rid, record in self.sockets.items() for other in record.concurrent()}
        for response, names in self.upgrades.items():
            frames = next((n for n in names if n in self.sockets), None) or named_by.get(response)
            if frames is not None:
                self.socket_of[response] = frames
                self.tied.add(frames)

    # pass 2
    def add(self, record: WarcRecord) -> None:
        self.report.records += 1
        if record.kind == "request" and self.restore.active:
            self._unanswered(record)
        if self.restore.take(record, self._put):
            return
        if record.kind == "resource" and record.get("warc-record-id") in self.sockets:
            self._lone_socket(record)
            return
        if record.kind not in HTTP_RECORDS:
            if record.kind != "request":
                self._skip(record.kind or "untyped")
            return
        message = parse_http(record.block)
        frames = self.sockets.get(self.socket_of.get(record.get("warc-record-id"), ""))
        if message.status == 101 and frames is not None:
            self._add_socket(frames, record, message.headers)
            return
        stored = (
            self._revisited(record, message) if record.kind == "revisit" else self._response(message, record)
        )
        if stored is None:
            self._skip("revisit of a record not in the file(s)")
            return
        self._remember(record, stored)
        self.rows.append(self._row(record, stored))
        self.report.exchanges += 1

    def _skip(self, why: str) -> None:
        self.report.skipped[why] = self.report.skipped.get(why, 0) + 1

    def _lone_socket(self, frames: WarcRecord) -> None:
        """A socket's frame record: its handshake's response makes the row, when there is one."""
        if frames.get("warc-record-id") not in self.tied:
            self._add_socket(frames, frames, [])

    def _add_socket(self, frames: WarcRecord, handshake: WarcRecord, headers: Headers) -> None:
        """One socket row: the ``ws(s)`` URL, the handshake's headers, the frames as its body."""
        opened = _date(frames.get("warc-date"))
        log = stored_log(frames.block, opened)
        body = self._put(self.redactor.body(log.body, SOCKET_MIME), SOCKET_MIME) if log.body else None
        stored = _Stored(101, tuple(headers), body, len(log.body), SOCKET_MIME)
        self.rows.append(
            {
                **self._row(handshake, stored),
                "url": self.redactor.text(_uri(frames)) or "",
                "started_at": opened,
                "method": "GET",
            }
        )
        self.report.sockets += 1
        self.report.socket_frames += log.frames
        self.report.control_frames += log.control
        self.report.exchanges += 1

    def _unanswered(self, record: WarcRecord) -> None:
        """A request of an mmina export that got no response: a row of status 0, as recorded."""
        rid = record.get("warc-record-id")
        if rid in self.answered or not record.get("warc-mmina-episode"):
            return
        self.rows.append(self._row(record, _Stored(0, (), None, 0, "")))

    def _decoded(self, message: HttpMessage, count: bool = True) -> bytes | None:
        """The entity as the browser receives it; None when a content coding cannot be undone."""
        body = message.body
        if "chunked" in message.header("transfer-encoding").lower():
            body = dechunk(body)
        try:
            return decode_content(body, message.header("content-encoding").split(","))
        except InterchangeError:
            self.report.undecodable += count
            return None

    def _response(self, message: HttpMessage, record: WarcRecord) -> _Stored:
        body = self._decoded(message)
        headers = [*message.headers, *mmina_headers(record)]
        if body is None and not record.get("warc-mmina-body"):
            headers.append((BODY_HEADER, MISSING))
        mime = message.header("content-type")
        digest = self._put(self.redactor.body(body, mime), mime) if body else None
        return _Stored(message.status, tuple(headers), digest, len(body or b""), mime)

    def _put(self, data: bytes, mime: str) -> str:
        assert self.writer is not None, "the second pass has a writer"
        return self.writer.put_blob(data, mime or "application/octet-stream")

    def _revisited(self, record: WarcRecord, message: HttpMessage) -> _Stored | None:
        self.report.revisits += 1
        original = (
            self.by_record.get(record.get("warc-refers-to"))
            or self.by_digest.get(record.get("warc-payload-digest"))
            or self.by_uri.get(
                (record.get("warc-refers-to-target-uri").strip("<>"), record.get("warc-refers-to-date"))
            )
        )
        if original is None:
            return None
        if message.status in (0, 304) or not message.headers:
            return original
        return _Stored(
            message.status,
            tuple(message.headers),
            original.body,
            original.size,
            message.header("content-type") or original.mime,
        )

    def _remember(self, record: WarcRecord, stored: _Stored) -> None:
        self.by_record[record.get("warc-record-id")] = stored
        if record.get("warc-payload-digest") and stored.body:
            self.by_digest.setdefault(record.get("warc-payload-digest"), stored)
        self.by_uri[(_uri(record), record.get("warc-date"))] = stored

    def _row(self, record: WarcRecord, stored: _Stored) -> Row:
        request = (
            self.requests.get(record.get("warc-record-id"))
            or self.requests.get(self.request_for.get(record.get("warc-record-id"), ""))
            or next(
                (self.requests[r] for r in record.concurrent() if r in self.requests),
                _Request("GET", (), None),
            )
        )
        request_type = next((v for n, v in request.headers if n.lower() == "content-type"), "")
        request_body = (
            self._put(self.redactor.body(request.body, request_type, response=False), request_type)
            if request.body
            else None
        )
        location = next((v for n, v in stored.headers if n.lower() == "location"), "")
        return {
            "seq": len(self.rows),
            "step_index": -1,
            "started_at": _date(record.get("warc-date")),
            "method": request.method,
            "url": self.redactor.text(_uri(record)) or "",
            "status": stored.status,
            "request_headers": self.redactor.headers(request.headers),
            "response_headers": self.redactor.headers(stored.headers),
            "request_body": request_body,
            "request_body_size": len(request.body or b""),
            "response_body": stored.body,
            "response_body_size": stored.size,
            "mime_type": stored.mime,
            "redirect_url": self.redactor.text(location) or "",
            "time_ms": 0.0,
            **exchange_columns(record),
        }


def _uri(record: WarcRecord) -> str:
    return record.get("warc-target-uri").strip("<>")


def _date(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InterchangeError(f"a record has a WARC-Date that is not a date: {text[:40]!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def import_warc(
    store: Store,
    paths: Sequence[Path],
    tasks_path: str | None,
    run_id: str | None = None,
    task_ids: Sequence[str] = (),
    progress: Progress | None = None,
) -> WarcImport:
    """Import ``paths`` as a run over the tasks of ``tasks_path``, or, without tasks, restore
    the run an mmina export holds (see the module); the files are read completely before
    anything is written, so a bad file writes nothing."""
    for path in paths:
        if not path.is_file():
            raise InterchangeError(f"no WARC file {path}")
    if task_ids and not tasks_path:
        raise InterchangeError("--task picks tasks of --tasks: give --tasks too")
    suite = load_suite(tasks_path, list(task_ids) or None) if tasks_path else None
    run_id = check_id("run id", run_id) if run_id else None
    report = WarcImport(
        run_id or "", store.location, files=len(paths), tasks=len(suite.tasks) if suite else 0
    )
    reader = _learnt(_Reader(report), paths)
    if suite is None and not reader.restore.found:
        raise InterchangeError(
            f"{', '.join(str(p) for p in paths)}: not written by mmina export warc (no "
            "urn:mmina:run record), so there is no run to restore: give --tasks"
        )
    reader.restore.active = suite is None
    report.run_id = run_id or (
        reader.restore.run_id() if suite is None else f"{datetime.now(UTC):%Y%m%d-%H%M%S}-warc"
    )
    reader.writer = writer = store.batch_writer(report.run_id)
    try:
        rows = _read(reader, paths, report, progress)
        if suite is None:
            report.restored_episodes = reader.restore.commit(
                store, writer, rows, reader.redactor.row, [os.path.abspath(p) for p in paths]
            )
            report.tasks = len(reader.restore.tasks())
        else:
            _commit(store, writer, suite, [_without_origin(r) for r in rows], paths, report)
    except BaseException:
        writer.abort()
        raise
    return report


def _learnt(reader: _Reader, paths: Sequence[Path]) -> _Reader:
    """Pass 1 over every file: requests kept, secrets learnt, sockets tied to their handshakes."""
    for path in paths:
        for record in read_records(path):
            reader.learn(record)
    reader.link_sockets()
    return reader


def _read(reader: _Reader, paths: Sequence[Path], report: WarcImport, progress: Progress | None) -> list[Row]:
    for path in paths:
        for record in read_records(path):
            reader.add(record)
            if progress:
                progress(report.records)
    if not reader.rows:
        raise InterchangeError(
            f"no response records in {', '.join(str(p) for p in paths)}: nothing to replay"
        )
    rows = sorted(reader.rows, key=lambda r: (r["started_at"], r["seq"]))
    return [{**row, "seq": seq} for seq, row in enumerate(rows)]


def _without_origin(row: Row) -> Row:
    return {k: v for k, v in row.items() if k != ORIGIN}


def _commit(
    store: Store, writer: BatchWriter, suite: Any, rows: list[Row], paths: Sequence[Path], report: WarcImport
) -> None:
    """The run (its tasks from the suite) and one episode per task holding every exchange."""
    config = {
        "mode": "import",
        "source": "warc",
        "files": [os.path.abspath(p) for p in paths],
        "records": report.records,
        "exchanges": report.exchanges,
    }
    row = run_row(
        AGENT,
        None,
        config,
        SuiteRef(suite.name, suite.path, suite.sha256),
        len(suite.tasks),
        viewport=DEFAULT_VIEWPORT,
    )
    if not store.begin_run(report.run_id, row, [task_row(t) for t in suite.tasks]):
        raise InterchangeError(f"run {report.run_id} already exists in {store.root}; choose another --run-id")
    started, ended = rows[0]["started_at"], rows[-1]["started_at"]
    packs: list[str] | None = None
    for task in suite.tasks:
        writer.add_episode(
            {**_episode_row(task, started, ended), **({"blob_packs": packs} if packs else {})}, requests=rows
        )
        packs = packs or writer.episodes[-1]["blob_packs"]  # the bodies were put once, with the first episode
    writer.commit()


def _episode_row(task: Task, started: datetime, ended: datetime) -> Row:
    return {
        "episode_id": f"{id_slug(task.task_id)}-warc-{os.urandom(8).hex()}",
        "task_id": task.task_id,
        "attempt": 1,
        "status": "completed",
        "stop_reason": None,
        "final_answer": None,
        "n_steps": 0,
        "n_hops": task.n_hops,
        "live_hops": 0,
        "hop_steps": [],
        "started_at": started,
        "ended_at": ended,
        "duration_ms": (ended - started).total_seconds() * 1e3,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
    }
