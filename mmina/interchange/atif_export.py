"""``mmina export atif``: episodes as trajectories of Harbor's Agent Trajectory Interchange Format
(ATIF, RFC 0001; version :data:`ATIF_VERSION`), which Harbor's viewer, Docent and other
trajectory tools read.

One ``<episode id>.json`` per episode in the output folder, and each screenshot once under
``images/<sha256>.jpg`` (ATIF's multimodal content names images by path, relative to the
trajectory file). What maps to what (docs/interchange.md says what is lost):

* the trajectory: ``session_id`` the run, ``trajectory_id`` the episode; ``agent`` the run's
  agent, the mmina version that recorded it, its model, and the 12 actions as
  ``tool_definitions``;
* step 1 (``system``): the system prompt of the first model call, when the agent called a model;
* the next (``user``): the task's intent, with the first observation (URL, title, tabs, the
  accessibility tree, the screenshot);
* then one ``agent`` step per mmina step: its ``message`` the raw model output, its tool call the
  parsed action (none when it did not parse), its ``observation`` the page the action led to
  (the next step's observation, or the episode's final one; an action error first), ``metrics``
  the step's tokens and cost (agents that call a model; ``llm_call_count`` 0 for the others),
  ``extra`` mmina's step fields (index, URL, action, its error, live hop tracking, timings);
* ``final_metrics``: tokens, cost and steps; ``extra``: the task, the episode (status, stop
  reason, answer, hops), every evaluator's current verdict with its hop verdicts, the
  provenance and the redaction note.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mmina.actions.grammar import Action, ActionKind, parse_action
from mmina.errors import ActionParseError
from mmina.interchange.inspect_export import episode_verdict, read_verdicts
from mmina.interchange.stored import (
    REDACTION_NOTE,
    BlobReader,
    InterchangeError,
    Row,
    Selection,
    StoredEpisode,
    folder_bytes,
    provenance,
    selected_runs,
    stream_episodes,
    written_folder,
)
from mmina.models.model_input import load_request
from mmina.store import Store

ATIF_VERSION = "ATIF-v1.7"
"""The newest version whose fields the export uses (multimodal content: v1.6; ``trajectory_id``,
``llm_call_count`` and per-result ``extra``: v1.7)."""
OnEpisode = Callable[[StoredEpisode], None]


def _tool(name: str, doc: str, **arguments: tuple[str, str]) -> dict[str, Any]:
    properties = {arg: {"type": kind, "description": text} for arg, (kind, text) in arguments.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": doc,
            "parameters": {"type": "object", "properties": properties, "required": list(arguments)},
        },
    }


ELEMENT = ("string", "the element's id, as [id] in the observation")
TOOLS = [
    _tool("click", "Click an element.", id=ELEMENT),
    _tool(
        "type",
        "Type text into an element.",
        id=ELEMENT,
        text=("string", "the text"),
        press_enter_after=("integer", "1 to press Enter after typing, else 0"),
    ),
    _tool("hover", "Hover over an element.", id=ELEMENT),
    _tool("press", "Press a key combination.", key_comb=("string", "e.g. Control+a")),
    _tool("scroll", "Scroll the page.", direction=("string", "up or down")),
    _tool("new_tab", "Open a new tab."),
    _tool("tab_focus", "Switch to a tab.", index=("integer", "the tab's 0-based index")),
    _tool("close_tab", "Close the current tab."),
    _tool("goto", "Go to a URL.", url=("string", "the URL")),
    _tool("go_back", "Go back in the tab's history."),
    _tool("go_forward", "Go forward in the tab's history."),
    _tool("stop", "Stop and answer.", answer=("string", "the final answer (empty when there is none)")),
]
"""MMInA's 12 actions as OpenAI function definitions (ATIF's ``agent.tool_definitions``)."""


def tool_arguments(action: Action) -> dict[str, Any]:
    """A parsed action's arguments by the names of :data:`TOOLS`."""
    kind = action.kind
    if kind in (ActionKind.CLICK, ActionKind.HOVER):
        return {"id": action.element_id}
    if kind is ActionKind.TYPE:
        return {"id": action.element_id, "text": action.text, "press_enter_after": int(action.press_enter)}
    named = {
        ActionKind.PRESS: ("key_comb", action.key),
        ActionKind.SCROLL: ("direction", action.direction),
        ActionKind.TAB_FOCUS: ("index", action.tab_index),
        ActionKind.GOTO: ("url", action.url),
        ActionKind.STOP: ("answer", action.text),
    }
    return dict([named[kind]]) if kind in named else {}


@dataclass
class AtifExport:
    """What an export wrote."""

    path: str
    schema_version: str = ATIF_VERSION
    trajectories: int = 0
    steps: int = 0
    images: int = 0
    evaluators: list[str] = field(default_factory=list)
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Run:
    """What every trajectory of a run shares: its row, tasks and verdicts by evaluator."""

    row: Row
    tasks: dict[str, Row]
    verdicts: dict[str, dict[str, dict[str, Any]]]
    about: dict[str, Any]
    """The export's provenance (versions; not the store's path)."""


def _read_run(store: Store, run_id: str) -> _Run:
    row = store.read("runs", run_id=run_id).to_pylist()[0]
    tasks = {t["task_id"]: t for t in store.read("tasks", run_id=run_id).to_pylist()}
    evaluators = sorted(
        set(store.read("scores", run_id=run_id, columns=["evaluator"]).column("evaluator").to_pylist())
    )
    about = {k: v for k, v in provenance(store).items() if k != "store"}
    return _Run(
        {**row, "run_id": run_id},
        tasks,
        {name: read_verdicts(store, run_id, name) for name in evaluators},
        about,
    )


# ---------------------------------------------------------------- one trajectory


def observation_text(row: Row, prefix: str = "") -> str:
    """What the agent was shown of a page, as text: URL, title, tabs, the accessibility tree."""
    tabs = " | ".join(
        f"{i}: {t.get('title') or ''} ({t.get('url') or ''})" for i, t in enumerate(row.get("tabs") or ())
    )
    lines = [
        f"URL: {row.get('url') or ''}",
        f"Title: {row.get('title') or ''}",
        *([f"Tabs: {tabs}"] if tabs else []),
        row.get("tree_text") or "",
    ]
    return prefix + "\n".join(lines)


def _final_observation(episode: Row) -> Row | None:
    """The episode's terminal observation in a step's shape; None when unknown."""
    if episode.get("final_url") is None:
        return None
    return {
        "url": episode["final_url"],
        "title": episode.get("final_title"),
        "tabs": episode.get("final_tabs"),
        "tree_text": episode.get("final_tree_text"),
        "screenshot": episode.get("final_screenshot"),
    }


class _Trajectory:
    """Builds one episode's trajectory (images written by ``image``)."""

    def __init__(
        self, episode: StoredEpisode, run: _Run, reader: BlobReader, image: Callable[[str], str | None]
    ):
        self.episode, self.run, self.reader, self.image = episode, run, reader, image
        self.task = run.tasks.get(episode.row["task_id"], {})

    def content(self, text: str, observed: Row | None) -> str | list[dict[str, Any]]:
        """Text, with the observation's screenshot as an image part when there is one."""
        path = self.image(observed["screenshot"]) if observed and observed.get("screenshot") else None
        if path is None:
            return text
        return [
            {"type": "text", "text": text},
            {"type": "image", "source": {"media_type": "image/jpeg", "path": path}},
        ]

    def blob(self, digest: str) -> bytes:
        found = self.reader.read(self.episode, [digest])
        if digest not in found:
            raise InterchangeError(
                f"episode {self.episode.episode_id}: blob {digest[:12]} is missing from the store"
            )
        return found[digest]

    def system_prompt(self) -> str | None:
        first = next((s.get("model_input") for s in self.episode.steps if s.get("model_input")), None)
        if first is None:
            return None
        request = load_request(first, self.blob)
        system = next((m for m in request["messages"] if m.get("role") == "system"), None)
        return _text(system.get("content")) if system else None

    def user_step(self) -> dict[str, Any]:
        intent = self.task.get("intent") or ""
        first = self.episode.steps[0] if self.episode.steps else None
        if first is None:
            return {"source": "user", "message": intent}
        text = observation_text(first, f"{intent}\n\nObservation of step 0:\n")
        return {
            "source": "user",
            "timestamp": _iso(first["started_at"]),
            "message": self.content(text, first),
        }

    def agent_step(self, step: Row, observed: Row | None) -> dict[str, Any]:
        call_id = f"step-{step['step_index']}"
        action = _parsed(step.get("action"))
        called = step.get("model_input") is not None
        error = f"Action error: {step['action_error']}\n\n" if step.get("action_error") else ""
        result: dict[str, Any] = {"source_call_id": call_id if action else None}
        if observed is not None:
            result["content"] = self.content(observation_text(observed, error), observed)
        elif error:
            result["content"] = error.strip()
        built: dict[str, Any] = {
            "source": "agent",
            "timestamp": _iso(step.get("acted_at") or step["started_at"]),
            "message": step.get("model_output") or "",
            "observation": {"results": [result]},
            "llm_call_count": 1 if called else 0,
            "extra": _step_extra(step),
        }
        if action:
            built["tool_calls"] = [
                {
                    "tool_call_id": call_id,
                    "function_name": action.kind.value,
                    "arguments": tool_arguments(action),
                }
            ]
        if called:
            built["metrics"] = {
                "prompt_tokens": step.get("prompt_tokens") or 0,
                "completion_tokens": step.get("completion_tokens") or 0,
                "cost_usd": step.get("cost_usd") or 0.0,
            }
        return built

    def build(self) -> dict[str, Any]:
        row, steps = self.episode.row, self.episode.steps
        system = self.system_prompt()
        built = ([{"source": "system", "message": system}] if system else []) + [self.user_step()]
        observed = [*steps[1:], _final_observation(row)]
        built += [self.agent_step(step, after) for step, after in zip(steps, observed)]
        for number, step in enumerate(built, start=1):
            step["step_id"] = number
        return {
            "schema_version": ATIF_VERSION,
            "session_id": row["run_id"],
            "trajectory_id": row["episode_id"],
            "agent": self.agent(),
            "steps": built,
            "notes": self.notes(len(built) - len(steps)),
            "final_metrics": {
                "total_prompt_tokens": row.get("prompt_tokens") or 0,
                "total_completion_tokens": row.get("completion_tokens") or 0,
                "total_cost_usd": row.get("cost_usd") or 0.0,
                "total_steps": len(built),
                "extra": {"mmina_steps": len(steps), "duration_ms": row.get("duration_ms")},
            },
            "extra": self.extra(),
        }

    def agent(self) -> dict[str, Any]:
        run = self.run.row
        return {
            "name": str(run.get("agent") or "agent"),
            "version": str(run.get("mmina_version") or "unknown"),
            **({"model_name": run["model"]} if run.get("model") else {}),
            "tool_definitions": TOOLS,
            "extra": {
                "recorder": "mmina",
                "browser": run.get("browser_version"),
                "viewport": [run.get("viewport_width"), run.get("viewport_height")],
                "config": _json(run.get("config_json")),
            },
        }

    def notes(self, leading: int) -> str:
        return (
            f"Converted by mmina from run {self.run.row['run_id']}: the first {leading} step(s) give the task "
            f"(and the system prompt); each later step is one mmina step: its message the raw model output, its "
            f"tool call the parsed action, its observation the page the action led to. total_steps counts "
            f"these steps; final_metrics.extra.mmina_steps the agent's."
        )

    def extra(self) -> dict[str, Any]:
        row, task = self.episode.row, self.task
        episode_keys = (
            "episode_id",
            "task_id",
            "attempt",
            "status",
            "stop_reason",
            "final_answer",
            "n_steps",
            "n_hops",
            "live_hops",
            "hop_steps",
            "error",
            "error_kind",
            "supersedes",
            "hops_given",
            "prefix_episode",
        )
        verdicts = {
            name: episode_verdict(by_episode.get(row["episode_id"]), row)
            for name, by_episode in self.run.verdicts.items()
        }
        return {
            "task": {
                "task_id": task.get("task_id"),
                "intent": task.get("intent"),
                "start_urls": task.get("start_urls"),
                "n_hops": task.get("n_hops"),
                "procedure": task.get("procedure"),
                "eval_types": task.get("eval_types"),
                "reference_answers": _json(task.get("reference_answers_json")),
            },
            "episode": {k: row.get(k) for k in episode_keys},
            "verdicts": {name: v for name, v in verdicts.items() if v is not None},
            "mmina": self.run.about,
            "redaction": REDACTION_NOTE,
        }


def _step_extra(step: Row) -> dict[str, Any]:
    keys = (
        "step_index",
        "url",
        "title",
        "action",
        "action_kind",
        "action_error",
        "live_hops",
        "live_hop_completed",
        "target_box",
        "screenshot",
        "screenshot_som",
        "model_input",
        "observe_ms",
        "agent_ms",
        "action_ms",
    )
    return {f"mmina_{k}" if k == "step_index" else k: step.get(k) for k in keys}


def _parsed(action: str | None) -> Action | None:
    if not action:
        return None
    try:
        return parse_action(action)
    except ActionParseError:
        return None


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return str(content or "")


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


# ---------------------------------------------------------------- the folder


def export_atif(
    store: Store, selection: Selection, output: Path, images: bool = True, on_episode: OnEpisode | None = None
) -> AtifExport:
    """Write the selected episodes as ATIF trajectories into the folder ``output`` (new or
    empty), one file per episode and each screenshot once; the folder appears whole or not at all."""
    selected_runs(store, selection)
    report = AtifExport(str(output))
    with written_folder(output) as partial:
        _write(store, selection, partial, images, report, on_episode)
    report.bytes = folder_bytes(output)
    return report


def _write(
    store: Store,
    selection: Selection,
    folder: Path,
    images: bool,
    report: AtifExport,
    on_episode: OnEpisode | None,
) -> None:
    runs: dict[str, _Run] = {}
    reader, written = BlobReader(store), set[str]()
    for episode in stream_episodes(store, selection, request_columns=["seq"]):
        if episode.run_id not in runs:
            runs[episode.run_id] = _read_run(store, episode.run_id)
        run = runs[episode.run_id]
        shots = reader.read(
            episode, [s.get("screenshot") for s in episode.steps] + [episode.row.get("final_screenshot")]
        )

        def image(digest: str) -> str | None:
            if not images or digest not in shots:  # noqa: B023 (used within the iteration)
                return None
            if digest not in written:
                (folder / "images").mkdir(exist_ok=True)
                (folder / "images" / f"{digest}.jpg").write_bytes(shots[digest])  # noqa: B023 (used within the iteration)
                written.add(digest)
            return f"images/{digest}.jpg"

        trajectory = _Trajectory(episode, run, reader, image).build()
        (folder / f"{episode.episode_id}.json").write_text(
            json.dumps(trajectory, ensure_ascii=False, default=str, indent=1)
        )
        report.trajectories += 1
        report.steps += len(trajectory["steps"])
        report.evaluators = sorted({*report.evaluators, *run.verdicts})
        if on_episode:
            on_episode(episode)
    report.images = len(written)
    if not report.trajectories:
        raise InterchangeError("the selection holds no finished episode")
