"""Labelling in ``mmina serve``: a person's pass / fail / unsure per hop and per task, and the
queue of episodes still to label. The server's only write path.

A write passes the same gate as every read (the Host check on loopback, the token with
``--expose``), and then this one, against cross-site requests (a page elsewhere making the
labeller's browser post here): the body must be JSON (a cross-origin page cannot send that
without a preflight, which this server never approves), the browser must say the request
comes from this server's own pages (``Sec-Fetch-Site: same-origin``) and its ``Origin`` must
be this server's. Clients that are not browsers send neither header and need only the token.
``--read-only`` refuses every write.

The queue is the episodes of some runs (all by default), of one hop-count bucket, or those
two evaluators judge differently, in a fixed order (run, task, start time, id); its next
episode is the first after the current one that the labeller has not labelled yet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from mmina.errors import MminaError, not_found
from mmina.evaluators.labelling import MAX_NOTE, EpisodeRef, Label, LabelError, checked_labeller, write_labels
from mmina.serve import params
from mmina.serve.catalog import Catalog
from mmina.serve.params import BadRequest, NotFound
from mmina.store.convenience import bucket_sql
from mmina.tasks.task import BUCKETS

MAX_BODY = 64 << 10
MAX_LABELS = 200
QUEUE_PARAMS = ("run", "bucket", "disagree", "labeller", "after")
EPISODE_SQL = "SELECT episode_id, run_id, task_id, n_hops FROM episodes WHERE episode_id = $episode"
LABELS_SQL = """
SELECT hop, verdict, detail_json, json_extract_string(args_json, '$.labeller') AS labeller FROM scores
WHERE evaluator = 'human' AND episode_id = $episode
QUALIFY batch_id = first_value(batch_id) OVER (PARTITION BY json_extract_string(args_json, '$.labeller')
                                               ORDER BY scored_at DESC, batch_id DESC)
ORDER BY labeller, hop NULLS FIRST
"""
QUEUE_SQL = f"""
WITH chosen AS (
    SELECT run_id, episode_id, task_id, started_at FROM episodes
    WHERE (len($runs) = 0 OR list_contains($runs, run_id)) AND ($bucket IS NULL OR {bucket_sql("n_hops")} = $bucket)
), verdicts AS (
    SELECT episode_id, evaluator, verdict FROM latest_scores
    WHERE level = 'task' AND list_contains($evaluators, evaluator)
), differing AS (
    SELECT episode_id FROM verdicts GROUP BY episode_id
    HAVING count(DISTINCT evaluator) = 2 AND count(DISTINCT verdict) = 2
), mine AS (
    SELECT DISTINCT episode_id FROM scores
    WHERE evaluator = 'human' AND json_extract_string(args_json, '$.labeller') = $labeller
)
SELECT c.episode_id, c.episode_id IN (SELECT episode_id FROM mine) AS labelled FROM chosen c
WHERE len($evaluators) = 0 OR c.episode_id IN (SELECT episode_id FROM differing)
ORDER BY c.run_id, c.task_id, c.started_at, c.episode_id
"""


@dataclass(frozen=True)
class Queue:
    """Which episodes to label: runs (none: all), a bucket, two evaluators that must differ."""

    runs: tuple[str, ...] = ()
    bucket: str | None = None
    disagree: tuple[str, ...] = ()


def check_write(request: Request, writable: bool) -> None:
    """Refuse a write this server does not take (see the module docstring)."""
    if not writable:
        raise Refused(403, "this server is read-only (started with --read-only)")
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise Refused(415, "labels are sent as JSON (Content-Type: application/json)")
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        raise Refused(403, f"a write must come from this server's own pages, not from a {site} page")
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
        raise Refused(403, f"a write must come from this server's own pages, not from {origin[:100]}")


class Refused(MminaError):
    """A write the server will not take; ``status`` says why (403 not allowed, 415 not JSON)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class LabelEndpoints:
    """The labelling requests over one store's catalog; ``labeller``: the server's default name."""

    def __init__(self, catalog: Catalog, labeller: str, writable: bool) -> None:
        self.catalog, self.labeller, self.writable = catalog, checked_labeller(labeller), writable
        self.saved: set[tuple[str, str]] = set()
        """(labeller, episode) saved by this server: the queue counts them before the views
        over the whole store are made again (the watcher does that in the background)."""

    def config(self, request: Request) -> dict[str, Any]:
        params.check_known(_given(request), ())
        return {"labeller": self.labeller, "writable": self.writable, "max_note": MAX_NOTE}

    def labels(self, request: Request) -> dict[str, Any]:
        """The episode's current labels: this labeller's, and who else labelled it."""
        given = _given(request)
        params.check_known(given, ("labeller",))
        ref = self._episode(request.path_params["episode_id"])
        labeller = checked_labeller(params.one(given, "labeller", self.labeller) or "")
        rows = self.catalog.rows(LABELS_SQL, {"episode": ref.episode_id}, ref.run_id)
        mine = [_label(row) for row in rows if row["labeller"] == labeller]
        return {
            "episode_id": ref.episode_id,
            "n_hops": ref.n_hops,
            "labeller": labeller,
            "labels": mine,
            "note": next((m["note"] for m in mine if m["note"]), ""),
            "labellers": sorted({row["labeller"] for row in rows}),
        }

    async def save(self, request: Request) -> dict[str, Any]:
        """Store one episode's labels as a new ``human`` batch. Its run's views are made again
        when next read (so the episode shows them), and the queue counts it at once."""
        check_write(request, self.writable)
        body = await _json_body(request)
        ref = self._episode(_text(body, "episode_id"))
        labeller = checked_labeller(_text(body, "labeller") or self.labeller)
        labels = _labels(body, ref.episode_id)
        saved = await run_in_threadpool(
            write_labels, self.catalog.store, labels, labeller, "serve", {ref.episode_id: ref}
        )
        self.catalog.forget(ref.run_id)
        self.saved.add((labeller, ref.episode_id))
        return {"batch_id": saved.batch_id, "labeller": saved.labeller, "saved": saved.labels}

    def queue(self, request: Request) -> dict[str, Any]:
        """The queue's size, how much of it the labeller has labelled, and the next episode to label."""
        given = _given(request)
        params.check_known(given, QUEUE_PARAMS)
        chosen, labeller = _queue(given), checked_labeller(params.one(given, "labeller", self.labeller) or "")
        rows = self.catalog.rows(
            QUEUE_SQL,
            {
                "runs": list(chosen.runs),
                "bucket": chosen.bucket,
                "evaluators": list(chosen.disagree),
                "labeller": labeller,
            },
        )
        order = [
            (row["episode_id"], bool(row["labelled"]) or (labeller, row["episode_id"]) in self.saved)
            for row in rows
        ]
        done = sum(labelled for _, labelled in order)
        return {
            "total": len(order),
            "labelled": done,
            "left": len(order) - done,
            "labeller": labeller,
            "next": next_unlabelled(order, params.one(given, "after")),
        }

    def _episode(self, episode_id: str) -> EpisodeRef:
        found = self.catalog.rows(EPISODE_SQL, {"episode": episode_id})
        if not found:
            raise NotFound(not_found("episode", episode_id[:100], str(self.catalog.store.root)))
        row = found[0]
        return EpisodeRef(row["episode_id"], row["run_id"], row["task_id"], row["n_hops"] or 0)


def next_unlabelled(order: list[tuple[str, bool]], after: str | None) -> str | None:
    """The first unlabelled episode after ``after`` in the queue's order, going round to the
    start; never ``after`` itself (None: nothing left)."""
    start = next((i + 1 for i, (episode, _) in enumerate(order) if episode == after), 0)
    for episode, labelled in order[start:] + order[:start]:
        if not labelled and episode != after:
            return episode
    return None


def _given(request: Request) -> params.Params:
    return params.grouped(request.query_params.multi_items())


def _queue(given: params.Params) -> Queue:
    evaluators = params.many(given, "disagree")
    if len(evaluators) not in (0, 2):
        raise BadRequest("parameter disagree names two evaluators (disagree=a&disagree=b), or none")
    return Queue(params.many(given, "run"), params.choice(given, "bucket", BUCKETS), evaluators)


def _label(row: dict[str, Any]) -> dict[str, Any]:
    detail = json.loads(row["detail_json"] or "{}")
    return {"hop": row["hop"], "label": detail.get("label", row["verdict"]), "note": detail.get("note", "")}


async def _json_body(request: Request) -> dict[str, Any]:
    data = await request.body()
    if len(data) > MAX_BODY:
        raise BadRequest(f"the labels of one episode are at most {MAX_BODY >> 10} KB of JSON")
    try:
        body = json.loads(data or b"null")
    except ValueError:
        raise BadRequest("send the labels as a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("send the labels as a JSON object")
    return body


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be text")
    return value


def _labels(body: dict[str, Any], episode_id: str) -> list[Label]:
    """The body's labels (``[{"hop": null or 1-based, "label": ...}]``) with the episode's note on each."""
    items, note = body.get("labels"), _text(body, "note").strip()
    if not isinstance(items, list) or not items or len(items) > MAX_LABELS:
        raise LabelError("label the task or a hop first (keys p, f, u)")
    found = []
    for item in items:
        hop = item.get("hop") if isinstance(item, dict) else "?"
        if not isinstance(item, dict) or not (
            hop is None or (isinstance(hop, int) and not isinstance(hop, bool))
        ):
            raise BadRequest(
                'each label is {"hop": null or a hop position, "label": "pass" | "fail" | "unsure" | '
                '"blocked"}'
            )
        found.append(Label(episode_id, _text(item, "label"), hop, note))
    return found
