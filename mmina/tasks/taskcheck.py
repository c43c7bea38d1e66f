"""Reading and checking MMInA task files: the one path of ``mmina tasks validate`` and ``mmina record``.

Every finding is ``file: field: what``, an error or a warning. *Errors* make a task impossible
to run, and only they refuse a run: a file that cannot be read (larger than 16 MB, not UTF-8,
not JSON, nested deeper than 64 levels) or is not a JSON object, no intent, no start URL (or one
that is not http(s)), a ``procedure`` that is not a list of site keywords (or none at all in a
multihop suite, whose hops come from it), more than ``MAX_HOPS`` hops, an ``eval_types`` value
no evaluator knows, a malformed ``reference_script``.

*Warnings* are odd but runnable, as the official release is: it writes codes in lower case,
leaves fields empty or ``null``, adds fields the runner ignores (``require_login``,
``intent_template_id``, ...), names a ``storage_state`` file nobody else has (the episode runs
logged out; see ``mmina.tasks.harness_context``), gives numbers as strings, and its ``cnt_hop``
(which the official runner never reads) may disagree with ``procedure``. Text with a lone
surrogate is run with U+FFFD in its place; a FIFO or folder named ``*.json`` is skipped.

A task that passes is built by :func:`mmina.tasks.task.task_from_dict` from the very JSON checked,
so whatever validate accepts, record runs. Pure (stdlib only), so suites can be checked anywhere
before a browser starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mmina.actions.grammar import ActionKind
from mmina.actions.navigation import is_web_url
from mmina.errors import TaskError, first_line
from mmina.tasks.harness_context import context_findings
from mmina.tasks.task import (
    END,
    MAX_HOPS,
    MULTIHOP_SUITES,
    OFFICIAL_SHAPED,
    SINGLE_HOP_SUITES,
    START_URL_SEPARATOR,
    SUITE_FOLDERS,
    URL_ALTERNATIVES,
    Task,
    TaskSuite,
    count_value,
    id_base,
    resolve_suite_path,
    suite_sha256,
    task_from_dict,
    task_id_of,
)
from mmina.unicode import has_surrogate, valid_text

ERROR, WARNING = "error", "warning"
EVAL_TYPES = frozenset({"string_match", "url_match", "program_html"})
UNUSABLE_EVAL_TYPES = {
    "trip_match": "the official router lists it but never implemented it (NotImplementedError)"
}
ANSWER_KINDS = frozenset({"exact_match", "must_include", "fuzzy_match"})
UNACHIEVABLE = "N/A"
MAX_FILE_BYTES = 16 * 2**20
"""A task file is a few kB; a bigger one is read no further."""
MAX_DEPTH = 64
"""JSON nesting of a task file (an MMInA task has 4 levels)."""
MAX_START_URLS = 20
"""Start URLs of one task (one tab each)."""
SHOWN_CHARS = 60
URL_AS_TEXT = "url_match looks for it as text inside the page's URL; give the whole http(s) URL"
"""What a reference URL that is no URL comes to."""

Finding = tuple[str, str, str]
"""(severity, field, message)."""


@dataclass(frozen=True)
class TaskProblem:
    file: str
    field: str
    message: str
    severity: str = ERROR

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        marker = "" if self.is_error else "warning: "
        return f"{self.file}: {self.field}: {marker}{self.message}"


@dataclass(frozen=True)
class SuiteCheck:
    """What checking a suite path found: the runnable tasks (in file order) and every problem."""

    root: Path
    tasks: tuple[Task, ...]
    problems: tuple[TaskProblem, ...]

    @property
    def errors(self) -> list[TaskProblem]:
        return errors(list(self.problems))


def check_suite(path: str | Path | None) -> SuiteCheck:
    """Read and check every task file under ``path`` (see :func:`mmina.tasks.task.resolve_suite_path`);
    never raises for bad content (only :class:`SuitePathError` for a path with no task file), never
    blocks on a file that is not a regular one."""
    root = resolve_suite_path(path)
    files, problems = suite_files(root)
    tasks = []
    for file in files:
        task, found = check_file(file, id_base(root))
        problems += found
        if task is not None:
            tasks.append(task)
    return SuiteCheck(root, tuple(tasks), tuple(problems))


def check_path(path: str | Path) -> list[TaskProblem]:
    """Every finding of every task file under ``path``."""
    return list(check_suite(path).problems)


def load_suite(path: str | Path | None = None, task_ids: list[str] | None = None) -> TaskSuite:
    """The suite under ``path`` (None: the built-in one), only when no file has an error, so a
    task that cannot run is refused before a run starts; the suite carries the warnings."""
    checked = check_suite(path)
    bad = checked.errors
    if bad:
        more = (
            f" (and {len(bad) - 1} more; run `mmina tasks validate --tasks {checked.root}`)"
            if len(bad) > 1
            else ""
        )
        raise TaskError(f"{bad[0]}{more}")
    suite = TaskSuite(
        "builtin" if path is None else checked.root.name,
        str(checked.root),
        checked.tasks,
        suite_sha256((t.task_id, t.sha256) for t in checked.tasks),
        tuple(str(p) for p in checked.problems),
    )
    return suite.select(task_ids)


def errors(problems: list[TaskProblem]) -> list[TaskProblem]:
    return [p for p in problems if p.is_error]


class SuitePathError(TaskError):
    """A task path that is no task file or folder, or a folder without task files: one line
    naming the path (and, when its last part names a built-in suite, how to get that one)."""


def suite_files(root: Path) -> tuple[list[Path], list[TaskProblem]]:
    """The task files of a suite folder (recursively, in natural order), or the one file given;
    what is named ``*.json`` but is no regular file (a FIFO, a folder) is skipped with a warning.
    Raises :class:`SuitePathError` when ``root`` itself holds no task file: a run or a listing
    of nothing is a mistake in the path, not a suite with findings."""
    if not root.exists():
        raise _path_error(root, "does not exist")
    if not root.is_dir():
        if not root.is_file():
            raise _path_error(root, "is not a task file or folder (a FIFO, a device...)")
        return [root], []
    if not os.access(root, os.R_OK | os.X_OK):
        raise _path_error(root, "cannot be read (permission denied)")
    found = sorted(_named_json(root), key=_natural_key(root))
    problems = [
        TaskProblem(_shown(p), "-", "not a regular file (a FIFO, a folder...): skipped", WARNING)
        for p in found
        if not p.is_file()
    ]
    files = [p for p in found if p.is_file()]
    if not files:
        raise _path_error(root, "holds no task files (*.json)")
    return files, problems


def _path_error(root: Path, what: str) -> SuitePathError:
    """``PATH what``, with the folder a relative path was looked for in, and the built-in suite
    of that name when there is one (``fixtures/tasks/multi567`` given outside the repository)."""
    place = "" if root.is_absolute() else f" (relative to {_shown(Path.cwd())})"
    builtin = root.name in (*SUITE_FOLDERS, OFFICIAL_SHAPED) and str(root) != root.name
    hint = f"; for the built-in suite of that name, give just {root.name}" if builtin else ""
    return SuitePathError(f"{_shown(root)} {what}{place}{hint}")


def _named_json(root: Path) -> list[Path]:
    """Everything named ``*.json`` below ``root``; folders that cannot be read, or vanish while
    they are walked (``/proc``), are passed over, and links to folders are not followed."""
    return [
        Path(folder) / name
        for folder, folders, files in os.walk(root)
        for name in (*files, *folders)
        if name.endswith(".json")
    ]


def _natural_key(root: Path) -> Callable[[Path], tuple[Any, ...]]:
    def key(path: Path) -> tuple[Any, ...]:
        rel = path.relative_to(root).with_suffix("")
        return tuple(
            (0, int(p), "") if p.isascii() and p.isdigit() and len(p) < 10 else (1, 0, p) for p in rel.parts
        )

    return key


def _shown(path: Path) -> str:
    """A path as printed (an undecodable byte of its name as U+FFFD)."""
    return valid_text(str(path))


def check_file(path: Path, base: Path) -> tuple[Task | None, list[TaskProblem]]:
    """One task file, read once: the task (None when it has an error) and the findings; its id
    is its path below ``base``."""
    try:
        data, raw = read_task_json(path)
    except TaskError as exc:
        return None, [TaskProblem(_shown(path), "-", str(exc))]
    task_id = task_id_of(path, base)
    findings = check_task(raw, task_id.split("/")[0] if "/" in task_id else "")
    findings += context_findings(raw, str(path.parent))
    problems = [TaskProblem(_shown(path), field, message, severity) for severity, field, message in findings]
    if errors(problems):
        return None, problems
    try:
        task = task_from_dict(raw, task_id, hashlib.sha256(data).hexdigest())
        return replace(task, folder=str(path.parent)), problems
    except Exception as exc:  # noqa: BLE001 - a task the checks missed is refused, never a traceback
        return None, [
            *problems,
            TaskProblem(_shown(path), "-", f"cannot be loaded: {type(exc).__name__}: {first_line(exc)}"),
        ]


def read_task_json(path: Path) -> tuple[bytes, Any]:
    """The bytes and parsed JSON of a task file; :class:`TaskError` with the reason when it is
    no regular file (opened without blocking: a FIFO never hangs), too big, not UTF-8, not JSON
    or nested too deeply."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise TaskError(f"cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TaskError("not a regular file")
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise TaskError(f"larger than {MAX_FILE_BYTES // 2**20} MB: not a task file")
    return data, _parse(data)


def _parse(data: bytes) -> Any:
    try:
        value = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise TaskError(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise TaskError(f"not a task: JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise TaskError(f"not valid JSON: {first_line(exc)}") from None
    if _depth(value) > MAX_DEPTH:
        raise TaskError(f"not a task: JSON nested deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict):
        raise TaskError("must be a JSON object (an MMInA task)")
    return value


def _depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (iteratively: any depth costs no recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            todo += [(child, level + 1) for child in children]
    return deepest


def check_task(raw: dict[str, Any], suite: str = "") -> list[Finding]:
    """Findings of one task as (severity, field, message), in field order; ``suite`` is the
    first part of its id (the official folder)."""
    findings: list[Finding] = []
    for check in CHECKS:
        findings += check(raw, suite)
    return findings


def _shorten(value: Any) -> str:
    """A value as shown in a message: its repr, cut to ``SHOWN_CHARS``."""
    text = valid_text(repr(value))
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _error(field: str, message: str) -> Finding:
    return ERROR, field, message


def _warning(field: str, message: str) -> Finding:
    return WARNING, field, message


def _intent(raw: dict[str, Any], _suite: str) -> list[Finding]:
    problem = _text_problem(raw, "intent")
    return [_error("intent", f"{problem} (the instruction for the agent)")] if problem else []


def _text_problem(raw: dict[str, Any], name: str) -> str:
    """What is wrong with a required text field ("" when it is text with a character)."""
    value = raw.get(name)
    if value is None:
        return "missing" if name not in raw else "null"
    if not isinstance(value, str):
        return f"must be text, not {_kind(value)} {_shorten(value)}"
    return "" if value.strip() else "empty"


def _kind(value: Any) -> str:
    """A JSON value's kind, as a message names it."""
    kinds = (
        (bool, "a boolean"),
        (int, "a number"),
        (float, "a number"),
        (list, "a list"),
        (dict, "an object"),
    )
    return next((name for kind, name in kinds if isinstance(value, kind)), "a string")


def _start_url(raw: dict[str, Any], _suite: str) -> list[Finding]:
    problem = _text_problem(raw, "start_url")
    if problem:
        return [_error("start_url", f"{problem} (the page the agent starts on)")]
    start = raw["start_url"]
    urls = [u.strip() for u in start.split(START_URL_SEPARATOR) if u.strip()]
    if len(urls) > MAX_START_URLS:
        return [_error("start_url", f"{len(urls)} start URLs: at most {MAX_START_URLS} (one tab each)")]
    return [_error("start_url", f"not an http(s) URL: {_shorten(u)}") for u in urls if not is_web_url(u)]


def _eval(raw: dict[str, Any], _suite: str) -> list[Finding]:
    evaluation = raw.get("eval")
    if not isinstance(evaluation, dict):
        return [
            _warning(
                "eval",
                "missing or not an object: the task's own verdict (evaluator task) will be "
                "n/a (nothing to judge); hops are still judged",
            )
        ]
    findings = _eval_types(evaluation.get("eval_types"))
    answers = evaluation.get("reference_answers")
    if isinstance(answers, dict):
        findings += _answers(answers)
    elif answers not in (None, [], ""):
        findings.append(_warning("eval.reference_answers", "not an object: ignored"))
    listed = evaluation.get("eval_types")
    types = listed if isinstance(listed, list) else []
    if "string_match" in types and not (isinstance(answers, dict) and answers):
        findings.append(
            _warning(
                "eval.reference_answers", "string_match without reference answers: n/a (nothing to judge)"
            )
        )
    reference = evaluation.get("reference_url")
    urls = (
        [u.strip() for u in reference.split(URL_ALTERNATIVES) if u.strip()]
        if isinstance(reference, str)
        else []
    )
    if "url_match" in types and not (urls or reference not in (None, "") and not isinstance(reference, str)):
        findings.append(
            _warning("eval.reference_url", "url_match without a reference URL: n/a (nothing to judge)")
        )
    if reference is not None and not isinstance(reference, str):
        findings.append(_warning("eval.reference_url", "not a string: used as text"))
    findings += [
        _warning("eval.reference_url", f"not an http(s) URL: {_shorten(url)} ({URL_AS_TEXT})")
        for url in urls
        if not is_web_url(url)
    ]
    return findings


def _eval_types(types: Any) -> list[Finding]:
    if types is None or types == []:
        return [
            _warning(
                "eval.eval_types", "missing or empty: the task's own verdict will be n/a (nothing to judge)"
            )
        ]
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        return [_error("eval.eval_types", "must be a list of evaluation types")]
    known = ", ".join(sorted(EVAL_TYPES))
    return [
        _error(
            "eval.eval_types",
            f"{t!r} cannot be evaluated: {UNUSABLE_EVAL_TYPES[t]}"
            if t in UNUSABLE_EVAL_TYPES
            else f"unknown type {t!r} (known: {known})",
        )
        for t in types
        if t not in EVAL_TYPES
    ]


def _answers(answers: dict[str, Any]) -> list[Finding]:
    findings = [
        _warning(
            f"eval.reference_answers.{_shorten(k)[1:-1]}",
            f"unknown kind, ignored (known: {', '.join(sorted(ANSWER_KINDS))})",
        )
        for k in answers
        if k not in ANSWER_KINDS
    ]
    exact = answers.get("exact_match")
    if exact is not None and not isinstance(exact, str):
        findings.append(
            _warning(
                "eval.reference_answers.exact_match", f"not a string: compared as text {_shorten(exact)}"
            )
        )
    for kind in ("must_include", "fuzzy_match"):
        value = answers.get(kind)
        if value == UNACHIEVABLE:
            findings.append(
                _warning(
                    f"eval.reference_answers.{kind}",
                    "'N/A' (WebArena's unachievable-task marker): only the answer N/A passes",
                )
            )
        elif value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            findings.append(
                _warning(
                    f"eval.reference_answers.{kind}",
                    "not a list of strings: compared as text (null entries dropped)",
                )
            )
    return findings


def _hops(raw: dict[str, Any], suite: str) -> list[Finding]:
    procedure = raw.get("procedure")
    if procedure is None or procedure == []:  # an empty one is none (mmina.tasks.Task.hops)
        return _without_procedure(raw, suite)
    if not isinstance(procedure, list) or not all(isinstance(p, str) and p.strip() for p in procedure):
        return [_error("procedure", "not a list of site keywords")]
    keywords = [p.strip().lower() for p in procedure]
    hops = keywords.index(END) if END in keywords else len(keywords)
    if hops > MAX_HOPS:
        return [_error("procedure", f"{hops} hops: a task has at most {MAX_HOPS}")]
    return _keywords(procedure) + _cnt_hop(raw, len(procedure))


def _without_procedure(raw: dict[str, Any], suite: str) -> list[Finding]:
    missing = "empty" if raw.get("procedure") == [] else "missing"
    if suite in MULTIHOP_SUITES:
        return [_error("procedure", f"{missing}: the hops of a {suite} task come from its procedure")]
    name, value = _count_field(raw)
    if value is not None and value > MAX_HOPS + 1:
        return [
            _error(
                name,
                f"{_shorten(value)} would be {_shorten(value - 1)} hops (cnt_hop counts the END "
                f"marker): a task has at most {MAX_HOPS}",
            )
        ]
    unread = [_warning(name, f"{_count_problem(raw[name])}: ignored")] if name and value is None else []
    if suite in SINGLE_HOP_SUITES:
        return unread
    return [
        _warning(
            "procedure",
            f"{missing}: the hops are counted from cnt_hop (else the suite) and judged "
            "by the final answer alone (a passing answer completes them all)",
        ),
        *unread,
    ]


def _count_field(raw: dict[str, Any]) -> tuple[str, int | None]:
    """The hop count's field name (``cnt_hop``, else ``hop_cnt``; "" when neither) and its value."""
    name = "cnt_hop" if "cnt_hop" in raw else "hop_cnt" if "hop_cnt" in raw else ""
    return name, count_value(raw[name]) if name else None


def _count_problem(value: Any) -> str:
    """Why a hop count is no count (:func:`mmina.tasks.count_value` read None from it)."""
    shown = _shorten(value)
    if value is None:
        return "null"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return f"not a number but {_kind(value)} ({shown})"
    try:
        number = float(value.strip()) if isinstance(value, str) else value
    except ValueError:
        return f"not a number ({shown})"
    if number < 0:
        return f"negative ({shown}): a hop count is 1 or more (it counts the END marker)"
    if not float(number).is_integer():
        return f"not a whole number ({shown})"
    return f"not a count written in digits ({shown})"


def _keywords(procedure: list[str]) -> list[Finding]:
    normalized = [p.strip().lower() for p in procedure]
    findings = []
    if any(p != n for p, n in zip(procedure, normalized)):
        findings.append(
            _warning("procedure", "keywords with upper case or spaces: compared lower-case, stripped")
        )
    if END not in normalized:
        findings.append(_warning("procedure", f"no {END!r} marker: every entry is a hop"))
    elif normalized[0] == END:
        findings.append(
            _warning(
                "procedure",
                f"no site keyword before {END!r}: the task has no hop (its answer alone is judged)",
            )
        )
    elif normalized.index(END) != len(normalized) - 1:
        findings.append(_warning("procedure", f"entries after {END!r} are ignored"))
    return findings


def _cnt_hop(raw: dict[str, Any], entries: int) -> list[Finding]:
    name, value = _count_field(raw)
    if not name:
        return []
    if value is None:
        return [_warning(name, f"{_count_problem(raw[name])}: ignored")]
    if value != entries:
        return [
            _warning(
                name,
                f"is {_shorten(value)} but procedure has {entries} entries (cnt_hop counts the END "
                "marker); the procedure decides",
            )
        ]
    return []


def _fixture_hops(raw: dict[str, Any], _suite: str) -> list[Finding]:
    """The mmina extension ``mmina_hops`` (optional): one object per hop, else it is not used."""
    hops = raw.get("mmina_hops")
    if hops is None or isinstance(hops, list) and all(isinstance(h, dict) for h in hops):
        return []
    return [
        _warning(
            "mmina_hops",
            "not a list of objects (one per hop): ignored, the hops are judged by their procedure keywords",
        )
    ]


def _surrogates(raw: dict[str, Any], _suite: str) -> list[Finding]:
    if not has_surrogate(raw):
        return []
    return [
        _warning(
            "-", "text with a lone surrogate (such as \\ud83d: not Unicode): U+FFFD is used in its place"
        )
    ]


def _places(raw: dict[str, Any], _suite: str) -> list[Finding]:
    return [
        _warning(k, f"not a string: used as text {_shorten(raw[k])}")
        for k in ("city", "flight", "shop")
        if raw.get(k) is not None and not isinstance(raw[k], str)
    ]


_SCRIPT_FIELDS = {
    "click": ("target",),
    "hover": ("target",),
    "type": ("target", "text"),
    "press": ("key",),
    "scroll": ("direction",),
    "goto": ("url",),
    "tab_focus": ("tab",),
    "stop": ("answer",),
}
_SCRIPT_TYPES: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "answer": (str,),
    "key": (str,),
    "url": (str,),
    "direction": (str,),
    "tab": (int,),
    "enter": (bool, int),
}
_ACTIONS = frozenset(k.value for k in ActionKind)


def _script(raw: dict[str, Any], _suite: str) -> list[Finding]:
    """The mmina extension ``reference_script`` (optional): well-formed oracle steps."""
    script = raw.get("reference_script")
    if script is None:
        return []
    if not isinstance(script, list) or not script:
        return [_error("reference_script", "must be a non-empty list of steps")]
    return [
        _error(f"reference_script[{index}]", message)
        for index, step in enumerate(script)
        for message in _script_step(step)
    ]


def _script_step(step: Any) -> list[str]:
    """What is wrong with one oracle step (a JSON object naming an action and its arguments)."""
    action = step.get("action") if isinstance(step, dict) else None
    if not isinstance(action, str) or action not in _ACTIONS:
        return [f"unknown action {_shorten(action)}"]
    problems = [f"{action} needs {name!r}" for name in _SCRIPT_FIELDS.get(action, ()) if name not in step]
    problems += [
        f"{name} must be {' or '.join(t.__name__ for t in types)}, not {_shorten(step[name])}"
        for name, types in _SCRIPT_TYPES.items()
        if step.get(name) is not None and (not isinstance(step[name], types) or _negative(step[name]))
    ]
    target = step.get("target")
    if target is not None and not (
        isinstance(target, dict) and all(isinstance(target.get(k), str) for k in ("role", "name"))
    ):
        problems.append("target needs 'role' and 'name' (strings)")
    if action == "scroll" and step.get("direction") not in (None, "up", "down"):
        problems.append(f"direction must be 'up' or 'down', not {_shorten(step['direction'])}")
    return problems


def _negative(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value < 0


CHECKS: tuple[Callable[[dict[str, Any], str], list[Finding]], ...] = (
    _intent,
    _start_url,
    _eval,
    _hops,
    _places,
    _script,
    _fixture_hops,
    _surrogates,
)
