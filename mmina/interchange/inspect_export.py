"""``mmina export inspect``: a run as an Inspect AI log (``.eval``), for ``inspect view`` and the
tools that read Inspect logs.

An ``.eval`` file is a zip of JSON documents (Inspect's log format version 2): one
``samples/<id>_epoch_<n>.json`` per sample, the sample summaries in journal files
(``_journal/summaries/<n>.json``, a thousand to a file, as a log being written keeps them)
and ``header.json`` (the eval's spec, plan, results and stats), written last. Each episode
is one sample, written as soon as it is read, so an export of any size holds one episode and
the running totals in memory (and the zip's directory, a few hundred bytes an entry).

What maps to what (see docs/interchange.md for what is lost):

* sample ``id`` / ``epoch``: the task id (with ``@hop<K>`` for a hop-conditioned episode) and the
  attempt (the repeat of ``record --repeats``: Inspect's epochs); ``input``: the task's intent;
  ``target``: the task's reference answers;
* ``messages``: the conversation as the model saw it (the first step's input messages, then
  each later step's newest message) with the model's raw output after each step; an agent
  without a model shows its scripted outputs;
* ``events``: per step a ``model`` event (the exact stored model input, the output, tokens)
  for agents that call a model, and an ``info`` event (``source: mmina/step``) with the URL,
  title, action, its error, the hop, and the screenshot and tree as attachments;
* ``scores``: the chosen evaluator's current verdict (the latest batch, as ``mmina report``
  reads it) with the hop verdicts in its ``metadata``; the header's metrics are
  ``task_success`` and ``hop_success`` over every task and repeat, as the report's;
* ``model_usage`` and the header's ``stats``: tokens and cost, per sample and summed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mmina.errors import INFRASTRUCTURE
from mmina.interchange.stored import (
    BlobReader,
    InterchangeError,
    Row,
    Selection,
    StoredEpisode,
    provenance,
    stream_episodes,
    written_whole,
)
from mmina.models.model_input import load_request
from mmina.store import Store
from mmina.tasks.blocking import BLOCKED

LOG_VERSION = 2
SUMMARIES_PER_FILE = 1000
ATTACH_OVER = 200
"""Texts longer than this go to the sample's attachments (by hash: a system prompt repeated on
every step is stored once), as Inspect itself condenses its logs."""
DEFAULT_EVALUATOR = "hops"
EXPORT_NAMESPACE = uuid.UUID("6d6d696e-612d-696e-7370-6563742d6c6f")
GENERATE_CONFIG = ("temperature", "max_tokens", "top_p", "seed", "frequency_penalty", "presence_penalty")
OnEpisode = Callable[[StoredEpisode], None]


@dataclass
class InspectExport:
    """What an export wrote, and the totals its header states."""

    path: str
    run_id: str
    evaluator: str
    samples: int = 0
    scored: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    task_success: float | None = None
    hop_success: float | None = None
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Latest:
    """Per task and repeat, the latest episode's verdict (what the report's rates count)."""

    by_task: dict[tuple[str, int, int | None, int | None], tuple[int, str, bool, int, int]] = field(
        default_factory=dict
    )
    """(task, repeat, start hop, prefix steps) → (attempt, start, passed, hops passed, hops): a
    hop-conditioned run counts each start hop of a task, and a repeated run (``record
    --repeats``) each repeat, as ``episode_scores`` does."""

    def add(self, episode: Row, verdict: dict[str, Any] | None) -> None:
        if (
            verdict is None
            or verdict["verdict"] in ("n/a", BLOCKED)
            or episode.get("error_kind") == INFRASTRUCTURE
        ):
            return  # nothing to judge, the environment's or the infrastructure's failure: in no rate, as in the report
        key = (episode["attempt"], str(episode["started_at"]))
        task = (
            episode["task_id"],
            episode["attempt"],
            episode.get("hops_given"),
            episode.get("prefix_steps"),
        )
        current = self.by_task.get(task)
        if current is None or key > current[:2]:
            self.by_task[task] = (*key, verdict["passed"], verdict["hops_passed"], verdict["hops_total"])

    def rates(self) -> tuple[float | None, float | None]:
        rows = list(self.by_task.values())
        hops = sum(r[4] for r in rows)
        return (
            sum(r[2] for r in rows) / len(rows) if rows else None,
            sum(r[3] for r in rows) / hops if hops else None,
        )


# ---------------------------------------------------------------- verdicts


def read_verdicts(store: Store, run_id: str, evaluator: str) -> dict[str, dict[str, Any]]:
    """Episode id → the evaluator's current verdict: the latest batch's task row and hop rows
    (hops a prefix gave, hops 1 .. ``hops_given``, left out as the report does)."""
    columns = ["episode_id", "level", "hop", "verdict", "value", "batch_id", "scored_at", "detail_json"]
    rows = store.read("scores", run_id=run_id, columns=columns, where={"evaluator": evaluator}).to_pylist()
    latest: dict[str, tuple[Any, str]] = {}
    for row in rows:
        key = (row["scored_at"], row["batch_id"])
        if row["episode_id"] not in latest or key > latest[row["episode_id"]]:
            latest[row["episode_id"]] = key
    verdicts: dict[str, dict[str, Any]] = {}
    for row in rows:
        if (row["scored_at"], row["batch_id"]) == latest[row["episode_id"]]:
            verdicts.setdefault(row["episode_id"], {"task": None, "hops": []})
            part = verdicts[row["episode_id"]]
            if row["level"] == "task":
                part["task"] = row
            elif row["level"] == "hop":
                part["hops"].append(row)
    return {episode: part for episode, part in verdicts.items() if part["task"] is not None}


def episode_verdict(scored: dict[str, Any] | None, episode: Row) -> dict[str, Any] | None:
    """One episode's verdict as the exports state it: the task row's, and its hop rows after the
    hops a prefix gave (``hops_given``); ``blocked`` (with ``not_executable``, Online-Mind2Web's
    word, and the evidence) when the environment kept the agent from the task and it did not
    pass, as ``episode_scores`` says (``mmina.tasks.blocking``)."""
    if scored is None:
        return None
    hops = sorted(
        (h for h in scored["hops"] if h["hop"] > (episode.get("hops_given") or 0)), key=lambda h: h["hop"]
    )
    task = scored["task"]
    blocked = episode.get("blocked") if task["verdict"] != "pass" else None
    verdict = BLOCKED if blocked else task["verdict"]
    return {
        "passed": verdict == "pass",
        "verdict": verdict,
        "value": task["value"],
        "detail": _json(task["detail_json"]),
        "hops_passed": sum(h["verdict"] == "pass" for h in hops),
        "hops_total": len(hops),
        "hops": [{"hop": h["hop"], "verdict": h["verdict"], "value": h["value"]} for h in hops],
        **({"not_executable": True, "blocked": _json(blocked)} if blocked else {}),
    }


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


# ---------------------------------------------------------------- one sample


class _Sample:
    """Builds one sample's JSON from a stored episode (its blobs read once)."""

    def __init__(
        self,
        reader: BlobReader,
        episode: StoredEpisode,
        task: Row,
        model: str,
        verdict: dict[str, Any] | None,
        evaluator: str,
    ) -> None:
        self.reader, self.episode, self.task, self.model = reader, episode, task, model
        self.verdict, self.evaluator = verdict, evaluator
        self.attachments: dict[str, str] = {}
        self._blobs: dict[str, bytes] = reader.read(episode, [s.get("screenshot") for s in episode.steps])

    def blob(self, digest: str) -> bytes:
        if digest not in self._blobs:
            self._blobs.update(self.reader.read(self.episode, [digest]))
        if digest not in self._blobs:
            raise InterchangeError(
                f"episode {self.episode.episode_id}: blob {digest[:12]} is missing from the store"
            )
        return self._blobs[digest]

    def attach(self, text: str) -> str:
        """A long text as an ``attachment://`` reference (short ones stay inline)."""
        if len(text) <= ATTACH_OVER:
            return text
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        self.attachments[key] = text
        return f"attachment://{key}"

    def build(self) -> dict[str, Any]:
        row, steps = self.episode.row, self.episode.steps
        requests = [self.request(s) for s in steps]
        events = [e for step, request in zip(steps, requests) for e in self.step_events(step, request)]
        usage = _usage(row["prompt_tokens"], row["completion_tokens"], row["cost_usd"])
        sample: dict[str, Any] = {
            "id": sample_id(row),
            "epoch": row["attempt"] or 1,
            "input": self.task.get("intent") or "",
            "target": _targets(self.task),
            "messages": self.messages(steps, requests),
            "output": self.output(row.get("final_answer") or "", usage),
            "scores": self.scores(),
            "metadata": self.metadata(),
            "events": events,
            "model_usage": {self.model: usage},
            "started_at": _iso(row["started_at"]),
            "completed_at": _iso(row["ended_at"]),
            "total_time": (row["duration_ms"] or 0) / 1000,
            "working_time": (row["duration_ms"] or 0) / 1000,
            "uuid": row["episode_id"],
            "attachments": self.attachments,
        }
        if row["status"] == "error":
            message = row.get("error") or "the episode ended in an error"
            sample["error"] = {"message": message, "traceback": message, "traceback_ansi": message}
        return sample

    def request(self, step: Row) -> dict[str, Any] | None:
        digest = step.get("model_input")
        return load_request(digest, self.blob) if digest else None

    def messages(self, steps: list[Row], requests: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if not any(requests):
            messages.append(self.message({"role": "user", "content": self.task.get("intent") or ""}))
        for step, request in zip(steps, requests):
            if request:
                shown = request["messages"] if not messages else request["messages"][-1:]
                messages.extend(self.message(m) for m in shown)
            messages.append(self.assistant(step.get("model_output") or ""))
        return messages

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI-style message as an Inspect chat message (images as attachments)."""
        role = (
            message.get("role") if message.get("role") in ("system", "user", "assistant", "tool") else "user"
        )
        content = message.get("content")
        if isinstance(content, list):
            parts = [self.part(p) for p in content if isinstance(p, dict)]
            return {"role": role, "content": parts, "source": "input"}
        return {"role": role, "content": self.attach(str(content or "")), "source": "input"}

    def part(self, part: dict[str, Any]) -> dict[str, Any]:
        image = part.get("image_url")
        if isinstance(image, dict):
            return {
                "type": "image",
                "image": self.attach(str(image.get("url", ""))),
                "detail": image.get("detail") or "auto",
            }
        return {"type": "text", "text": self.attach(str(part.get("text", "")))}

    def assistant(self, text: str) -> dict[str, Any]:
        return {"role": "assistant", "content": self.attach(text), "source": "generate", "model": self.model}

    def output(self, completion: str, usage: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": self.model,
            "completion": completion,
            "usage": usage,
            "choices": [{"message": self.assistant(completion), "stop_reason": "stop"}],
        }

    def step_events(self, step: Row, request: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
        when = _iso(step["started_at"])
        offset = (step["started_at"] - self.episode.row["started_at"]).total_seconds()
        if request:
            config = {k: request[k] for k in GENERATE_CONFIG if request.get(k) is not None}
            usage = _usage(step["prompt_tokens"], step["completion_tokens"], step["cost_usd"])
            yield {
                "event": "model",
                "timestamp": when,
                "working_start": offset,
                "model": self.model,
                "input": [self.message(m) for m in request["messages"]],
                "tools": [],
                "tool_choice": "none",
                "config": config,
                "output": self.output(step.get("model_output") or "", usage),
            }
        shot = step.get("screenshot")
        screenshot = None
        if shot:
            screenshot = self.attach(f"data:image/jpeg;base64,{base64.b64encode(self.blob(shot)).decode()}")
        yield {
            "event": "info",
            "timestamp": when,
            "working_start": offset,
            "source": "mmina/step",
            "data": {
                "step_index": step["step_index"],
                "url": step.get("url"),
                "title": step.get("title"),
                "action": step.get("action"),
                "action_error": step.get("action_error"),
                "model_output": step.get("model_output"),
                "live_hops": step.get("live_hops"),
                "live_hop_completed": step.get("live_hop_completed"),
                "screenshot": screenshot,
                "tree": self.attach(step.get("tree_text") or ""),
            },
        }

    def scores(self) -> dict[str, Any]:
        if self.verdict is None:
            return {}
        verdict = self.verdict
        return {
            self.evaluator: {
                "value": verdict["value"],
                "answer": self.episode.row.get("final_answer"),
                "explanation": f"task {verdict['verdict']}; hops {verdict['hops_passed']}/"
                f"{verdict['hops_total']}",
                "metadata": {
                    "verdict": verdict["verdict"],
                    "detail": verdict["detail"],
                    "hops": verdict["hops"],
                    "hops_passed": verdict["hops_passed"],
                    "hops_total": verdict["hops_total"],
                },
            }
        }

    def metadata(self) -> dict[str, Any]:
        row = self.episode.row
        keys = (
            "episode_id",
            "run_id",
            "task_id",
            "status",
            "stop_reason",
            "final_answer",
            "n_steps",
            "n_hops",
            "cost_usd",
            "error",
            "hops_given",
            "prefix_episode",
        )
        return {k: row.get(k) for k in keys}


def sample_id(row: Row) -> str:
    """The task id; a hop-conditioned episode's also names the hop it started at (``normal/1@hop2``,
    1-based like ``--at-hop``), since a run holds one episode per task and start hop."""
    return row["task_id"] if row.get("hops_given") is None else f"{row['task_id']}@hop{row['hops_given'] + 1}"


def _targets(task: Row) -> list[str]:
    answers = _json(task.get("reference_answers_json")) or {}
    values: list[str] = []
    for value in answers.values() if isinstance(answers, dict) else []:
        values.extend(str(v) for v in (value if isinstance(value, list) else [value]))
    return values


def _usage(prompt: int | None, completion: int | None, cost: float | None) -> dict[str, Any]:
    return {
        "input_tokens": prompt or 0,
        "output_tokens": completion or 0,
        "total_tokens": (prompt or 0) + (completion or 0),
        "total_cost": cost or 0.0,
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _summary(sample: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "id",
        "epoch",
        "input",
        "target",
        "scores",
        "model_usage",
        "started_at",
        "completed_at",
        "total_time",
        "working_time",
        "uuid",
    )
    summary = {k: sample[k] for k in keys}
    summary["scores"] = {
        name: {k: v for k, v in score.items() if k != "metadata"} for name, score in sample["scores"].items()
    }
    summary["metadata"] = {
        k: v for k, v in sample["metadata"].items() if isinstance(v, (str, int, float, bool))
    }
    summary["error"] = sample.get("error", {}).get("message")
    return {**summary, "completed": True, "retries": 0, "message_count": len(sample["messages"])}


# ---------------------------------------------------------------- the log


def export_inspect(
    store: Store,
    run: str,
    output: Path,
    evaluator: str = DEFAULT_EVALUATOR,
    on_episode: OnEpisode | None = None,
) -> InspectExport:
    """Write run ``run`` (an id, a prefix or ``latest``) as an Inspect ``.eval`` log, one sample
    per episode, streaming; the file appears whole or not at all."""
    run_id = store.resolve_run(run)
    verdicts = read_verdicts(store, run_id, evaluator)
    if not verdicts:
        raise InterchangeError(
            f"run {run_id} has no verdicts of evaluator {evaluator!r} "
            f"(run `mmina rescore --run {run_id} --evaluator {evaluator}` first)"
        )
    run_row = store.read("runs", run_id=run_id).to_pylist()[0]
    tasks = {t["task_id"]: t for t in store.read("tasks", run_id=run_id).to_pylist()}
    report = InspectExport(str(output), run_id, evaluator)
    with written_whole(output) as partial, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        _write_log(store, archive, run_row, tasks, verdicts, report, on_episode)
    report.bytes = output.stat().st_size
    return report


def _write_log(
    store: Store,
    archive: zipfile.ZipFile,
    run_row: Row,
    tasks: dict[str, Row],
    verdicts: dict[str, dict[str, Any]],
    report: InspectExport,
    on_episode: OnEpisode | None,
) -> None:
    model = model_name(run_row)
    latest, summaries, chunk, reader = _Latest(), [], 0, BlobReader(store)
    started, completed = None, None
    for episode in stream_episodes(store, Selection(run=report.run_id)):
        verdict = episode_verdict(verdicts.get(episode.episode_id), episode.row)
        sample = _Sample(
            reader, episode, tasks.get(episode.row["task_id"], {}), model, verdict, report.evaluator
        ).build()
        archive.writestr(f"samples/{sample['id']}_epoch_{sample['epoch']}.json", _dumps(sample))
        summaries.append(_summary(sample))
        latest.add(episode.row, verdict)
        _count(report, episode.row, verdict)
        started = min(filter(None, (started, episode.row["started_at"])))
        completed = max(filter(None, (completed, episode.row["ended_at"])))
        if len(summaries) == SUMMARIES_PER_FILE:
            chunk += 1
            archive.writestr(f"_journal/summaries/{chunk}.json", _dumps(summaries))
            summaries = []
        if on_episode:
            on_episode(episode)
    if summaries:
        archive.writestr(f"_journal/summaries/{chunk + 1}.json", _dumps(summaries))
    report.task_success, report.hop_success = latest.rates()
    archive.writestr("header.json", _dumps(_header(store, run_row, report, model, started, completed)))


def _count(report: InspectExport, row: Row, verdict: dict[str, Any] | None) -> None:
    report.samples += 1
    report.scored += verdict is not None
    report.input_tokens += row["prompt_tokens"] or 0
    report.output_tokens += row["completion_tokens"] or 0
    report.cost_usd += row["cost_usd"] or 0.0


def model_name(run_row: Row) -> str:
    """Inspect's ``provider/model``: the agent and its model (``openai/gpt-4o``), or
    ``mmina/<agent>`` for an agent without one (the oracle, a replay)."""
    agent = str(run_row.get("agent") or "agent").replace("/", "-")
    return f"{agent}/{run_row['model']}" if run_row.get("model") else f"mmina/{agent}"


def _header(
    store: Store,
    run_row: Row,
    report: InspectExport,
    model: str,
    started: datetime | None,
    completed: datetime | None,
) -> dict[str, Any]:
    metrics = {
        name: {"name": name, "value": value, "params": {}}
        for name, value in (("task_success", report.task_success), ("hop_success", report.hop_success))
        if value is not None
    }
    usage = _usage(report.input_tokens, report.output_tokens, report.cost_usd)
    suite = run_row.get("task_suite") or "tasks"
    return {
        "version": LOG_VERSION,
        "status": "success",
        "eval": {
            "eval_id": str(uuid.uuid5(EXPORT_NAMESPACE, report.run_id)),
            "run_id": report.run_id,
            "created": _iso(run_row["created_at"]),
            "task": f"mmina/{suite}",
            "task_id": report.run_id,
            "task_version": 0,
            "task_attribs": {},
            "task_args": {},
            "dataset": {
                "name": suite,
                "location": run_row.get("task_suite_path"),
                "samples": report.samples,
                "shuffled": False,
            },
            "model": model,
            "model_generate_config": {},
            "model_args": {},
            "config": {},
            "packages": {"mmina": run_row.get("mmina_version") or ""},
            "metadata": {
                "mmina": {
                    **provenance(store),
                    "run": report.run_id,
                    "agent": run_row.get("agent"),
                    "recorded_by": run_row.get("mmina_version"),
                    "browser": run_row.get("browser_version"),
                }
            },
            "scorers": [{"name": report.evaluator, "options": {}, "metrics": [], "metadata": {}}],
        },
        "plan": {
            "name": "plan",
            "steps": [{"solver": f"mmina/{run_row.get('agent')}", "params": {}}],
            "config": {},
        },
        "results": {
            "total_samples": report.samples,
            "completed_samples": report.samples,
            "scores": [
                {
                    "name": report.evaluator,
                    "scorer": report.evaluator,
                    "params": {},
                    "scored_samples": report.scored,
                    "unscored_samples": report.samples - report.scored,
                    "metrics": metrics,
                }
            ],
        },
        "stats": {
            "started_at": _iso(started) or "",
            "completed_at": _iso(completed) or "",
            "model_usage": {model: usage},
        },
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value, default=str, ensure_ascii=False).encode("utf-8", "surrogatepass")
