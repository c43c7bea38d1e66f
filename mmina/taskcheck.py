"""Validation of MMInA task files: every finding as ``file: field: what``, an error or a warning.

*Errors* make a task impossible to run, and only they refuse a run: a file that is not a JSON
object, no intent, no start URL (or one that is not http(s)), a ``procedure`` that is not a
list of site keywords (or none at all in a multihop suite, whose hops come from it), an
``eval_types`` value no evaluator knows, a malformed ``reference_script``.

*Warnings* are odd but runnable, as the official release is: it writes codes in lower case,
leaves fields empty or ``null``, adds fields the runner ignores (``require_login``,
``storage_state``, ``intent_template_id``, ...), gives numbers as strings, and its ``cnt_hop``
(which the official runner never reads) may disagree with ``procedure``.

Pure (stdlib only), so suites can be checked anywhere before a browser starts.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mmina.actions import ActionKind
from mmina.errors import TaskError
from mmina.tasks import (END, MULTIHOP_SUITES, SINGLE_HOP_SUITES, START_URL_SEPARATOR, TaskSuite, count_value,
                         load_suite, resolve_suite_path)

ERROR, WARNING = "error", "warning"
EVAL_TYPES = frozenset({"string_match", "url_match", "program_html"})
UNUSABLE_EVAL_TYPES = {"trip_match": "the official router lists it but never implemented it (NotImplementedError)"}
ANSWER_KINDS = frozenset({"exact_match", "must_include", "fuzzy_match"})
UNACHIEVABLE = "N/A"

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


def task_files(path: Path) -> list[Path]:
    """The task files of a suite folder (recursively), or the one file given."""
    return [path] if path.is_file() else sorted(path.rglob("*.json"))


def check_path(path: Path) -> list[TaskProblem]:
    """Every finding of every task file under ``path``; never raises for bad content."""
    if not path.exists():
        return [TaskProblem(str(path), "-", "does not exist")]
    files = task_files(path)
    if not files:
        return [TaskProblem(str(path), "-", "no task files (*.json)")]
    return [problem for file in files for problem in check_file(file)]


def errors(problems: list[TaskProblem]) -> list[TaskProblem]:
    return [p for p in problems if p.is_error]


def check_file(path: Path) -> list[TaskProblem]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return [TaskProblem(str(path), "-", f"cannot read: {exc}")]
    except ValueError as exc:
        return [TaskProblem(str(path), "-", f"not valid JSON: {exc}")]
    if not isinstance(raw, dict):
        return [TaskProblem(str(path), "-", "must be a JSON object")]
    return [TaskProblem(str(path), field, message, severity)
            for severity, field, message in check_task(raw, path.parent.name)]


def check_task(raw: dict[str, Any], suite: str = "") -> list[Finding]:
    """Findings of one task as (severity, field, message), in field order; ``suite`` is its folder name."""
    findings: list[Finding] = []
    for check in CHECKS:
        findings += check(raw, suite)
    return findings


def _error(field: str, message: str) -> Finding:
    return ERROR, field, message


def _warning(field: str, message: str) -> Finding:
    return WARNING, field, message


def _intent(raw: dict[str, Any], _suite: str) -> list[Finding]:
    intent = raw.get("intent")
    if not isinstance(intent, str) or not intent.strip():
        return [_error("intent", "missing or empty (the instruction for the agent)")]
    return []


def _start_url(raw: dict[str, Any], _suite: str) -> list[Finding]:
    start = raw.get("start_url")
    if not isinstance(start, str) or not start.strip():
        return [_error("start_url", "missing or empty (the page the agent starts on)")]
    urls = [u.strip() for u in start.split(START_URL_SEPARATOR) if u.strip()]
    return [_error("start_url", f"not an http(s) URL: {u!r}") for u in urls
            if urlsplit(u).scheme not in ("http", "https") or not urlsplit(u).hostname]


def _eval(raw: dict[str, Any], _suite: str) -> list[Finding]:
    evaluation = raw.get("eval")
    if not isinstance(evaluation, dict):
        return [_warning("eval", "missing or not an object: the task's own verdict (evaluator task) will be "
                                 "unclear; hops are still judged")]
    findings = _eval_types(evaluation.get("eval_types"))
    answers = evaluation.get("reference_answers")
    if isinstance(answers, dict):
        findings += _answers(answers)
    elif answers not in (None, [], ""):
        findings.append(_warning("eval.reference_answers", "not an object: ignored"))
    types = evaluation.get("eval_types") if isinstance(evaluation.get("eval_types"), list) else []
    if "string_match" in types and not (isinstance(answers, dict) and answers):
        findings.append(_warning("eval.reference_answers", "string_match without reference answers: unclear"))
    if "url_match" in types and not evaluation.get("reference_url"):
        findings.append(_warning("eval.reference_url", "url_match without a reference URL: unclear"))
    return findings


def _eval_types(types: Any) -> list[Finding]:
    if types is None or types == []:
        return [_warning("eval.eval_types", "missing or empty: the task's own verdict will be unclear")]
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        return [_error("eval.eval_types", "must be a list of evaluation types")]
    known = ", ".join(sorted(EVAL_TYPES))
    return [_error("eval.eval_types", f"{t!r} cannot be evaluated: {UNUSABLE_EVAL_TYPES[t]}" if t in UNUSABLE_EVAL_TYPES
                   else f"unknown type {t!r} (known: {known})") for t in types if t not in EVAL_TYPES]


def _answers(answers: dict[str, Any]) -> list[Finding]:
    findings = [_warning(f"eval.reference_answers.{k}", f"unknown kind, ignored (known: {', '.join(sorted(ANSWER_KINDS))})")
                for k in answers if k not in ANSWER_KINDS]
    exact = answers.get("exact_match")
    if exact is not None and not isinstance(exact, str):
        findings.append(_warning("eval.reference_answers.exact_match", f"not a string: compared as text {str(exact)!r}"))
    for kind in ("must_include", "fuzzy_match"):
        value = answers.get(kind)
        if value == UNACHIEVABLE:
            findings.append(_warning(f"eval.reference_answers.{kind}", "'N/A' (WebArena's unachievable-task "
                                                                       "marker): only the answer N/A passes"))
        elif value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            findings.append(_warning(f"eval.reference_answers.{kind}", "not a list of strings: compared as text"))
    return findings


def _hops(raw: dict[str, Any], suite: str) -> list[Finding]:
    procedure = raw.get("procedure")
    if procedure is None:
        return _without_procedure(raw, suite)
    if not isinstance(procedure, list) or not all(isinstance(p, str) and p.strip() for p in procedure):
        return [_error("procedure", "not a list of site keywords")]
    findings = _keywords(procedure)
    findings += _cnt_hop(raw, len(procedure))
    return findings


def _without_procedure(raw: dict[str, Any], suite: str) -> list[Finding]:
    if suite in MULTIHOP_SUITES:
        return [_error("procedure", f"missing: the hops of a {suite} task come from its procedure")]
    if suite in SINGLE_HOP_SUITES:
        return []
    return [_warning("procedure", "missing: the hops are counted from cnt_hop (else the suite), each judged by "
                                  "the final answer only")]


def _keywords(procedure: list[str]) -> list[Finding]:
    normalized = [p.strip().lower() for p in procedure]
    findings = []
    if any(p != n for p, n in zip(procedure, normalized)):
        findings.append(_warning("procedure", "keywords with upper case or spaces: compared lower-case, stripped"))
    if END not in normalized:
        findings.append(_warning("procedure", f"no {END!r} marker: every entry is a hop"))
    elif normalized.index(END) != len(normalized) - 1:
        findings.append(_warning("procedure", f"entries after {END!r} are ignored"))
    return findings


def _cnt_hop(raw: dict[str, Any], entries: int) -> list[Finding]:
    name = "cnt_hop" if "cnt_hop" in raw else "hop_cnt" if "hop_cnt" in raw else None
    if name is None:
        return []
    value = count_value(raw[name])
    if value is None:
        return [_warning(name, f"not a number ({raw[name]!r}): ignored")]
    if value != entries:
        return [_warning(name, f"is {value} but procedure has {entries} entries (cnt_hop counts the END marker); "
                               "the procedure decides")]
    return []


def _places(raw: dict[str, Any], _suite: str) -> list[Finding]:
    return [_warning(k, f"not a string: used as {str(raw[k])!r}") for k in ("city", "flight", "shop")
            if raw.get(k) is not None and not isinstance(raw[k], str)]


_SCRIPT_FIELDS = {"click": ("target",), "hover": ("target",), "type": ("target", "text"), "press": ("key",),
                  "scroll": ("direction",), "goto": ("url",), "tab_focus": ("tab",), "stop": ("answer",)}


def _script(raw: dict[str, Any], _suite: str) -> list[Finding]:
    """The mmina extension ``reference_script`` (optional): well-formed oracle steps."""
    script = raw.get("reference_script")
    if script is None:
        return []
    if not isinstance(script, list) or not script:
        return [_error("reference_script", "must be a non-empty list of steps")]
    findings = []
    for index, step in enumerate(script):
        field = f"reference_script[{index}]"
        action = step.get("action") if isinstance(step, dict) else None
        if action not in {k.value for k in ActionKind}:
            findings.append(_error(field, f"unknown action {action!r}"))
            continue
        findings += [_error(field, f"{action} needs {name!r}") for name in _SCRIPT_FIELDS.get(action, ()) if name not in step]
        target = step.get("target")
        if target is not None and not (isinstance(target, dict) and {"role", "name"} <= set(target)):
            findings.append(_error(field, "target needs 'role' and 'name'"))
    return findings


CHECKS: tuple[Callable[[dict[str, Any], str], list[Finding]], ...] = (_intent, _start_url, _eval, _hops, _places,
                                                                      _script)


def load_checked_suite(path: str | Path | None = None, task_ids: list[str] | None = None) -> TaskSuite:
    """Load a suite only when no file has an error, so a task that cannot run is refused before a run
    starts; the suite carries the warnings."""
    root = resolve_suite_path(path)
    problems = check_path(root)
    bad = errors(problems)
    if bad:
        more = f" (and {len(bad) - 1} more; run `mmina tasks validate {root}`)" if len(bad) > 1 else ""
        raise TaskError(f"{bad[0]}{more}")
    return load_suite(path).select(task_ids).with_warnings(tuple(str(p) for p in problems))
