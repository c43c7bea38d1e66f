"""MMInA tasks: loading the official JSON format, hops, and live hop tracking.

The official files count the END marker in ``cnt_hop`` and end ``procedure`` with
``"end"``; a task's hops are the procedure entries before the first such marker (all of them
when there is none), compared lower-case and stripped. A task without a ``procedure`` (the
official single-hop suites) has ``cnt_hop - 1`` hops when ``cnt_hop`` says so, else the
official runner's count for its suite (``normal`` 2, others 1); those hops have no keyword and
are judged by the final answer alone. Fields the official release leaves empty or ``null``
become empty strings; numbers given as text are read as numbers.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from mmina.errors import TaskError

END = "end"
START_URL_SEPARATOR = " |AND| "
SUITE_FOLDERS = ("normal", "multi567", "compare", "multipro", "shopping", "wikipedia")
MULTIHOP_SUITES = ("compare", "multi567", "multipro")
SINGLE_HOP_SUITES = ("shopping", "wikipedia")
SUITE_HOPS = {"normal": 2}
"""Hops the official runner counts for a suite's tasks when they give no procedure (default 1)."""
HOP_BUCKETS: tuple[tuple[str, int | None], ...] = (("1", 1), ("2-4", 4), ("5+", None))
"""The MMInA paper's grouping of tasks by hop count: (bucket name, most hops in it; None: no limit)."""
BUCKETS = tuple(name for name, _ in HOP_BUCKETS)


def hop_bucket(n_hops: int) -> str:
    """The bucket of a task with ``n_hops`` hops (``1``, ``2-4`` or ``5+``)."""
    return next(name for name, most in HOP_BUCKETS if most is None or n_hops <= most)


@dataclass(frozen=True)
class Hop:
    """One hop: the site keyword that the official runner looks for in the URL ("" when the task
    names none: such a hop is judged by the final answer alone)."""

    index: int
    keyword: str


@dataclass(frozen=True)
class Task:
    """A normalized MMInA task; ``original`` keeps the file's JSON untouched."""

    task_id: str
    suite: str
    intent: str
    start_urls: tuple[str, ...]
    eval_types: tuple[str, ...]
    reference_answers: dict[str, Any]
    reference_url: str
    cnt_hop: int
    procedure: tuple[str, ...]
    city: str
    flight: str
    shop: str
    original: dict[str, Any] = field(repr=False)
    sha256: str = ""

    @cached_property
    def hops(self) -> tuple[Hop, ...]:
        if not self.procedure:
            return tuple(Hop(i, "") for i in range(max(self.cnt_hop - 1, SUITE_HOPS.get(self.suite, 1))))
        keywords = self.procedure[:self.procedure.index(END)] if END in self.procedure else self.procedure
        return tuple(Hop(i, k) for i, k in enumerate(keywords))

    @cached_property
    def n_hops(self) -> int:
        return len(self.hops)

    @property
    def reference_script(self) -> list[dict[str, Any]] | None:
        """The fixture suites' oracle steps (an mmina extension of the format), if any."""
        return self.original.get("reference_script")

    @property
    def original_json(self) -> str:
        return json.dumps(self.original, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class TaskSuite:
    """The tasks of one suite path, with a checksum so a run records exactly what it ran."""

    name: str
    path: str
    tasks: tuple[Task, ...]
    sha256: str
    warnings: tuple[str, ...] = ()
    """What validation found odd but runnable in the suite's files (``file: field: warning: ...``)."""

    def select(self, task_ids: list[str] | None) -> "TaskSuite":
        """The sub-suite with only ``task_ids`` (all tasks when None); unknown ids are an error."""
        if not task_ids:
            return self
        by_id = {t.task_id: t for t in self.tasks}
        missing = [t for t in task_ids if t not in by_id]
        if missing:
            raise TaskError(f"unknown task id(s) {', '.join(missing)} in suite {self.name}")
        return replace(self, tasks=tuple(by_id[t] for t in task_ids))

    def head(self, limit: int | None) -> "TaskSuite":
        """The first ``limit`` tasks (all when None)."""
        return self if limit is None else replace(self, tasks=self.tasks[:limit])

    def with_warnings(self, warnings: tuple[str, ...]) -> "TaskSuite":
        return replace(self, warnings=warnings)


def builtin_suite_path() -> Path:
    """The fixture task suite shipped inside the package."""
    return Path(str(resources.files("mmina.fixtures") / "tasks"))


OFFICIAL_SHAPED = "official"
"""The bare name of the official-shaped task set (``fixtures/tasks_official``)."""


def resolve_suite_path(path: str | Path | None) -> Path:
    """A task file or folder; a bare suite name (``normal``, ``multi567``, ...) that is not a
    path names that folder of the built-in suite, ``official`` the official-shaped set (tasks
    in the release's conventions, see fixtures/generate_official_tasks.py); None is the whole
    built-in suite."""
    if path is None:
        return builtin_suite_path()
    if not Path(path).exists() and str(path) == OFFICIAL_SHAPED:
        return Path(str(resources.files("mmina.fixtures") / "tasks_official"))
    if not Path(path).exists() and str(path) in SUITE_FOLDERS:
        return builtin_suite_path() / str(path)
    return Path(path)


def load_suite(path: str | Path | None = None) -> TaskSuite:
    """Load every task file under ``path`` (see :func:`resolve_suite_path`)."""
    root = resolve_suite_path(path)
    if not root.exists():
        raise TaskError(f"task path {root} does not exist")
    files = [root] if root.is_file() else sorted(root.rglob("*.json"), key=_natural_key(root))
    if not files:
        raise TaskError(f"no task files (*.json) under {root}")
    base = _id_base(root)
    tasks = tuple(load_task(f, base) for f in files)
    return TaskSuite("builtin" if path is None else root.name, str(root), tasks,
                     suite_sha256((t.task_id, t.sha256) for t in tasks))


def suite_sha256(tasks: Iterable[tuple[str, str]]) -> str:
    """The checksum of a suite from its (task id, task file SHA-256) pairs: same value, same tasks."""
    return hashlib.sha256("".join(f"{task_id}:{digest}\n" for task_id, digest in tasks).encode()).hexdigest()


def _id_base(root: Path) -> Path:
    """Task ids are paths below this folder; an official suite folder keeps its name in the
    id, so ``mmina/normal/3.json`` is ``normal/3`` however it was given."""
    folder = root.parent if root.is_file() else root
    return folder.parent if folder.name in SUITE_FOLDERS else folder


def _natural_key(root: Path):
    def key(path: Path) -> tuple:
        rel = path.relative_to(root).with_suffix("")
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in rel.parts)

    return key


def load_task(path: Path, root: Path) -> Task:
    """Parse one official MMInA task file; the task id is its path below ``root``."""
    try:
        data = path.read_bytes()
        raw = json.loads(data)
    except (OSError, ValueError) as exc:
        raise TaskError(f"cannot read task file {path}: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("intent"), str):
        raise TaskError(f"task file {path} is not an MMInA task (no 'intent')")
    task_id = path.relative_to(root).with_suffix("").as_posix()
    return task_from_dict(raw, task_id, hashlib.sha256(data).hexdigest())


def task_from_dict(raw: dict[str, Any], task_id: str, sha256: str = "") -> Task:
    """Normalize the official fields; missing, empty or null optional fields get empty values."""
    evaluation = raw.get("eval") if isinstance(raw.get("eval"), dict) else {}
    procedure = tuple(str(p).strip().lower() for p in raw.get("procedure") or () if isinstance(p, str))
    counted = count_value(raw.get("cnt_hop", raw.get("hop_cnt")))
    answers = evaluation.get("reference_answers")
    return Task(
        task_id=task_id,
        suite=task_id.split("/")[0] if "/" in task_id else "",
        intent=raw["intent"],
        start_urls=tuple(u.strip() for u in str(raw.get("start_url") or "").split(START_URL_SEPARATOR) if u.strip()),
        eval_types=tuple(t for t in evaluation.get("eval_types") or () if isinstance(t, str)),
        reference_answers=dict(answers) if isinstance(answers, dict) else {},
        reference_url=str(evaluation.get("reference_url") or ""),
        cnt_hop=counted or len(procedure) or 1,
        procedure=procedure,
        city=_text(raw.get("city")),
        flight=_text(raw.get("flight")),
        shop=_text(raw.get("shop")),
        original=raw,
        sha256=sha256,
    )


def count_value(value: Any) -> int | None:
    """A count given as a number or as text (``3``, ``"3"``); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _text(value: Any) -> str:
    """An optional text field: null is empty; a number is its text."""
    return "" if value is None else str(value).strip()


class HopTracker:
    """Live hop queue: only the head hop can complete, at most one per observed step.

    The live condition is the URL rule (the hop's keyword in the lowercased URL); the
    evaluators of ``mmina rescore`` decide final verdicts from the stored trajectory.

    A hop-conditioned episode (``mmina record --prefix-run``) starts its queue at a later hop:
    ``given`` holds the step at which the reference completed each earlier hop, and those hops
    complete there (given, not reached by the agent), whatever the URL; the agent's hops can
    complete from :func:`first_agent_step` on.
    """

    def __init__(self, task: Task, given: Sequence[int] = (), prefix_steps: int = 0) -> None:
        self.hops = task.hops
        self.given = tuple(given)
        self.opens_at = first_agent_step(prefix_steps, self.given)
        self.completed_at: list[int] = []

    @property
    def current(self) -> int:
        """Index of the hop at the head of the queue (== number of hops at END)."""
        return len(self.completed_at)

    @property
    def done(self) -> bool:
        return self.current >= len(self.hops)

    def observe(self, url: str, step_index: int) -> bool:
        """Record the URL seen after a step; True when it completed the head hop (a hop without a
        keyword never completes by URL; a given hop completes at its reference step)."""
        if self.current < len(self.given):
            if self.given[self.current] > step_index:
                return False
            self.completed_at.append(self.given[self.current])
            return True
        keyword = "" if self.done else self.hops[self.current].keyword
        if step_index < self.opens_at or not keyword or keyword not in url.lower():
            return False
        self.completed_at.append(step_index)
        return True


def first_agent_step(prefix_steps: int, given: Sequence[int]) -> int:
    """The first step whose page may complete a hop for an agent handed ``prefix_steps`` steps
    that completed hops at the steps ``given``: its own first observation (step
    ``prefix_steps``), unless a given hop completed there (one hop per step), then the next."""
    return max(prefix_steps, given[-1] + 1) if given else prefix_steps


def task_from_row(row: dict[str, Any]) -> Task:
    """A task as stored in the ``tasks`` table (its original JSON, parsed again)."""
    return task_from_dict(json.loads(row["original_json"]), row["task_id"], row.get("task_sha256") or "")


def task_row(task: Task) -> dict[str, Any]:
    """The store's ``tasks`` row of a task (the recorder, importers and the bench write the same)."""
    return {
        "task_id": task.task_id,
        "suite": task.suite,
        "intent": task.intent,
        "start_urls": list(task.start_urls),
        "cnt_hop": task.cnt_hop,
        "n_hops": task.n_hops,
        "procedure": list(task.procedure),
        "eval_types": list(task.eval_types),
        "reference_answers_json": json.dumps(task.reference_answers, sort_keys=True, ensure_ascii=False),
        "reference_url": task.reference_url,
        "city": task.city,
        "flight": task.flight,
        "shop": task.shop,
        "original_json": task.original_json,
        "task_sha256": task.sha256,
    }
