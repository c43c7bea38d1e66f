"""Validation of MMInA task files: every problem as ``file: field: what is wrong``.

Pure (stdlib only), so suites can be checked anywhere before a browser starts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mmina.actions import ActionKind
from mmina.errors import TaskError
from mmina.tasks import END, START_URL_SEPARATOR, TaskSuite, load_suite, resolve_suite_path

EVAL_TYPES = frozenset({"string_match", "url_match", "program_html"})
ANSWER_KINDS = frozenset({"exact_match", "must_include", "fuzzy_match"})


@dataclass(frozen=True)
class TaskProblem:
    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"


def task_files(path: Path) -> list[Path]:
    """The task files of a suite folder (recursively), or the one file given."""
    return [path] if path.is_file() else sorted(path.rglob("*.json"))


def check_path(path: Path) -> list[TaskProblem]:
    """Every problem of every task file under ``path``; never raises for bad content."""
    if not path.exists():
        return [TaskProblem(str(path), "-", "does not exist")]
    files = task_files(path)
    if not files:
        return [TaskProblem(str(path), "-", "no task files (*.json)")]
    return [problem for file in files for problem in check_file(file)]


def check_file(path: Path) -> list[TaskProblem]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return [TaskProblem(str(path), "-", f"cannot read: {exc}")]
    except ValueError as exc:
        return [TaskProblem(str(path), "-", f"not valid JSON: {exc}")]
    if not isinstance(raw, dict):
        return [TaskProblem(str(path), "-", "must be a JSON object")]
    return [TaskProblem(str(path), f, m) for f, m in check_task(raw)]


def check_task(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Problems of one task as (field, message) pairs, in field order."""
    problems: list[tuple[str, str]] = []
    for check in (_intent, _start_url, _eval, _hops, _places, _script):
        problems += check(raw)
    return problems


def _intent(raw: dict[str, Any]) -> list[tuple[str, str]]:
    intent = raw.get("intent")
    if not isinstance(intent, str) or not intent.strip():
        return [("intent", "missing or empty (the instruction for the agent)")]
    return []


def _start_url(raw: dict[str, Any]) -> list[tuple[str, str]]:
    start = raw.get("start_url")
    if not isinstance(start, str) or not start.strip():
        return [("start_url", "missing or empty")]
    bad = [u.strip() for u in start.split(START_URL_SEPARATOR) if urlsplit(u.strip()).scheme not in ("http", "https")]
    return [("start_url", f"not an http(s) URL: {u!r}") for u in bad]


def _eval(raw: dict[str, Any]) -> list[tuple[str, str]]:
    evaluation = raw.get("eval")
    if not isinstance(evaluation, dict):
        return [("eval", "missing or not an object")]
    problems = []
    types = evaluation.get("eval_types")
    if not isinstance(types, list) or not types:
        problems.append(("eval.eval_types", "missing or empty list"))
    else:
        problems += [("eval.eval_types", f"unknown type {t!r} (known: {', '.join(sorted(EVAL_TYPES))})")
                     for t in types if t not in EVAL_TYPES]
    answers = evaluation.get("reference_answers")
    if answers is not None and not isinstance(answers, dict):
        problems.append(("eval.reference_answers", "must be an object"))
    elif isinstance(answers, dict):
        problems += _answers(answers)
    if "string_match" in (types or []) and not answers:
        problems.append(("eval.reference_answers", "string_match needs reference answers"))
    if "url_match" in (types or []) and not evaluation.get("reference_url"):
        problems.append(("eval.reference_url", "url_match needs a reference URL"))
    return problems


def _answers(answers: dict[str, Any]) -> list[tuple[str, str]]:
    problems = [(f"eval.reference_answers.{k}", f"unknown kind (known: {', '.join(sorted(ANSWER_KINDS))})")
                for k in answers if k not in ANSWER_KINDS]
    if "exact_match" in answers and not isinstance(answers["exact_match"], str):
        problems.append(("eval.reference_answers.exact_match", "must be a string"))
    for kind in ("must_include", "fuzzy_match"):
        value = answers.get(kind)
        if value is not None and value != "N/A" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            problems.append((f"eval.reference_answers.{kind}", "must be a list of strings"))
    return problems


def _hops(raw: dict[str, Any]) -> list[tuple[str, str]]:
    procedure, cnt_hop = raw.get("procedure"), raw.get("cnt_hop")
    if not isinstance(procedure, list) or not all(isinstance(p, str) and p.strip() for p in procedure):
        return [("procedure", "missing or not a list of site keywords")]
    problems = []
    if not procedure or procedure[-1].lower() != END:
        problems.append(("procedure", f"must end with {END!r}"))
    if END in [p.lower() for p in procedure[:-1]]:
        problems.append(("procedure", f"{END!r} may only be the last entry"))
    if not isinstance(cnt_hop, int) or isinstance(cnt_hop, bool):
        problems.append(("cnt_hop", "missing or not an integer"))
    elif cnt_hop != len(procedure):
        problems.append(("cnt_hop", f"is {cnt_hop} but procedure has {len(procedure)} entries (cnt_hop counts the END marker)"))
    return problems


def _places(raw: dict[str, Any]) -> list[tuple[str, str]]:
    problems = [(k, "must be a string") for k in ("city", "flight", "shop") if k in raw and not isinstance(raw[k], str)]
    flight = raw.get("flight")
    if isinstance(flight, str) and flight and not (len(flight) == 3 and flight.isalpha() and flight.isupper()):
        problems.append(("flight", f"must be a three-letter airport code, not {flight!r}"))
    return problems


_SCRIPT_FIELDS = {"click": ("target",), "hover": ("target",), "type": ("target", "text"), "press": ("key",),
                  "scroll": ("direction",), "goto": ("url",), "tab_focus": ("tab",), "stop": ("answer",)}


def _script(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """The mmina extension ``reference_script`` (optional): well-formed oracle steps."""
    script = raw.get("reference_script")
    if script is None:
        return []
    if not isinstance(script, list) or not script:
        return [("reference_script", "must be a non-empty list of steps")]
    problems = []
    for index, step in enumerate(script):
        field = f"reference_script[{index}]"
        action = step.get("action") if isinstance(step, dict) else None
        if action not in {k.value for k in ActionKind}:
            problems.append((field, f"unknown action {action!r}"))
            continue
        problems += [(field, f"{action} needs {name!r}") for name in _SCRIPT_FIELDS.get(action, ()) if name not in step]
        target = step.get("target")
        if target is not None and not (isinstance(target, dict) and {"role", "name"} <= set(target)):
            problems.append((field, "target needs 'role' and 'name'"))
    return problems


def load_checked_suite(path: str | Path | None = None, task_ids: list[str] | None = None) -> TaskSuite:
    """Load a suite only when every file validates, so a bad file is refused before a run starts."""
    root = resolve_suite_path(path)
    problems = check_path(root)
    if problems:
        more = f" (and {len(problems) - 1} more; run `mmina tasks validate {root}`)" if len(problems) > 1 else ""
        raise TaskError(f"{problems[0]}{more}")
    return load_suite(path).select(task_ids)
