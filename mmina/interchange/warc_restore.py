"""An mmina WARC export restored as the run it was: ``mmina import warc FILE`` without ``--tasks``.

``mmina export warc`` writes, besides the traffic, a ``metadata`` record per run
(``urn:mmina:run:<id>``: its row and its tasks), per episode (``urn:mmina:episode:<id>``: its
row) and per step (``urn:mmina:step:<episode>/<index>``: its row), each screenshot as a
``resource`` record, and on every exchange's records the episode, order and step it belongs
to (``WARC-Mmina-Episode``, ``-Seq``, ``-Step``) with what HTTP cannot say (``-Time-Ms``,
``-Received``, ``-Chunks``, ``-Body``). From them an import rebuilds the run under its own id
(or ``--run-id``), every episode under its own id with its steps and its own requests, so
``mmina replay --run <run>`` replays it as the original store would, sockets by the clock.

What the WARC does not hold is left out of the restored rows: a blob reference (set-of-marks
screenshot, model input, an in-view image) whose bytes are not in the file becomes null.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mmina.interchange.row_json import row_from_json
from mmina.interchange.stored import InterchangeError, Row
from mmina.interchange.warc_records import Headers, WarcRecord
from mmina.recorder.har import BODY_HEADER, CHUNKS_HEADER
from mmina.store import Store
from mmina.store.runs import run_config
from mmina.store.schema import EPISODES, RUNS, STEPS, TASKS
from mmina.store.writers import BatchWriter

PREFIXES = {"run": "urn:mmina:run:", "episode": "urn:mmina:episode:", "step": "urn:mmina:step:"}
SCREENSHOT = "urn:mmina:screenshot:"
ORIGIN = "_origin"
"""A row's key for where an mmina export put it: (episode, seq, step); removed before writing."""
PutBlob = Callable[[bytes, str], str]
Redact = Callable[[Row], Row]


def mmina_headers(record: WarcRecord) -> Headers:
    """The headers of mmina's own a recorded row had (``x-mmina-chunks``, ``x-mmina-body``),
    from the WARC fields the export moved them to."""
    moved = [(CHUNKS_HEADER, record.get("warc-mmina-chunks")), (BODY_HEADER, record.get("warc-mmina-body"))]
    return [(name, value) for name, value in moved if value]


def exchange_columns(record: WarcRecord) -> Row:
    """The ``requests`` columns an mmina export keeps in WARC fields (time, the body as
    received) and where the row was (:data:`ORIGIN`); nothing for another tool's WARC."""
    columns: Row = {}
    if record.get("warc-mmina-time-ms"):
        columns["time_ms"] = _number(record.get("warc-mmina-time-ms"), float)
    received = record.get("warc-mmina-received").split()
    if len(received) == 2:
        columns.update(received_body_sha256=received[0], received_body_size=_number(received[1], int))
    if record.get("warc-mmina-episode"):
        columns[ORIGIN] = (
            record.get("warc-mmina-episode"),
            _number(record.get("warc-mmina-seq"), int),
            _number(record.get("warc-mmina-step"), int),
        )
    return columns


def _number(text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise InterchangeError(f"a record's mmina field is not a number: {text[:40]!r}") from None


@dataclass
class Restore:
    """What an mmina export says about its run, episodes and steps, gathered while reading."""

    active: bool = False
    runs: list[Row] = field(default_factory=list)
    episodes: list[Row] = field(default_factory=list)
    steps: dict[str, list[Row]] = field(default_factory=dict)
    blobs: set[str] = field(default_factory=set)
    """Blobs this import put (a restored row may refer to these only)."""

    def notice(self, record: WarcRecord) -> None:
        """Pass 1: keep the run records (small; the run's id is needed before pass 2)."""
        if record.kind == "metadata" and _target(record).startswith(PREFIXES["run"]):
            self.runs.append(_json(record))

    @property
    def found(self) -> bool:
        """The file(s) came from ``mmina export warc``: they hold a run record."""
        return bool(self.runs)

    def run_id(self) -> str:
        run_id = self.runs[0].get("run_id") if self.runs else None
        if not isinstance(run_id, str) or not run_id:
            raise InterchangeError("the mmina export's run record names no run; give --run-id")
        return run_id

    def take(self, record: WarcRecord, put: PutBlob) -> bool:
        """Keep an mmina run, episode or step record, or store a screenshot; whether it was one."""
        if not self.active:
            return False
        target = _target(record)
        if record.kind == "resource" and target.startswith(SCREENSHOT):
            self.blobs.add(put(record.block, record.get("content-type") or "image/jpeg"))
            return True
        kind = next((k for k, prefix in PREFIXES.items() if target.startswith(prefix)), None)
        if record.kind != "metadata" or kind is None:
            return False
        if kind == "episode":
            self.episodes.append(_json(record))
        elif kind == "step":
            content = _json(record)
            self.steps.setdefault(str(content.get("episode_id")), []).append(content)
        return True

    def commit(
        self, store: Store, writer: BatchWriter, rows: list[Row], redact: Redact, files: list[str]
    ) -> int:
        """Write the restored run (``writer``'s) and its episodes, their rows redacted by
        ``redact`` as a recording's are (the traffic's secrets, learnt by the import); how many.
        The run's settings say where it came from (``restored_from``: the files, the run id)."""
        if not self.episodes:
            raise InterchangeError("the mmina export holds no episode to restore")
        run_id = writer.run_id
        run = row_from_json(RUNS, self.runs[0]["run"])
        run["config_json"] = json.dumps(
            {
                **run_config(run.get("config_json")),
                "restored_from": {"files": files, "run_id": self.run_id()},
            },
            sort_keys=True,
        )
        if not store.begin_run(run_id, run, self.tasks()):
            raise InterchangeError(f"run {run_id} already exists in {store.root}; choose another --run-id")
        requests: dict[str, list[Row]] = {}
        for row in rows:
            episode, seq, step = row.pop(ORIGIN, (None, 0, -1))
            received = {
                "received_body_sha256": row["response_body"],  # no WARC-Mmina-Received: not redacted
                "received_body_size": row["response_body_size"] if row["response_body"] else None,
            }
            requests.setdefault(str(episode), []).append({**received, **row, "seq": seq, "step_index": step})
        for content in self.episodes:
            self._episode(writer, content, requests, redact)
        packs = sorted({p for e in writer.episodes for p in e["blob_packs"] or ()})
        for episode in writer.episodes:
            episode["blob_packs"] = packs  # one batch, one pack: every episode's blobs are in it
        writer.commit()
        return len(self.episodes)

    def tasks(self) -> list[Row]:
        tasks = {t["task_id"]: row_from_json(TASKS, t) for run in self.runs for t in run.get("tasks") or ()}
        return list(tasks.values())

    def _episode(
        self, writer: BatchWriter, content: Row, requests: dict[str, list[Row]], redact: Redact
    ) -> None:
        row = redact(row_from_json(EPISODES, content.get("row") or {}))
        episode_id = row["episode_id"] = row["episode_id"] or content.get("episode_id")
        row["final_screenshot"] = self._known(row.get("final_screenshot"))
        steps = [
            redact(self._step(s))
            for s in sorted(self.steps.get(str(episode_id), []), key=lambda s: s["step_index"])
        ]
        mine = sorted(requests.get(str(episode_id), []), key=lambda r: r["seq"])
        writer.add_episode({k: v for k, v in row.items() if k != "blob_packs"}, steps, mine)

    def _step(self, content: Row) -> Row:
        row = row_from_json(STEPS, {**(content.get("row") or {}), "tree_text": content.get("tree_text")})
        for name in ("screenshot", "screenshot_som", "model_input"):
            row[name] = self._known(row.get(name))
        row["images"] = [
            {**image, "blob": self._known(image.get("blob"))} for image in row.get("images") or ()
        ]
        return row

    def _known(self, digest: str | None) -> str | None:
        return digest if digest in self.blobs else None


def _target(record: WarcRecord) -> str:
    return record.get("warc-target-uri").strip("<>")


def _json(record: WarcRecord) -> Row:
    try:
        content = json.loads(record.block)
    except ValueError:
        raise InterchangeError(f"the mmina record {_target(record)} is not JSON") from None
    if not isinstance(content, dict):
        raise InterchangeError(f"the mmina record {_target(record)} is not a JSON object")
    return content
