"""Runs of the official MMInA / WebArena harness (``run.py``) as episodes, steps and scores.

What the harness leaves behind, and what is read of it:

* ``<result_dir>/render_<task_id>.html`` — written by WebArena's
  ``browser_env.helper_functions.RenderHelper``, which MMInA's ``run.py`` uses too. The file
  starts with the task config dumped as ``key: value`` lines in a ``<pre>``; then one block per
  step, opened by ``<h2>New Page</h2>``: ``<h3 class='url'><a href=URL>URL: URL</a></h3>``, the
  observation in ``<div class='state_obv'><pre>…</pre><div>``, the screenshot as
  ``<img src='data:image/png;base64,…'>`` (when screenshots were rendered), the previous action,
  and the prediction: ``raw_parsed_prediction`` (the model's raw output), ``action_object``
  (the action dict's ``repr``) and ``parsed_action`` (``action2str``: ``click [12] where [12]
  is link 'Foo'``). Nothing in it is HTML-escaped — an observation or a ``repr`` holds ``<``
  freely — so the blocks are cut by the template's fixed markers, not by an HTML parser, and
  their text is unescaped as a browser would show it.
* ``[Result] (PASS) <config_file>`` / ``[Result] (FAIL) <config_file>`` lines in the run's logs
  (``log_files/log_*.log``, listed in ``<result_dir>/log_files.txt``; or ``merged_log.txt``).
  MMInA's ``run.py`` also logs ``[Config file]: <path>`` before each task, ``[Result] success
  rate: <hops done>/<hops>`` (its hop queue) before the verdict, and ``[Unhandled Error] …``
  when a task crashed. Log lines may carry the ``%(asctime)s - LEVEL - `` prefix.
* ``<result_dir>/config.json`` — the harness's arguments (``model``, ``domain``, viewport).
* The task configs the log names (``WebQA/normal/3.json``), looked up relative to the result
  folder and its parents, then the working directory; without them, the render's config dump.

Each render file becomes one episode of task ``<suite>/<id>`` (the suite from the config path's
folder or ``config.json``'s ``domain`` when it is an MMInA suite; else the harness's task id),
its steps in order with URL, observation, screenshot, raw output and the action in mmina's
grammar. Its log verdict becomes the ``scores`` rows of evaluator ``harness``: a task row
(``unclear`` when no log line gives a verdict), plus one row per hop when the logged hop count
equals the task's. Files are checked before anything is written; a file that cannot be read is
listed and skipped; importing again into the same run skips the episodes already there.
"""

from __future__ import annotations

import ast
import base64
import binascii
import hashlib
import html
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mmina.actions.grammar import Action, ActionKind, parse_action, parse_agent_output
from mmina.errors import ActionParseError, MminaError
from mmina.evaluators.base import EpisodeView, Score
from mmina.evaluators.batch import ScoreBatch, score_rows
from mmina.importers.mind2web import image_info
from mmina.redaction.redact import redact_episode
from mmina.store import Store
from mmina.store.layout import check_id
from mmina.store.runs import SuiteRef, run_row
from mmina.store.store import utcnow
from mmina.tasks.task import SUITE_FOLDERS, HopTracker, Task, suite_sha256, task_from_dict
from mmina.tasks.task import task_row as stored_task_row

EVALUATOR = "harness"
VERSION = "1"
AGENT = "harness"
RENDER_PATTERN = re.compile(r"^render_(.+)\.html$")
Progress = Callable[[str, int, int], None]


class HarnessError(MminaError):
    """The folder holds no harness results, or a file of it cannot be read."""


# ---------------------------------------------------------------- the render file


@dataclass(frozen=True)
class Screenshot:
    media_type: str
    width: int | None
    height: int | None
    data: bytes = field(repr=False, default=b"")


@dataclass(frozen=True)
class HarnessStep:
    url: str
    observation: str
    screenshot: Screenshot | None
    raw_prediction: str
    parsed_action: str | None


@dataclass(frozen=True)
class Render:
    config: dict[str, Any]
    steps: tuple[HarnessStep, ...]


BODY = re.compile(r"<body>(.*)</body>", re.S)
CONFIG_DUMP = re.compile(r"^\s*<pre>(.*?)</pre>", re.S)
NEW_PAGE = "<h2>New Page</h2>"
URL = re.compile(r"<h3 class='url'><a href=[^>]*>URL: (.*?)</a></h3>", re.S)
OBSERVATION = re.compile(
    r"<div class='state_obv'><pre>(.*)</pre><div>\s*(?=<img |<div class='prev_action')", re.S
)
IMAGE = re.compile(r"<img src='data:(image/[A-Za-z0-9.+-]+);base64,([^']*)'")
RAW = re.compile(
    r"<div class='raw_parsed_prediction'[^>]*><pre>(.*)</pre></div>(?=<div class='action_object')", re.S
)
PARSED = re.compile(r"<div class='parsed_action'[^>]*><pre>(.*)</pre></div>", re.S)
CONFIG_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*): ?(.*)$")


def parse_render(text: str, with_images: bool = True) -> Render:
    """One ``render_<id>.html``; raises :class:`HarnessError` saying what is wrong with it."""
    body = BODY.search(text)
    if body is None:
        raise HarnessError("no <body>…</body> (not a harness render file, or cut off while written)")
    head, *blocks = body.group(1).split(NEW_PAGE)
    dump = CONFIG_DUMP.search(head)
    if dump is None:
        raise HarnessError("no task config dump (<pre>key: value</pre>) before the first step")
    config = parse_config_dump(html.unescape(dump.group(1)))
    if not blocks:
        raise HarnessError("no steps (no <h2>New Page</h2> block)")
    steps = tuple(_step(block, number, with_images) for number, block in enumerate(blocks, start=1))
    return Render(config, steps)


def parse_config_dump(text: str) -> dict[str, Any]:
    """The ``key: value`` lines RenderHelper writes (``str`` of each value; lists and dicts as
    Python literals); a line that does not start a key continues the previous value."""
    lines: list[list[str]] = []
    for line in text.splitlines():
        found = CONFIG_LINE.match(line)
        if found:
            lines.append([found.group(1), found.group(2)])
        elif lines:
            lines[-1][1] += "\n" + line
    return {key: _literal(value) for key, value in lines}


def _literal(value: str) -> Any:
    if (
        value[:1] in ("[", "{", "(")
        or value in ("True", "False", "None")
        or re.fullmatch(r"-?\d+(\.\d+)?", value)
    ):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return value


def _step(block: str, number: int, with_images: bool) -> HarnessStep:
    url, observation = URL.search(block), OBSERVATION.search(block)
    if url is None or observation is None:
        raise HarnessError(f"step {number}: no {'URL' if url is None else 'observation'}")
    raw, parsed = RAW.search(block), PARSED.search(block)
    if raw is None and parsed is None:
        raise HarnessError(f"step {number}: no prediction (cut off while written?)")
    image = IMAGE.search(block)
    return HarnessStep(
        html.unescape(url.group(1)).strip(),
        html.unescape(observation.group(1)),
        _screenshot(image.group(1), image.group(2), number, with_images) if image else None,
        html.unescape(raw.group(1)) if raw else "",
        html.unescape(parsed.group(1)) if parsed else None,
    )


def _screenshot(declared: str, encoded: str, number: int, keep: bool) -> Screenshot:
    """A decoded, readable image (its real media type, not the declared one)."""
    try:
        data = base64.b64decode(encoded, validate=True)
        media_type, width, height = image_info(data)
    except (binascii.Error, ValueError, MminaError):
        raise HarnessError(f"step {number}: the {declared} screenshot does not decode to an image") from None
    return Screenshot(media_type, width, height, data if keep else b"")


# ---------------------------------------------------------------- actions

TARGETED = re.compile(r"(click|hover|type) \[([^\]]+)\](.*?)(?: where \[\2\] is .*)?$", re.S)
EARLY_STOPS = (
    ("Early stop: Reach max steps", "max_steps"),
    ("Early stop: Same action", "repeated_action"),
    ("Early stop: Same typing action", "repeated_action"),
    ("Early stop: Failed to parse actions", "unparsable_output"),
)


def convert_action(parsed: str) -> Action:
    """The harness's ``action2str`` text in mmina's grammar.

    ``click [12] where [12] is link 'Foo'`` → ``click [12]``; ``type [5] [text\\n] where …`` →
    ``type [5] [text] [press_enter_after=1]`` (the harness appends a newline to text typed
    with Enter); ``page_focus [1]`` → ``tab_focus [1]``; ``none`` (no action parsed) raises.
    """
    text = parsed.strip()
    targeted = TARGETED.match(text)
    if targeted:
        kind, element, rest = targeted.groups()
        if kind != "type":
            return Action(ActionKind(kind), element_id=element)
        typed = re.fullmatch(r"\s*\[(.*)\]\s*", rest, re.S)
        if typed is None:
            raise ActionParseError(f"malformed type action {text!r}")
        return Action(
            ActionKind.TYPE,
            element_id=element,
            text=typed.group(1).removesuffix("\n"),
            press_enter=typed.group(1).endswith("\n"),
        )
    if text == "none":
        raise ActionParseError("the harness parsed no action from the model output (none)")
    return parse_action(re.sub(r"^page_focus\b", "tab_focus", text))


def step_action(step: HarnessStep) -> tuple[Action | None, str | None]:
    """The step's action and, when there is none, why (the raw output is tried without a parsed action)."""
    try:
        if step.parsed_action is not None:
            return convert_action(step.parsed_action), None
        return parse_agent_output(step.raw_prediction), None
    except ActionParseError as exc:
        return None, str(exc)


def ending(last: Action | None, crash: str | None) -> dict[str, Any]:
    """Status, stop reason, final answer and error of an episode from its last action."""
    if last is not None and last.kind is ActionKind.STOP:
        answer = last.text or ""
        if answer.startswith("ERROR: "):
            return {"status": "error", "stop_reason": "error", "final_answer": None, "error": answer[7:]}
        reason = next((r for prefix, r in EARLY_STOPS if answer.startswith(prefix)), None)
        return {
            "status": "completed",
            "stop_reason": reason or "stop",
            "final_answer": None if reason else answer,
            "error": None,
        }
    return {
        "status": "error",
        "stop_reason": "error",
        "final_answer": None,
        "error": crash or "the render file ends without a stop action (the harness stopped mid-episode)",
    }


# ---------------------------------------------------------------- the logs

LOG_PREFIX = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) - [A-Z]+ - (.*)$")
RESULT = re.compile(r"\[Result\] \((PASS|FAIL)\) (\S.*?)\s*$")
HOPS = re.compile(r"\[Result\] success rate: (\d+)/(\d+)\s*$")
CONFIG_FILE = re.compile(r"\[Config file\]: (\S.*?)\s*$")
CRASH = re.compile(r"\[(?:Unhandled|OpenAI) Error\] (.*?)\]?\s*$")


@dataclass(frozen=True)
class Outcome:
    """What the logs say of one task config file (the latest run of it)."""

    config_file: str
    log: str
    passed: bool | None = None
    hops: tuple[int, int] | None = None
    error: str | None = None
    started: datetime | None = None
    ended: datetime | None = None


def parse_log(
    lines: Iterable[str], log: str, outcomes: dict[str, Outcome] | None = None
) -> dict[str, Outcome]:
    """Outcomes by config file path; a task run again later in the logs replaces the earlier run."""
    outcomes = {} if outcomes is None else outcomes
    current: str | None = None
    for line in lines:
        when, message = _log_line(line)
        started = CONFIG_FILE.search(message)
        if started:
            current = started.group(1)
            outcomes[current] = Outcome(current, log, started=when)
            continue
        current = _apply(outcomes, current, when, message, log)
    return outcomes


def _log_line(line: str) -> tuple[datetime | None, str]:
    """The time (the harness logs local time without a zone; read as UTC) and the message."""
    found = LOG_PREFIX.match(line.rstrip("\n"))
    if found is None:
        return None, line.strip()
    when = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(
        microsecond=int(found.group(2)) * 1000, tzinfo=UTC
    )
    return when, found.group(3)


def _apply(
    outcomes: dict[str, Outcome], current: str | None, when: datetime | None, message: str, log: str
) -> str | None:
    """Fold one message into the outcome of the task it is about; returns the current task."""
    result, hops, crash = RESULT.search(message), HOPS.search(message), CRASH.search(message)
    if result:
        name = result.group(2)
        before = outcomes.get(name) or Outcome(name, log)
        outcomes[name] = replace(before, passed=result.group(1) == "PASS", ended=when, log=log)
        return None
    if current is not None and hops:
        outcomes[current] = replace(outcomes[current], hops=(int(hops.group(1)), int(hops.group(2))))
    elif current is not None and crash:
        outcomes[current] = replace(outcomes[current], error=crash.group(1), ended=when)
    return current


# ---------------------------------------------------------------- finding the files


def render_files(path: Path) -> list[Path]:
    """The render files of a result folder (or one render file)."""
    if not path.exists():
        raise HarnessError(f"{path} does not exist")
    files = [path] if path.is_file() else sorted(path.rglob("render_*.html"), key=_natural)
    files = [f for f in files if RENDER_PATTERN.match(f.name)]
    if not files:
        raise HarnessError(f"no harness render files (render_<task_id>.html) under {path}")
    return files


def _natural(path: Path) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", str(path)) if p)


def _places(folder: Path) -> list[Path]:
    """Where relative paths written by the harness are resolved: the folder, its parents, the cwd."""
    return [folder, *folder.resolve().parents, Path.cwd()]


def resolve(name: str, folder: Path) -> Path | None:
    """A file the harness named (relative to its working directory), if it can be found."""
    candidate = Path(name)
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    return next((p / candidate for p in _places(folder) if (p / candidate).is_file()), None)


def log_files(folder: Path, extra: Sequence[str | Path] = ()) -> list[Path]:
    """``*.log`` and ``merged_log.txt`` under the folder and the logs ``log_files.txt`` lists, in
    name order (the harness names them by start time, so later runs come later), then ``extra``."""
    missing = [str(name) for name in extra if not Path(name).is_file()]
    if missing:
        raise HarnessError(f"log file {missing[0]} does not exist")
    found = [*folder.rglob("*.log"), *folder.rglob("merged_log.txt")]
    for listing in folder.rglob("log_files.txt"):
        names = [
            n.strip() for n in listing.read_text(encoding="utf-8", errors="replace").splitlines() if n.strip()
        ]
        found += [p for p in (resolve(n, listing.parent) for n in names) if p is not None]
    ordered = sorted(found, key=lambda p: (p.name, str(p))) + [Path(name) for name in extra]
    return list(dict.fromkeys(p.resolve() for p in ordered))


def read_outcomes(logs: Sequence[Path]) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    for log in logs:
        with open(log, encoding="utf-8", errors="replace") as handle:
            parse_log(handle, str(log), outcomes)
    return outcomes


def harness_settings(folder: Path) -> dict[str, Any]:
    """The harness's arguments (``config.json`` in the result folder), or nothing."""
    path = folder / "config.json"
    try:
        settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return settings if isinstance(settings, dict) else {}


# ---------------------------------------------------------------- planning the import


@dataclass(frozen=True)
class Planned:
    """A checked render file: its task, episode id, log outcome and step rows (without screenshots)."""

    path: Path
    task: Task
    episode_id: str
    outcome: Outcome | None
    steps: tuple[HarnessStep, ...]


@dataclass(kw_only=True)
class ImportResult:
    run_id: str
    store: str
    path: str
    logs: list[str]
    files: int = 0
    tasks: int = 0
    imported: int = 0
    already: int = 0
    passed: int = 0
    failed: int = 0
    without_result: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def task_sr(self) -> float | None:
        scored = self.passed + self.failed
        return self.passed / scored if scored else None

    def as_json(self) -> dict[str, Any]:
        """The import for scripts (``--format json``)."""
        return {
            **asdict(self),
            "task_sr": self.task_sr,
            "skipped": [{"file": f, "reason": r} for f, r in self.skipped],
        }


def _outcome_for(outcomes: dict[str, Outcome], harness_id: str, suite: str) -> Outcome | None:
    """The log outcome of a render's task: config files named ``<id>.json``, the run's suite first."""
    named = [o for name, o in outcomes.items() if Path(name).stem == harness_id]
    return next(
        (o for o in reversed(named) if Path(o.config_file).parent.name == suite), named[-1] if named else None
    )


def _task(harness_id: str, render: Render, outcome: Outcome | None, folder: Path, domain: str) -> Task:
    """The task config the log names when it can be found, else the render's dump."""
    suite = Path(outcome.config_file).parent.name if outcome else ""
    suite = suite if suite in SUITE_FOLDERS else domain if domain in SUITE_FOLDERS else ""
    task_id = f"{suite}/{harness_id}" if suite else harness_id
    found = resolve(outcome.config_file, folder) if outcome else None
    data = found.read_bytes() if found else json.dumps(render.config, sort_keys=True, default=str).encode()
    raw = json.loads(data)
    if not isinstance(raw, dict):
        raise HarnessError(f"task config {found} is not a JSON object")
    return task_from_dict({"intent": "", **raw}, task_id, hashlib.sha256(data).hexdigest())


def episode_id(run_id: str, task_id: str) -> str:
    """Deterministic per run and task, so importing again finds what is there."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", task_id).strip("-.")[:100] or "task"
    return f"{slug}-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"


def plan(
    folder: Path,
    files: Sequence[Path],
    outcomes: dict[str, Outcome],
    run_id: str,
    progress: Progress | None = None,
) -> tuple[list[Planned], list[tuple[str, str]]]:
    """Check every render file; the readable ones planned, the others listed with the reason."""
    domain = str(harness_settings(folder).get("domain") or "")
    planned: dict[str, Planned] = {}
    skipped: list[tuple[str, str]] = []
    for done, path in enumerate(files, start=1):
        try:
            render = parse_render(path.read_text(encoding="utf-8"), with_images=False)
            harness_id = str(render.config.get("task_id", RENDER_PATTERN.match(path.name).group(1)))  # type: ignore[union-attr]
            outcome = _outcome_for(outcomes, harness_id, domain)
            task = _task(harness_id, render, outcome, folder, domain)
        except (HarnessError, OSError, UnicodeDecodeError, ValueError) as exc:
            skipped.append((str(path), str(exc)))
            continue
        finally:
            if progress:
                progress("checking", done, len(files))
        if task.task_id in planned:
            skipped.append(
                (str(path), f"task {task.task_id} again (also in {planned[task.task_id].path.name})")
            )
            continue
        planned[task.task_id] = Planned(path, task, episode_id(run_id, task.task_id), outcome, render.steps)
    return list(planned.values()), skipped


# ---------------------------------------------------------------- rows


def task_row(task: Task) -> dict[str, Any]:
    """The ``tasks`` row; a task without a procedure (WebArena) counts as one hop."""
    return {**stored_task_row(task), "n_hops": max(task.n_hops, 1)}


def harness_run_row(folder: Path, tasks: Sequence[dict[str, Any]], logs: Sequence[Path]) -> dict[str, Any]:
    """The run: the harness's settings and a checksum of its tasks (re-importing them resumes it)."""
    settings = harness_settings(folder)
    config = {
        "mode": "import",
        "source": "harness",
        "path": str(folder),
        "logs": [str(p) for p in logs],
        "harness_config": settings,
    }
    suite = SuiteRef(
        str(settings.get("domain") or "harness"),
        str(folder),
        suite_sha256((t["task_id"], t["task_sha256"]) for t in tasks),
    )
    return run_row(
        AGENT,
        settings.get("model"),
        config,
        suite,
        len(tasks),
        viewport=(_int(settings.get("viewport_width")), _int(settings.get("viewport_height"))),
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def step_rows(item: Planned, digests: Sequence[str | None]) -> list[dict[str, Any]]:
    """The steps, with live hop tracking (the recorder's URL rule) over the step URLs."""
    tracker, rows = HopTracker(item.task), []
    for index, (step, digest) in enumerate(zip(item.steps, digests)):
        action, error = step_action(step)
        completed = tracker.observe(step.url, index)
        shot = step.screenshot
        rows.append(
            {
                "step_index": index,
                "url": step.url,
                "title": "",
                "tabs": [{"url": step.url, "title": ""}],
                "active_tab": 0,
                "tree_text": step.observation,
                "screenshot": digest,
                "screenshot_som": None,
                "screenshot_width": shot.width if shot else None,
                "screenshot_height": shot.height if shot else None,
                "images": [],
                "model_output": step.raw_prediction or step.parsed_action or "",
                "action": action.render() if action else None,
                "action_kind": action.kind.value if action else None,
                "action_error": error,
                "live_hops": tracker.current,
                "live_hop_completed": completed,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cost_usd": 0.0,
            }
        )
    return rows


def episode_row(item: Planned, steps: Sequence[dict[str, Any]], modified: datetime) -> dict[str, Any]:
    outcome = item.outcome or Outcome("", "")
    started, ended = outcome.started or modified, outcome.ended or outcome.started or modified
    last, _ = step_action(item.steps[-1])
    completed = [s["step_index"] for s in steps if s["live_hop_completed"]]
    return {
        "episode_id": item.episode_id,
        "task_id": item.task.task_id,
        "attempt": 1,
        "n_steps": len(steps),
        **ending(last, outcome.error),
        "n_hops": max(item.task.n_hops, 1),
        "live_hops": len(completed),
        "hop_steps": completed,
        "started_at": started,
        "ended_at": max(started, ended),
        "duration_ms": max((ended - started).total_seconds() * 1000, 0.0),
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
    }


def harness_scores(item: Planned) -> list[Score]:
    """The log's verdict as a task row, and hop rows when the logged hop count is the task's."""
    outcome = item.outcome
    passed = outcome.passed if outcome else None
    detail = (
        {
            "config_file": outcome.config_file,
            "log": outcome.log,
            "hops_logged": outcome.hops,
            "error": outcome.error,
        }
        if outcome
        else {"reason": "no [Result] line for this task in the logs"}
    )
    verdict = "unclear" if passed is None else "pass" if passed else "fail"
    scores = [Score(verdict, 1.0 if passed else 0.0, detail=detail)]
    n_hops = max(item.task.n_hops, 1)
    if outcome and outcome.hops and outcome.hops[1] == n_hops:
        scores += [
            Score(
                "pass" if k < outcome.hops[0] else "fail",
                1.0 if k < outcome.hops[0] else 0.0,
                "hop",
                hop_index=k,
                detail={"hops_logged": outcome.hops},
            )
            for k in range(n_hops)
        ]
    return scores


# ---------------------------------------------------------------- into the store


def import_harness(
    store: Store,
    path: str | Path,
    run_id: str | None = None,
    logs: Sequence[str | Path] = (),
    progress: Progress | None = None,
) -> ImportResult:
    """Check every render file, then write one run: the episodes in one batch, then their scores."""
    folder = Path(path)
    files = render_files(folder)
    folder = folder if folder.is_dir() else folder.parent
    run_id = check_id("run id", run_id) if run_id else f"{utcnow():%Y%m%d-%H%M%S}-harness"
    found_logs = log_files(folder, logs)
    planned, skipped = plan(folder, files, read_outcomes(found_logs), run_id, progress)
    if not planned:
        raise HarnessError(f"nothing importable in {path}: {skipped[0][0]}: {skipped[0][1]}")
    tasks = [task_row(p.task) for p in planned]
    result = ImportResult(
        run_id=run_id,
        store=str(store.root),
        path=str(folder),
        logs=[str(p) for p in found_logs],
        files=len(files),
        tasks=len(tasks),
        skipped=skipped,
    )
    store.begin_run(run_id, harness_run_row(folder, tasks, found_logs), tasks)
    existing = store.committed_episode_ids()
    new = [p for p in planned if p.episode_id not in existing]
    result.already = len(planned) - len(new)
    _write_episodes(store, run_id, new, progress)
    result.imported = len(new)
    scored = _scored(store, run_id)
    _write_scores(store, run_id, [p for p in planned if p.episode_id not in scored])
    _count_verdicts(planned, result)
    return result


def _count_verdicts(planned: Sequence[Planned], result: ImportResult) -> None:
    for item in planned:
        passed = item.outcome.passed if item.outcome else None
        result.passed += passed is True
        result.failed += passed is False
        if passed is None:
            result.without_result.append(item.task.task_id)


def _write_episodes(store: Store, run_id: str, planned: Sequence[Planned], progress: Progress | None) -> None:
    """All new episodes in one batch: screenshots are read again file by file (they are most of the bytes)."""
    if not planned:
        return
    batch = store.batch_writer(run_id)
    try:
        for done, item in enumerate(planned, start=1):
            render = parse_render(item.path.read_text(encoding="utf-8"))
            digests = [
                batch.put_blob(s.screenshot.data, s.screenshot.media_type) if s.screenshot else None
                for s in render.steps
            ]
            steps = step_rows(replace(item, steps=render.steps), digests)
            modified = datetime.fromtimestamp(item.path.stat().st_mtime, UTC)
            batch.add_episode(*redact_episode(episode_row(item, steps, modified), steps))
            if progress:
                progress("importing", done, len(planned))
    except BaseException:
        batch.abort()
        raise
    batch.commit()


def _scored(store: Store, run_id: str) -> set[str]:
    """Episodes of the run that already have ``harness`` verdicts."""
    rows = store.read("scores", run_id=run_id, columns=["episode_id", "evaluator"]).to_pylist()
    return {r["episode_id"] for r in rows if r["evaluator"] == EVALUATOR}


def _write_scores(store: Store, run_id: str, planned: Sequence[Planned]) -> None:
    """One ``scores`` batch, written with the rows rescore writes."""
    if not planned:
        return
    batch = ScoreBatch.new(EVALUATOR, VERSION, {"source": "harness logs"})
    rows = [
        row
        for item in planned
        for row in score_rows(
            EpisodeView(run_id, item.episode_id, item.task, {}, ()), harness_scores(item), batch
        )
    ]
    store.append("scores", rows, stem=batch.batch_id, run_id=run_id)
