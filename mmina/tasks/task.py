"""MMInA tasks: the official JSON format normalized, hops, and live hop tracking.

The official files count the END marker in ``cnt_hop`` and end ``procedure`` with
``"end"``; a task's hops are the procedure entries before the first such marker (all of them
when there is none), compared lower-case and stripped. A task without a ``procedure`` (the
official single-hop suites) has ``cnt_hop - 1`` hops when ``cnt_hop`` says so, else the
official runner's count for its suite (``normal`` 2, others 1); those hops have no keyword and
are judged by the final answer alone. Fields the official release leaves empty or ``null``
become empty strings; numbers given as text are read as numbers.

Reading task files (which files, how much, what JSON) and checking them is
``mmina.tasks.taskcheck``'s: one path for ``mmina tasks validate`` and ``mmina record``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from mmina.errors import SEE_TASKS, TaskError, not_found, plural
from mmina.redaction.redact import redact_configured
from mmina.unicode import mapped_text, valid_text

END = "end"
START_URL_SEPARATOR = " |AND| "
URL_ALTERNATIVES = " |OR| "
"""What separates the alternatives of ``eval.reference_url`` (as in WebArena)."""
SUITE_FOLDERS = ("normal", "multi567", "compare", "multipro", "shopping", "wikipedia")
MULTIHOP_SUITES = ("compare", "multi567", "multipro")
SINGLE_HOP_SUITES = ("shopping", "wikipedia")
SUITE_HOPS = {"normal": 2}
"""Hops the official runner counts for a suite's tasks when they give no procedure (default 1)."""
HOP_BUCKETS: tuple[tuple[str, int | None], ...] = (("1", 1), ("2-4", 4), ("5+", None))
"""The MMInA paper's grouping of tasks by hop count: (bucket name, most hops in it; None: no limit)."""
BUCKETS = tuple(name for name, _ in HOP_BUCKETS)
MAX_HOPS = 100
"""The most hops a task may have (MMInA's have at most 10): ``cnt_hop`` above ``MAX_HOPS + 1``
cannot decide a task's hops, and a count stays a small number all the way to the store."""
ID_SLUG_CHARS = 80
_COUNT = re.compile(r"[0-9]{1,9}")


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
    folder: str = field(default="", compare=False, repr=False)
    """The task file's folder (empty for a task read from a store): where a relative
    ``storage_state`` path is looked for (``mmina.tasks.harness_context``)."""

    @cached_property
    def hops(self) -> tuple[Hop, ...]:
        if not self.procedure:
            return tuple(
                Hop(i, "")
                for i in range(max(min(self.cnt_hop, MAX_HOPS + 1) - 1, SUITE_HOPS.get(self.suite, 1)))
            )
        keywords = self.procedure[: self.procedure.index(END)] if END in self.procedure else self.procedure
        return tuple(Hop(i, k) for i, k in enumerate(keywords))

    @cached_property
    def n_hops(self) -> int:
        return len(self.hops)

    @property
    def reference_script(self) -> list[dict[str, Any]] | None:
        """The fixture suites' oracle steps (an mmina extension of the format), if any (a
        value that is not a list is none)."""
        script = self.original.get("reference_script")
        return script if isinstance(script, list) else None

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

    def select(self, task_ids: list[str] | None) -> TaskSuite:
        """The sub-suite with only ``task_ids`` (all tasks when None); unknown ids are an error."""
        if not task_ids:
            return self
        by_id = {t.task_id: t for t in self.tasks}
        missing = [t for t in task_ids if t not in by_id]
        if missing:
            others = f"; {plural(len(missing) - 1, 'other id')} not there either" if len(missing) > 1 else ""
            listed = SEE_TASKS if self.name == "builtin" else f"{SEE_TASKS} --tasks {self.path}"
            raise TaskError(not_found("task", missing[0], f"suite {self.name}", by_id, listed) + others)
        return replace(self, tasks=tuple(by_id[t] for t in task_ids))

    def head(self, limit: int | None) -> TaskSuite:
        """The first ``limit`` tasks (all when None)."""
        return self if limit is None else replace(self, tasks=self.tasks[:limit])

    def with_warnings(self, warnings: tuple[str, ...]) -> TaskSuite:
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


def suite_sha256(tasks: Iterable[tuple[str, str]]) -> str:
    """The checksum of a suite from its (task id, task file SHA-256) pairs: same value, same tasks."""
    return hashlib.sha256("".join(f"{task_id}:{digest}\n" for task_id, digest in tasks).encode()).hexdigest()


def id_base(root: Path) -> Path:
    """Task ids are paths below this folder; an official suite folder keeps its name in the
    id, so ``mmina/normal/3.json`` is ``normal/3`` however it was given."""
    folder = root.parent if root.is_file() else root
    return folder.parent if folder.name in SUITE_FOLDERS else folder


def task_id_of(path: Path, base: Path) -> str:
    """The id of the task file ``path`` below ``base`` (its relative path without ``.json``),
    with any undecodable byte of the file name shown as U+FFFD."""
    return valid_text(path.relative_to(base).with_suffix("").as_posix())


def id_slug(task_id: str) -> str:
    """The task id in the alphabet of file names (episode ids start with it): any run of other
    characters becomes ``-``, at most ``ID_SLUG_CHARS`` characters; ``normal/3`` is ``normal-3``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", task_id).strip("-._")[:ID_SLUG_CHARS].strip("-._")
    return slug or "task"


def task_from_dict(raw: dict[str, Any], task_id: str, sha256: str = "") -> Task:
    """Normalize the official fields; missing, empty or null optional fields get empty values.

    Never raises for odd content (``mmina tasks validate`` says what is odd): values of the
    wrong type become text, lone surrogates U+FFFD, and ``cnt_hop`` at most ``MAX_HOPS + 1``.
    """
    raw, task_id = mapped_text(raw, valid_text), valid_text(task_id)
    given = raw.get("eval")
    evaluation: dict[str, Any] = given if isinstance(given, dict) else {}
    procedure = tuple(p.strip().lower() for p in _list(raw.get("procedure")) if isinstance(p, str))
    counted = count_value(raw.get("cnt_hop", raw.get("hop_cnt")))
    answers = evaluation.get("reference_answers")
    return Task(
        task_id=task_id,
        suite=task_id.split("/")[0] if "/" in task_id else "",
        intent=raw["intent"] if isinstance(raw.get("intent"), str) else _text(raw.get("intent")),
        start_urls=tuple(
            u.strip() for u in _text(raw.get("start_url")).split(START_URL_SEPARATOR) if u.strip()
        ),
        eval_types=tuple(t for t in _list(evaluation.get("eval_types")) if isinstance(t, str)),
        reference_answers={k: _reference(v) for k, v in answers.items()} if isinstance(answers, dict) else {},
        reference_url=_text(evaluation.get("reference_url"), strip=False),
        cnt_hop=min(counted, MAX_HOPS + 1) if counted else len(procedure) or 1,
        procedure=procedure,
        city=_text(raw.get("city")),
        flight=_text(raw.get("flight")),
        shop=_text(raw.get("shop")),
        original=raw,
        sha256=sha256,
    )


def _list(value: Any) -> list[Any]:
    """A field that should be a list: itself, or empty for anything else."""
    return value if isinstance(value, list) else []


def count_value(value: Any) -> int | None:
    """A count given as a whole number or as its decimal text (``3``, ``"3"``); None for
    anything else (a negative number, a fraction, a boolean, other text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and _COUNT.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _text(value: Any, strip: bool = True) -> str:
    """An optional text field: null is empty; a number is its text; a list or object its JSON
    (stripped of surrounding spaces unless ``strip`` is False)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else _json_text(value)
    return text.strip() if strip else text


def _json_text(value: Any) -> str:
    """A non-string JSON value as text: a number as JSON writes it, anything else as its JSON."""
    return (
        str(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else json.dumps(value, sort_keys=True, ensure_ascii=False)
    )


def _reference(value: Any) -> Any:
    """One ``reference_answers`` value as the evaluators read it: text stays text, a list
    becomes a list of texts (``null`` entries dropped), anything else its text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return [v if isinstance(v, str) else _json_text(v) for v in value if v is not None]
    return _json_text(value)


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


def task_folder(suite_path: str | None, task_id: str) -> str:
    """The folder a stored task's file was read from, given its run's suite path (``runs.
    task_suite_path``): where its relative ``storage_state`` is looked for again on replay."""
    return str((id_base(Path(suite_path)) / task_id).parent) if suite_path else ""


def task_row(task: Task) -> dict[str, Any]:
    """The store's ``tasks`` row of a task (the recorder, importers and the bench write the same),
    redacted (a start URL may carry ``?api_key=``; see ``redact.py``)."""
    return redact_configured(
        {
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
    )
