"""``mmina_official``: the official MMInA runner's scoring, transplanted rule by rule.

Source: github.com/shulin16/MMInA at commit ``9b0a707`` — ``run.py`` (the test loop
``test()``, lines 233-502, its ``early_stop``, lines 177-230, and ``is_domain_type``,
lines 565-571), ``evaluation_harness/evaluators.py`` (``evaluator_router`` and the
evaluators it builds) and ``browser_env/actions.py`` (how an action string becomes an
action, ``create_id_based_action``, lines 1528-1620, and ``is_equivalent``, lines 278-324).
Every rule below names the lines it comes from; the quirks are kept on purpose, because
the point of this evaluator is to give the numbers the runner gives. The clean evaluator is
``hops`` (docs/official-rules.md says where and why the two differ).

What the runner sees of an episode, and where it is in the store:

* the pages it checks: the URL of the first observation (after ``env.reset``), then the URL
  after every action it executes (``env.step`` returns ``observation["current_url"]``, the
  active page's ``page.url``, ``browser_env/processors.py:1020``). In the store those are
  the steps' ``url`` column, and, for the page after the last action, the episode's
  terminal observation (``episodes.final_url``, schema version 5);
* the actions: each step's ``action`` text, parsed as the runner's ``TeacherForcingAgent``
  parses an action string (``agent/agent.py:187-199``); a step without an action (the
  output did not parse) is the runner's ``NONE`` action (``agent/agent.py:304-306``);
* where the recording ends without a ``stop`` and the runner would not have stopped
  early by itself (an mmina budget other than the runner's, a browser error), the
  recorded agent has nothing more to do: the runner gets a ``stop`` with an empty answer.

Per episode the result is the runner's: ``pass`` / ``fail`` (its ``[Result] (PASS|FAIL)``
line), or ``no_result`` when the runner raises inside its ``try`` (run.py:264-497) and
logs ``[Unhandled Error] ...`` instead of a result line (stored with verdict ``fail`` and
the exception in the detail); the counter ``cnt_ans`` (hops credited), and what the task
adds to the logged ``[Result] all success rate: all_pass/all_all`` (run.py:498): the
numerator ``cnt_ans`` when line 429 was reached, the denominator ``cnt_cl`` when line 325
was. Scores that need the LLM judge (``fuzzy_match``) or the live page
(``program_html``) on a single-hop task are ``unclear`` here.

A hop-conditioned episode (``record --prefix-run``: a reference's first steps replayed, then
the agent) is scored as the browser went through it, prefix included: the runner has no
notion of a given prefix, and its code would credit the prefix's hops like any others.
Analysis leaves out the rows of the given hops (``episode_scores``), and the runner's log
figures leave conditioned episodes out (``mmina.analysis.runner_log``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from mmina.evaluators.base import (
    BuiltinEvaluator,
    EpisodeView,
    EvaluatorError,
    Score,
    ScoreRow,
    failure,
    task_result,
)
from mmina.tasks.task import Task

RULE_SETS = {
    "compare": "multihop",
    "multi567": "multihop",
    "multipro": "multihop",
    "normal": "2hop",
    "shopping": "singlehop",
    "wikipedia": "singlehop",
}
"""``is_domain_type`` (run.py:565-571): the runner's ``--domain`` picks one of three rule sets."""
DOMAINS = tuple(RULE_SETS)

# Action types of browser_env/actions.py:241-271 (ActionTypes) that the runner compares.
(
    NONE,
    SCROLL,
    KEY_PRESS,
    CLICK,
    TYPE,
    HOVER,
    PAGE_FOCUS,
    NEW_TAB,
    GO_BACK,
    GO_FORWARD,
    GOTO_URL,
    PAGE_CLOSE,
    STOP,
) = (0, 1, 2, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17)


class OfficialAction(NamedTuple):
    """An action as the runner's ``early_stop`` compares it: its type and the field
    ``is_equivalent`` looks at (actions.py:278-324), plus a stop's answer."""

    kind: int
    key: Any = None
    answer: str = ""


_NO_ARGUMENT = {"new_tab": NEW_TAB, "go_back": GO_BACK, "go_forward": GO_FORWARD, "close_tab": PAGE_CLOSE}
_PATTERNS = {  # actions.py:1536-1614, one regular expression per action name
    "click": (CLICK, re.compile(r"click ?\[(\d+)\]")),
    "hover": (HOVER, re.compile(r"hover ?\[(\d+)\]")),
    "type": (TYPE, re.compile(r"type ?\[(\d+)\] ?\[(.+)\] ?\[(\d+)\]")),
    "press": (KEY_PRESS, re.compile(r"press ?\[(.+)\]")),
    "scroll": (SCROLL, re.compile(r"scroll ?\[?(up|down)\]?")),
    "goto": (GOTO_URL, re.compile(r"goto ?\[(.+)\]")),
    "tab_focus": (PAGE_FOCUS, re.compile(r"tab_focus ?\[(\d+)\]")),
}
_STOP = re.compile(r"stop ?\[(.+)\]")
_PARSED: dict[str | None, OfficialAction] = {None: OfficialAction(NONE)}
"""Action text -> parsed action: the texts of a rescoring repeat (``scroll [down]``, ``go_back``)."""
PARSED_KEPT = 65_536
"""At most this many parsed texts are kept (typed texts and URLs rarely repeat)."""


def parse_official(text: str | None) -> OfficialAction:
    """``create_id_based_action`` (actions.py:1528-1620) on a stored action text; what it
    cannot parse is the ``NONE`` action the agent then returns (agent/agent.py:198-199)."""
    found = _PARSED.get(text)
    if found is None:
        if len(_PARSED) >= PARSED_KEPT:
            _PARSED.clear()
            _PARSED[None] = OfficialAction(NONE)
        found = _PARSED[text] = _parse(text) if text is not None else _PARSED[None]
    return found


def _parse(text: str) -> OfficialAction:
    action_str = text.strip()
    name = action_str.split("[")[0].strip() if "[" in action_str else (action_str.split() or [""])[0].strip()
    if name in _NO_ARGUMENT:
        return OfficialAction(_NO_ARGUMENT[name])
    if name == "stop":  # a stop without "[...]" has the empty answer (actions.py:1615-1619)
        match = _STOP.search(action_str)
        return OfficialAction(STOP, answer=match.group(1) if match else "")
    if name == "type" and not (action_str.endswith("[0]") or action_str.endswith("[1]")):
        action_str += " [1]"  # the default enter flag (actions.py:1550-1552)
    kind, pattern = _PATTERNS.get(name, (NONE, None))
    match = pattern.search(action_str) if pattern is not None else None
    if match is None:  # ActionParsingError (actions.py:1540, 1620)
        return OfficialAction(NONE)
    if kind == SCROLL:  # is_equivalent compares "up" in the direction (actions.py:285-288)
        return OfficialAction(kind, "up" if "up" in match.group(1) else "down")
    return OfficialAction(kind, int(match.group(1)) if kind == PAGE_FOCUS else match.group(1))


@dataclass(frozen=True)
class Thresholds:
    """The runner's ``--max_steps``, ``--parsing_failure_th``, ``--repeating_action_failure_th``
    (run.py:105, 120-131; defaults 30, 3, 3)."""

    max_steps: int = 30
    parsing_failure: int = 3
    repeating_action: int = 3


class EarlyStop:
    """``early_stop`` (run.py:177-230), kept up to date one action at a time (the runner
    re-reads the whole trajectory before every action; this gives the same answer in
    constant time): why the runner stops before asking the agent again, or None.

    The rules, in order: ``max_steps`` actions taken (num_steps = (len(trajectory) - 1) / 2,
    run.py:184-186); the last ``parsing_failure`` actions all ``NONE`` (run.py:192-201); the
    last ``repeating_action`` actions all equivalent to the last one, unless it is a ``type``
    (run.py:213-221); for a ``type``, that many ``type`` actions into the same element id
    *anywhere* in the episode (run.py:222-228). A threshold of 0 takes the runner's
    ``[-0:]``, the whole list.
    """

    def __init__(self, limits: Thresholds) -> None:
        self.limits = limits
        self.taken = 0
        self.failures = 0  # trailing run of NONE actions
        self.same = 0  # trailing run of actions equivalent to the last one
        self.last: OfficialAction | None = None
        self.typed: dict[Any, int] = {}  # type actions by element id
        self.plain = limits.parsing_failure > 0 and limits.repeating_action > 0  # no [-0:] slice to mimic

    def add(self, action: OfficialAction) -> str | None:
        """Take one more action; why the runner stops before the next one, or None. Two
        parsed actions other than a stop are equivalent exactly when they are equal (the
        argument-less ones carry no key), which makes the trailing runs cheap to keep."""
        self.taken += 1
        self.failures = self.failures + 1 if action.kind == NONE else 0
        self.same = self.same + 1 if action == self.last else 1
        self.last = action
        repeated = self.same
        if action.kind == TYPE:
            repeated = self.typed[action.key] = self.typed.get(action.key, 0) + 1
        limits = self.limits
        if (
            self.plain
            and self.taken < limits.max_steps
            and self.failures < limits.parsing_failure
            and repeated < limits.repeating_action
        ):
            return None  # the usual case, decided without building a message
        return self.reason()

    def reason(self) -> str | None:
        limits = self.limits
        if self.taken >= limits.max_steps:
            return f"Reach max steps {limits.max_steps}"
        k = limits.parsing_failure
        if _reaches(self.failures, k, self.taken):
            return f"Failed to parse actions for {k} times"
        if self.last is None:
            return None
        k = limits.repeating_action
        if self.last.kind != TYPE:
            if _reaches(self.same, k, self.taken):
                return f"Same action for {k} times"
        elif self.typed[self.last.key] >= k:
            return f"Same typing action for {k} times"
        return None


def _reaches(run: int, k: int, taken: int) -> bool:
    """Whether the last ``k`` actions (``[-k:]``) are all in a trailing run of ``run``: with
    ``k`` = 0 the runner's slice is the whole list, so the run must be every action taken."""
    return run == taken if k == 0 else run >= k


class RunnerError(Exception):
    """Stands for an exception the runner raises where this transplant cannot run the same
    code (beartype's parameter check of the judge); its ``name`` is the runner's class."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def describe(exc: BaseException) -> str:
    """The exception as the runner logs it: ``[Unhandled Error] {repr(e)}`` (run.py:490)."""
    if isinstance(exc, RunnerError):
        return f"{exc.name}({str(exc)!r})"
    return repr(exc)


@dataclass
class Counter:
    """The runner's per-task state: ``cnt_ans`` and ``flag`` (run.py:302, 327), the recorded
    step at which each increment happened, and what the task added to the logged hop rate:
    the denominator ``cnt_cl`` (run.py:325) and the numerator ``cnt_ans`` (run.py:429)."""

    cnt_ans: int = 0
    flag: bool = True
    credited_at: list[int] = field(default_factory=list)
    denominator: int = 0
    numerator: int = 0

    def credit(self, step: int, times: int = 1) -> None:
        self.cnt_ans += times
        self.credited_at += [step] * times


class TwoHop:
    """The ``2hop`` rules (``normal``): run.py:304-310 (setup) and 338-348 (each page)."""

    def __init__(self, config: Any) -> None:
        self.reference = config["eval"]["reference_answers"]["must_include"]  # run.py:309
        self.nxt = self.reference[0]  # run.py:310
        self.cnt_cl = 2  # run.py:306

    def check(self, state: Counter, current_url: str, step: int) -> None:
        """Hop 1: a non-kiwix page containing ``must_include[0]`` as written (not
        lower-cased), once (the flag); hop 2: every ``must_include`` item, lower-cased, in the
        page after hop 1 — both may come on the same page."""
        if "kiwix" not in current_url and self.nxt in current_url:
            if state.flag:
                state.credit(step)
                state.flag = False
        fg = True
        for item in self.reference:
            item = item.lower()
            if item not in current_url:
                fg = False
        if fg and state.cnt_ans == 1:
            state.credit(step)

    def passed(self, state: Counter, score: float | None) -> bool:
        return state.cnt_ans == 2  # run.py:467


class MultiHop:
    """The ``multihop`` rules (``compare``, ``multi567``, ``multipro``): run.py:311-319
    (setup) and 350-369 (each page)."""

    def __init__(self, config: Any) -> None:
        self.check_list = config["procedure"]  # run.py:315-318, in this order
        self.city = config["city"]
        self.flight = config["flight"]
        self.shop = config["shop"]
        self.cnt_cl = len(self.check_list)  # run.py:319: END counts in the denominator

    def check(self, state: Counter, current_url: str, step: int) -> None:
        """The head ``now_url`` is read once; under the flag, four independent checks each add
        one, all against that same head: leaving the wiki for the next keyword (which clears
        the flag: nothing is credited in this episode again), ``momondo`` with the ``flight``
        code, ``7770`` with the ``shop``, and the head keyword with the ``city`` (two words:
        both; three or more: ``ValueError`` from the unpacking). The procedure entries,
        ``city``, ``flight`` and ``shop`` are compared as written with the lower-cased URL."""
        check_list, city = self.check_list, self.city
        now_url = check_list[state.cnt_ans]  # run.py:351 (IndexError once past the end)
        if state.flag:
            if (
                "kiwix" not in current_url
                and current_url != None  # noqa: E711 - as written (run.py:353)
                and "kiwix" in now_url
                and check_list[state.cnt_ans + 1] in current_url
            ):
                state.credit(step)
                state.flag = False
            if "momondo" in current_url and "momondo" in now_url:
                if self.flight in current_url:
                    state.credit(step)
            if "7770" in current_url and "7770" in now_url:
                if self.shop in current_url:
                    state.credit(step)
            if now_url in current_url:
                if " " in city:
                    fro, en = city.split(" ")
                    if fro in current_url and en in current_url:
                        state.credit(step)
                elif city in current_url:
                    state.credit(step)

    def passed(self, state: Counter, score: float | None) -> bool:
        return self.check_list[state.cnt_ans] == "end"  # run.py:468 (IndexError past the end)


class SingleHop:
    """The ``singlehop`` rules (``shopping``, ``wikipedia``): no page check at all, one hop
    in the denominator (run.py:321-322), never one in the numerator; PASS is the task's
    evaluator score being 1 (run.py:466)."""

    cnt_cl = 1

    def __init__(self, config: Any) -> None:
        pass

    def check(self, state: Counter, current_url: str, step: int) -> None:
        pass

    def passed(self, state: Counter, score: float | None) -> bool:
        return score == 1


class RuleSet(Protocol):
    """What the three rule sets have in common (the runner's per-domain branches)."""

    cnt_cl: int

    def check(self, state: Counter, current_url: str, step: int) -> None: ...

    def passed(self, state: Counter, score: float | None) -> bool: ...


RULES: dict[str, Callable[[Any], RuleSet]] = {"2hop": TwoHop, "multihop": MultiHop, "singlehop": SingleHop}


class Pending(Exception):
    """The task's evaluator needs what a stored episode cannot give (the judge, the page)."""


class Trajectory(NamedTuple):
    """What the runner reads of one episode (see the module docstring): the stored steps'
    indexes, URLs and action texts in order, and the page after the last action (None when
    the store does not know it)."""

    step_indexes: Sequence[int]
    urls: Sequence[str]
    actions: Sequence[str | None]
    final_url: str | None


@dataclass
class Outcome:
    """What the runner makes of one episode."""

    rule_set: str
    outcome: str = "no_result"
    error: str | None = None
    state: Counter = field(default_factory=Counter)
    stop: str = ""
    score: float | None = None
    pending: str | None = None
    pages_checked: int = 0
    final_state_unknown: bool = False
    final_page: str | None = None
    started: bool = False
    """Whether the runner got past the task's header to ``cnt_ans = 0`` (run.py:302)."""

    def detail(self, domain: str) -> dict[str, Any]:
        state = self.state
        return {
            "outcome": self.outcome,
            "rule_set": self.rule_set,
            "domain": domain,
            "error": self.error,
            "hops_credited": state.cnt_ans if self.started else None,
            "credited_at": state.credited_at,
            "numerator": state.numerator,
            "denominator": state.denominator,
            "stop": self.stop,
            "score": self.score,
            "pending": self.pending,
            "pages_checked": self.pages_checked,
            "final_page": self.final_page,
            "final_state_unknown": self.final_state_unknown,
        }


def run_task(
    config: Any, rule_set: str, trajectory: Trajectory, limits: Thresholds = Thresholds()
) -> Outcome:
    """One pass of the runner's loop body (run.py:264-497) over a recorded episode."""
    result = Outcome(rule_set)
    try:
        _run(config, rule_set, trajectory, limits, result)
    except Pending as pending:
        result.outcome, result.pending = "unclear", str(pending)
    except Exception as exc:  # the runner's `except Exception` (run.py:489-497): no result line
        result.outcome, result.error = "no_result", describe(exc)
    return result


def _run(config: Any, rule_set: str, trajectory: Trajectory, limits: Thresholds, result: Outcome) -> None:
    _header(config, trajectory)
    result.started = True
    rules = RULES[rule_set](config)
    state = result.state
    state.denominator = rules.cnt_cl  # run.py:325: all_all += cnt_cl
    answer, page = _loop(rules, trajectory, limits, result)
    state.numerator = state.cnt_ans  # run.py:429: all_pass += cnt_ans
    result.final_page = page
    result.score = task_score(config, answer, page, rule_set == "singlehop")  # run.py:434-440
    result.outcome = "pass" if rules.passed(state, result.score) else "fail"  # run.py:465-477


def _header(config: Any, trajectory: Trajectory) -> None:
    """What the runner reads before any rule: ``task_id`` (``RenderHelper``,
    browser_env/helper_functions.py:122-128), then ``intent`` and ``task_id`` (run.py:271-274),
    then it opens the start page (``env.reset``, run.py:286): an episode without a single
    observation is one whose start page could not be opened, and the runner raises there."""
    config["task_id"]
    config["intent"]
    if not trajectory.urls:
        raise RunnerError("Error", "the start page could not be opened (the episode has no observation)")


def _loop(rules: Any, trajectory: Trajectory, limits: Thresholds, result: Outcome) -> tuple[str, str | None]:
    """The ``while True`` loop (run.py:333-428): check the page, stop early or take the
    agent's next action; the stop's answer and the page the runner ends on. The recorded
    steps give the pages and actions; the terminal observation the page after the last one."""
    state, check, taken = result.state, rules.check, EarlyStop(limits)
    stopped = taken.reason()  # before any action (a threshold of 0 stops at once)
    page = None
    for page, text, step in zip(trajectory.urls, trajectory.actions, trajectory.step_indexes):
        result.pages_checked += 1
        check(state, page.lower(), step)  # run.py:334: current_url.lower()
        if stopped is not None:  # run.py:371-376
            return _early(result, stopped), page
        action = parse_official(text)
        if action.kind == STOP:  # run.py:417-418
            result.stop = action.answer
            return action.answer, page
        stopped = taken.add(action)
    page = _terminal_page(trajectory, result)
    if page is not None:
        check(state, page.lower(), trajectory.step_indexes[-1] + 1 if trajectory.step_indexes else 0)
    if stopped is not None:
        return _early(result, stopped), page
    return "", page  # the recording has no action left: the recorded agent stops, answer empty


def _early(result: Outcome, reason: str) -> str:
    """The answer of the runner's early stop: its message (run.py:376)."""
    result.stop = f"Early stop: {reason}"
    return result.stop


def _terminal_page(trajectory: Trajectory, result: Outcome) -> str | None:
    """The page after the last recorded action (the terminal observation); None when unknown."""
    if trajectory.final_url is None:
        result.final_state_unknown = True
        return None
    result.pages_checked += 1
    return trajectory.final_url


def task_score(config: Any, answer: str, page_url: str | None, needed: bool) -> float | None:
    """``evaluator_router(config_file)`` and the evaluator's call (evaluators.py:417-466):
    every evaluator is built first (an unknown type raises ``ValueError``; ``trip_match``
    raises ``NotImplementedError`` in ``EvaluatorPartial.__init__``, evaluators.py:299-301),
    then called in order, the scores multiplied. A score that needs the judge or the page is
    :class:`Pending` when the task's PASS depends on it (``needed``), else ignored."""
    eval_types = config["eval"]["eval_types"]
    evaluators = []
    for eval_type in eval_types:
        match eval_type:
            case "string_match":
                evaluators.append(string_score)
            case "url_match":
                evaluators.append(url_score)
            case "program_html":
                evaluators.append(page_score)
            case "trip_match":
                raise NotImplementedError
            case _:
                raise ValueError(f"eval_type {eval_type} is not supported")
    score, pending = 1.0, []
    for evaluator in evaluators:
        value = evaluator(config, answer, page_url)
        if value is None:
            pending.append(PENDING[evaluator])
        else:
            score *= value
    if pending and score != 0 and needed:
        raise Pending(" and ".join(dict.fromkeys(pending)))
    return None if pending and score != 0 else score


def _clean_lower(answer: str) -> str:
    """``StringEvaluator``'s ``clean_answer`` (evaluators.py:120-125): one pair of quotes
    off, lower-cased; whitespace is *not* stripped."""
    if answer.startswith("'") and answer.endswith("'"):
        answer = answer[1:-1]
    elif answer.startswith('"') and answer.endswith('"'):
        answer = answer[1:-1]
    return answer.lower()


def string_score(config: Any, answer: str, page_url: str | None) -> float | None:
    """``StringEvaluator`` (evaluators.py:108-151) on the stop's answer (an early stop's
    answer is its message, e.g. ``Early stop: Reach max steps 30``); None when a
    ``fuzzy_match`` reference leaves the score to the judge."""
    pred = _clean_lower(answer).lower()
    score, judged = 1.0, False
    for approach, value in config["eval"]["reference_answers"].items():
        match approach:
            case "exact_match":
                assert isinstance(value, str)
                score = score * (pred == _clean_lower(value))
            case "must_include":
                assert isinstance(value, list)
                for must_value in value:
                    must_value = _clean_lower(must_value)
                    score = score * (must_value in pred)
            case "fuzzy_match":
                intent = config["intent"]
                assert isinstance(value, list)
                for reference in value:
                    _judge_arguments(pred, reference, intent)
                    judged = True
    return None if judged else score


def _judge_arguments(pred: str, reference: Any, question: Any) -> None:
    """``llm_fuzzy_match`` is ``@beartype``-checked (helper_functions.py:166-167): a reference
    or intent that is not text raises before any request."""
    for name, value in (("reference", reference), ("question", question)):
        if not isinstance(value, str):
            raise RunnerError(
                "BeartypeCallHintParamViolation",
                f"llm_fuzzy_match() parameter {name}={value!r} violates type hint <class 'str'>",
            )


def url_score(config: Any, answer: str, page_url: str | None) -> float | None:
    """``URLExactEvaluator`` (evaluators.py:181-214) on the page the runner ends on: one
    trailing ``/`` off, case kept; ``url_note`` ``EXACT`` (default) or ``GOLD in PRED``."""
    if page_url is None:
        return None
    pred = _clean_url(page_url)
    ref_urls = [_clean_url(url) for url in config["eval"]["reference_url"].split(" |OR| ")]
    matching_rule = config["eval"].get("url_note", "EXACT")
    if matching_rule == "EXACT":
        return 1.0 if pred in ref_urls else 0.0
    if matching_rule == "GOLD in PRED":
        return 1.0 if any(ref in pred for ref in ref_urls) else 0.0
    raise ValueError(f"Unknown matching rule: {matching_rule}")


def _clean_url(url: Any) -> str:
    url = str(url)
    return url[:-1] if url.endswith("/") else url


def page_score(config: Any, answer: str, page_url: str | None) -> float | None:
    """``HTMLContentExactEvaluator`` (evaluators.py:221-287) reads the live page: not here."""
    return None


PENDING = {
    string_score: "the LLM judge (fuzzy_match)",
    url_score: "the page after the last action (unknown in this store)",
    page_score: "the live page (program_html)",
}
"""Why an evaluator's score cannot be computed from the store, when it cannot."""


def rule_set_of(task: Task, domain: str) -> tuple[str, str]:
    """(domain, rule set) of a task: the folder it is in (the runner's ``--domain``), or the
    one forced by the evaluator's ``domain`` argument."""
    chosen = task.suite if domain == "auto" else domain
    if chosen not in RULE_SETS:
        raise EvaluatorError(
            f"task {task.task_id} is not in one of the runner's domain folders "
            f"({', '.join(DOMAINS)}): pass --arg domain=NAME to score it with that domain's rules"
        )
    return chosen, RULE_SETS[chosen]


class MminaOfficial(BuiltinEvaluator):
    """The official runner's verdicts (see the module docstring): one task row (verdict
    ``pass``/``fail``, ``fail`` for no result, ``unclear`` when the judge or the page
    decides), and one hop row per unit the runner adds to its logged hop-rate denominator,
    the first ``numerator`` of them passed."""

    name = "mmina_official"
    version = "2"
    ARGS = {"domain": "auto", "max_steps": 30, "parsing_failure": 3, "repeating_action": 3}
    CHOICES = {"domain": ("auto", *DOMAINS)}
    step_fields = ("step_index", "url", "action")
    episode_fields = ("final_url",)

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        for key in ("max_steps", "parsing_failure", "repeating_action"):
            if not isinstance(self.args[key], int) or isinstance(self.args[key], bool) or self.args[key] < 0:
                raise EvaluatorError(
                    f"evaluator {self.name}: {key} must be a whole number, not {self.args[key]!r}"
                )
        self.limits = Thresholds(
            self.args["max_steps"], self.args["parsing_failure"], self.args["repeating_action"]
        )

    def rows(self, task: Task, trajectory: Trajectory) -> list[ScoreRow]:
        domain, rule_set = rule_set_of(task, self.args["domain"])
        result = run_task(task.original, rule_set, trajectory, self.limits)
        return official_rows(result, domain)

    def score(self, episode: EpisodeView) -> list[Score]:
        steps = episode.steps
        trajectory = Trajectory(
            [s.step_index for s in steps],
            [s.url for s in steps],
            [s.action for s in steps],
            episode.episode.get("final_url"),
        )
        return [Score(*row) for row in self.rows(episode.task, trajectory)]

    def score_batch(self, batch: Any, out: Any) -> None:
        columns, offsets = batch.steps.columns, batch.steps.offsets
        indexes, urls, actions = columns["step_index"], columns["url"], columns["action"]
        finals = batch.episodes.column("final_url").to_pylist()
        for position, task in enumerate(batch.tasks):
            start, end = offsets[position], offsets[position + 1]
            try:
                rows = self.rows(
                    task,
                    Trajectory(indexes[start:end], urls[start:end], actions[start:end], finals[position]),
                )
            except Exception as exc:  # as in rescoring one episode: that episode is unscored
                out.fail(position, failure(exc))
                continue
            out.add(position, rows)


VERDICT = {"pass": "pass", "fail": "fail", "no_result": "fail", "unclear": "unclear"}


def official_rows(result: Outcome, domain: str) -> list[ScoreRow]:
    """One hop row per unit the runner adds to its logged denominator, the first ``numerator``
    passed (with the step whose page credited it), then the task row with the whole detail."""
    state = result.state
    hops = [
        ScoreRow(
            verdict="pass" if i < state.numerator else "fail",
            value=float(i < state.numerator),
            level="hop",
            hop_index=i,
            detail={"completed_step": state.credited_at[i] if i < state.numerator else None},
        )
        for i in range(state.denominator)
    ]
    detail = result.detail(domain)
    value = 1.0 if result.outcome == "pass" else 0.0
    return [*hops, task_result(VERDICT[result.outcome], detail, value)]
