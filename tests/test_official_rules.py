"""``mmina_official`` against the official runner's own code.

The corpora of ``tests/data/official/differential`` were run through the runner's code
(shulin16/MMInA@9b0a707, ``run.py``'s ``test()`` and ``evaluation_harness``) by ``harness.py``
there, with only the browser, the agent and the judge replaced by the recordings; what it
logged is committed beside each corpus (``*.official.json``). These tests need no copy of
that code: they check the transplant against those committed outcomes, episode by episode
(PASS / FAIL / no result and its exception, hops credited, the logged numerator and
denominator), and the hand-made cases also against the outcome worked out by reading the code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmina.analysis.runner_log import log_totals
from mmina.evaluators import EpisodeView, get
from mmina.evaluators.base import EvaluatorError, StepView
from mmina.evaluators.official import (
    GO_BACK,
    GO_FORWARD,
    NEW_TAB,
    NONE,
    PAGE_CLOSE,
    RULE_SETS,
    TYPE,
    EarlyStop,
    OfficialAction,
    Thresholds,
    Trajectory,
    parse_official,
    run_task,
)
from mmina.store import Store
from mmina.tasks.task import task_from_dict, task_row
from tests.heavy import sized

DIFFERENTIAL = Path(__file__).parent / "data" / "official" / "differential"
COMPARED = ("outcome", "error", "cnt_ans", "numerator", "denominator")


def corpus(name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(trajectory, what the executed runner logged for it) pairs of one corpus."""
    trajectories = json.loads((DIFFERENTIAL / f"{name}.json").read_text())["trajectories"]
    official = json.loads((DIFFERENTIAL / f"{name}.official.json").read_text())["results"]
    return [(t, official[t["id"]]) for t in trajectories]


def transplant(trajectory: dict[str, Any]) -> dict[str, Any]:
    """The transplant's outcome for a corpus trajectory, in the harness's terms."""
    steps = trajectory["steps"]
    result = run_task(
        trajectory["task"],
        RULE_SETS[trajectory["domain"]],
        Trajectory(
            list(range(len(steps))),
            [s["url"] for s in steps],
            [s.get("action") for s in steps],
            trajectory.get("final_url"),
        ),
    )
    detail = result.detail(trajectory["domain"])
    return {
        "outcome": result.outcome,
        "error": result.error,
        "cnt_ans": detail["hops_credited"],
        "numerator": detail["numerator"],
        "denominator": detail["denominator"],
    }


HANDMADE = corpus("handmade")


@pytest.mark.parametrize("trajectory, official", HANDMADE, ids=[t["id"] for t, _ in HANDMADE])
def test_handmade_case_gives_what_the_runner_gave(
    trajectory: dict[str, Any], official: dict[str, Any]
) -> None:
    mine = transplant(trajectory)
    assert mine == {k: official[k] for k in COMPARED}, trajectory["why"]
    assert mine == trajectory["expected"] | {"cnt_ans": trajectory["expected"]["cnt_ans"]}, trajectory["why"]


def test_handmade_corpus_covers_every_rule_set_and_outcome() -> None:
    rule_sets = {RULE_SETS[t["domain"]] for t, _ in HANDMADE}
    outcomes = {(RULE_SETS[t["domain"]], o["outcome"]) for t, o in HANDMADE}
    assert rule_sets == {"2hop", "multihop", "singlehop"}
    assert {(r, o) for r in rule_sets for o in ("pass", "fail", "no_result")} <= outcomes


def _recorded() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return corpus("recorded") if (DIFFERENTIAL / "recorded.json").exists() else []


RECORDED = _recorded()


@pytest.mark.parametrize("trajectory, official", RECORDED, ids=[t["id"] for t, _ in RECORDED])
def test_recorded_episode_gives_what_the_runner_gave(
    trajectory: dict[str, Any], official: dict[str, Any]
) -> None:
    assert transplant(trajectory) == {k: official[k] for k in COMPARED}


def test_recorded_corpus_has_every_builtin_task_by_oracle_and_heuristic() -> None:
    from mmina.tasks.taskcheck import load_suite

    agents: dict[str, set[str]] = {}
    for trajectory, _ in RECORDED:
        agents.setdefault(trajectory["agent"], set()).add(trajectory["task_id"])
    builtin = {t.task_id for t in load_suite().tasks}
    assert builtin <= agents.get("oracle", set()) and builtin <= agents.get("heuristic", set())


# -- the rule set and the arguments ---------------------------------------------------------------


def _view(
    task_id: str,
    raw: dict[str, Any],
    urls: list[str],
    actions: list[str | None],
    final_url: str | None = None,
) -> EpisodeView:
    task = task_from_dict({"task_id": 1, "intent": "x", "start_url": urls[0] if urls else "", **raw}, task_id)
    steps = tuple(StepView(i, u, a) for i, (u, a) in enumerate(zip(urls, actions)))
    return EpisodeView("r", "e", task, {"final_url": final_url, "final_answer": None}, steps)


NORMAL = {
    "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["events", "tokyo"]}},
    "procedure": ["kiwix", "events", "end"],
    "city": "tokyo",
    "flight": "",
    "shop": "",
}


def test_the_folder_picks_the_rule_set_and_domain_forces_one() -> None:
    episode = _view(
        "normal/9",
        NORMAL,
        ["http://kiwix.test/viewer#w/A/Tokyo", "http://events.test/tokyo"],
        ["goto [http://events.test/tokyo]", "stop [http://events.test/tokyo]"],
    )
    task = next(s for s in get("mmina_official").score(episode) if s.level == "task")
    assert (task.verdict, task.detail["rule_set"], task.detail["numerator"], task.detail["denominator"]) == (
        "pass",
        "2hop",
        2,
        2,
    )
    forced = next(s for s in get("mmina_official", domain="multipro").score(episode) if s.level == "task")
    assert (forced.detail["rule_set"], forced.detail["denominator"], forced.detail["hops_credited"]) == (
        "multihop",
        3,
        2,
    )  # the kiwix page holds the city: hop 1; the events page: hop 2
    outside = _view("mine/1", NORMAL, ["http://x.test/"], ["stop [x]"])
    with pytest.raises(EvaluatorError, match="pass --arg domain=NAME"):
        get("mmina_official").score(outside)
    assert get("mmina_official", domain="normal").score(outside)[-1].detail["domain"] == "normal"


def test_hop_rows_are_the_logged_denominator_and_numerator() -> None:
    episode = _view(
        "compare/1",
        {**NORMAL, "procedure": ["kiwix", "events", "hotels", "end"]},
        ["http://kiwix.test/viewer#w/A/Tokyo", "http://events.test/tokyo"],
        ["goto [http://events.test/tokyo]", "stop [x]"],
    )
    scores = get("mmina_official").score(episode)
    assert [s.verdict for s in scores if s.level == "hop"] == ["pass", "pass", "fail", "fail"]
    assert scores[-1].verdict == "fail" and scores[-1].detail["credited_at"] == [0, 1]


def test_the_terminal_page_is_checked_and_unknown_is_said() -> None:
    urls, actions = (
        ["http://kiwix.test/viewer#w/A/Landing"] * 2,
        ["scroll [down]", "goto [http://events.test/tokyo]"],
    )
    reached = _view("normal/1", NORMAL, urls, actions, "http://events.test/tokyo")
    known = get("mmina_official", max_steps=2).score(reached)
    assert (known[-1].verdict, known[-1].detail["stop"]) == ("pass", "Early stop: Reach max steps 2")
    unknown = get("mmina_official", max_steps=2).score(_view("normal/1", NORMAL, urls, actions))
    assert (unknown[-1].verdict, unknown[-1].detail["final_state_unknown"]) == ("fail", True)


@pytest.mark.parametrize(
    "args", [{"domain": "full"}, {"max_steps": -1}, {"parsing_failure": "3"}, {"bogus": 1}]
)
def test_bad_arguments_are_refused(args: dict[str, Any]) -> None:
    with pytest.raises(EvaluatorError):
        get("mmina_official", **args)


def test_totals_are_the_runners_log() -> None:
    details = [
        {"outcome": "pass", "numerator": 2, "denominator": 3},
        {"outcome": "no_result", "numerator": 0, "denominator": 2},
        {"outcome": "fail", "numerator": 1, "denominator": 2},
    ]
    totals = log_totals(details)
    assert (totals["pass"], totals["fail"], totals["no_result"], totals["all_pass"], totals["all_all"]) == (
        1,
        1,
        1,
        3,
        7,
    )
    assert totals["task_sr"] == pytest.approx(1 / 3)


# -- properties over any input --------------------------------------------------------------------

ACTIONS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "click [3]",
            "click [4]",
            "type [3] [a] [press_enter_after=1]",
            "type [4] [b] [press_enter_after=0]",
            "scroll [down]",
            "scroll [up]",
            "go_back",
            "new_tab",
            "goto [http://a.test/]",
            "press [Enter]",
            "tab_focus [1]",
            "click [e1]",
            "hover [3]",
        ]
    ),
    st.text(max_size=12),
)


def equivalent(a: OfficialAction, b: OfficialAction) -> bool:
    """``is_equivalent`` (actions.py:278-324) for the actions an id-based agent can give: the
    same type, and for those with an argument the same element id, direction, key, tab or
    URL (``type`` compares the element id only, not the text)."""
    return a.kind == b.kind and (a.kind in (NONE, NEW_TAB, GO_BACK, GO_FORWARD, PAGE_CLOSE) or a.key == b.key)


def literal_early_stop(actions: list[OfficialAction], limits: Thresholds) -> str | None:
    """run.py:177-230 as written, over the whole list each time (the reference)."""
    if len(actions) >= limits.max_steps:
        return f"Reach max steps {limits.max_steps}"
    k = limits.parsing_failure
    last_k = actions[-k:]
    if len(last_k) >= k and all(a.kind == NONE for a in last_k):
        return f"Failed to parse actions for {k} times"
    k = limits.repeating_action
    last_k = actions[-k:]
    if not actions:
        return None
    last = actions[-1]
    if last.kind != TYPE:
        if len(last_k) >= k and all(equivalent(a, last) for a in last_k):
            return f"Same action for {k} times"
    elif sum(equivalent(a, last) for a in actions) >= k:
        return f"Same typing action for {k} times"
    return None


@settings(max_examples=sized(100, 300), deadline=None)
@given(st.lists(ACTIONS, max_size=12), st.integers(0, 6), st.integers(0, 4), st.integers(0, 4))
def test_incremental_early_stop_is_the_runners(
    texts: list[str | None], steps: int, parse: int, repeat: int
) -> None:
    limits = Thresholds(steps, parse, repeat)
    tracker, taken = EarlyStop(limits), []
    assert tracker.reason() == literal_early_stop(taken, limits)
    for text in texts:
        action = parse_official(text)
        taken.append(action)
        assert tracker.add(action) == tracker.reason() == literal_early_stop(taken, limits)


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
URLS = st.one_of(
    st.sampled_from(
        [
            "http://kiwix.test/viewer#w/A/Tokyo",
            "https://www.momondo.com/x/tyo",
            "http://localhost:7770/p/sku",
            "http://events.test/weekend/tokyo",
            "",
        ]
    ),
    st.text(max_size=20),
)


@settings(max_examples=sized(100, 300), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["task_id", "intent", "procedure", "city", "flight", "shop", "eval"]), JSONISH
    ),
    st.sampled_from(sorted(RULE_SETS)),
    st.lists(st.tuples(URLS, ACTIONS), max_size=8),
    st.one_of(st.none(), URLS),
)
def test_any_task_and_trajectory_gives_an_outcome(
    config: dict[str, Any], domain: str, steps: list[tuple[str, str | None]], final: str | None
) -> None:
    """Whatever the task file and the recording hold, the runner's outcome comes out (an
    exception the runner would raise is a ``no_result``), never an error of the evaluator."""
    result = run_task(
        config,
        RULE_SETS[domain],
        Trajectory(list(range(len(steps))), [u for u, _ in steps], [a for _, a in steps], final),
    )
    assert result.outcome in ("pass", "fail", "no_result", "unclear")
    assert (result.error is not None) == (result.outcome == "no_result")
    assert 0 <= result.state.numerator and 0 <= result.state.denominator
    json.dumps(result.detail(domain))


# -- a real store: rescore, then the report's runner log ------------------------------------------


def corpus_store(root: Path, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> Store:
    """The corpus trajectories as stored episodes (one run; task ``<domain>/<n>``), written by the
    store's batch writer; the terminal observation in ``episodes.final_url``."""
    from tests.store_helpers import T0, episode_row, run_row, step_row

    store = Store.open(root, create=True)
    tasks = [
        task_from_dict(t["task"] | {"intent": t["task"].get("intent", "x")}, f"{t['domain']}/{n}")
        for n, (t, _) in enumerate(pairs, start=1)
    ]
    store.begin_run("corpus", run_row(), [task_row(t) for t in tasks])
    batch = store.batch_writer("corpus")
    for n, ((trajectory, _), task) in enumerate(zip(pairs, tasks), start=1):
        steps = [
            step_row(i, None, url=s["url"], action=s.get("action")) for i, s in enumerate(trajectory["steps"])
        ]
        batch.add_episode(
            episode_row(
                task.task_id,
                len(steps),
                episode_id=f"ep-{n:03d}",
                final_url=trajectory["final_url"],
                started_at=T0,
            ),
            steps,
        )
    batch.commit()
    return store


SCORABLE = [(t, o) for t, o in HANDMADE if "task_id" in t["task"] and "intent" in t["task"]]
"""The hand-made cases a store can hold (mmina refuses a task without an intent; ids come from the store)."""


def invoke(*args: str) -> Any:
    from click.testing import CliRunner

    from mmina.cli import cli

    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def scored_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hand-made cases in a store, scored by ``mmina_official`` and ``hops``."""
    root = tmp_path_factory.mktemp("official") / "store"
    corpus_store(root, SCORABLE)
    for name in ("mmina_official", "hops"):
        result = invoke("rescore", "--store", str(root), "--evaluator", name)
        assert result.exit_code == 0, result.output
    return root


def runner_log(store: Path) -> list[dict[str, Any]]:
    result = invoke(
        "report",
        "--store",
        str(store),
        "--evaluator",
        "mmina_official",
        "--table",
        "runner_log",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["tables"]["runner_log"]


def test_report_prints_the_runners_log_beside_hops(scored_store: Path) -> None:
    rows = {r["rule_set"]: r for r in runner_log(scored_store)}
    for rule_set in ("multihop", "2hop", "singlehop"):
        logged = [o for t, o in SCORABLE if RULE_SETS[t["domain"]] == rule_set]
        row = rows[rule_set]
        assert (row["tasks"], row["pass"], row["no_result"]) == (
            len(logged),
            sum(o["outcome"] == "pass" for o in logged),
            sum(o["outcome"] == "no_result" for o in logged),
        )
        assert (row["all_pass"], row["all_all"]) == (
            sum(o["numerator"] for o in logged),
            sum(o["denominator"] for o in logged),
        )
        assert row["hops_scored"] == len(logged) and row["hops_task_sr"] is not None
    assert rows["all"]["tasks"] == len(SCORABLE) and rows["singlehop"]["all_pass"] == 0
    table = invoke("report", "--store", str(scored_store), "--evaluator", "mmina_official")
    assert table.exit_code == 0, table.output
    assert "official runner's log" in table.output and "all_pass/all_all" in table.output


def test_documented_sql_gives_the_runner_log(scored_store: Path) -> None:
    from mmina.store.sql import run_query
    from tests.test_report import assert_matches_sql, documented_sql

    query = run_query(Store.open(scored_store), documented_sql()["runner_log"])
    assert_matches_sql(runner_log(scored_store), [dict(zip(query.columns, row)) for row in query.rows])


# -- the official-shaped task set -----------------------------------------------------------------
def test_official_shaped_set_is_generated_and_every_page_is_served() -> None:
    from urllib.parse import parse_qs, urlsplit

    from mmina.fixtures.generate_official_tasks import TASKS_DIR, build
    from mmina.fixtures.generate_tasks import stale_files
    from mmina.fixtures.web.base import Request
    from mmina.fixtures.web.server import FixtureWeb
    from mmina.tasks.taskcheck import load_suite

    tasks = build()
    assert stale_files(tasks, TASKS_DIR) == [], "run python -m mmina.fixtures.generate_official_tasks"
    suite = load_suite("official")
    assert {t.suite for t in suite.tasks} == set(RULE_SETS) and len(suite.tasks) == len(tasks)
    web = FixtureWeb()
    for task in suite.tasks:
        for step in task.reference_script:
            url = urlsplit(step.get("url", ""))
            if step["action"] == "goto" and url.hostname != "kiwix.mmina.test":
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                assert (
                    web.dispatch(url.hostname, Request("GET", url.path or "/", query, {}, {})).status == 200
                ), step
        if task.suite in ("compare", "multi567", "multipro"):  # the conventions the runner's rules read
            assert task.original["procedure"][0] == "kiwix" and task.original["procedure"][-1] == "end"
            assert task.original["flight"] == task.original["flight"].lower() != ""
        if task.suite == "normal":
            assert task.reference_script[-1]["answer"] == task.reference_script[-2]["url"]  # the final URL


def test_the_oracle_passes_every_official_shaped_task_under_the_runners_code() -> None:
    oracle = [(t, o) for t, o in RECORDED if t["run_id"] == "oracle-official"]
    assert len(oracle) == 21 and all(o["outcome"] == "pass" for _, o in oracle), [
        (t["id"], o) for t, o in oracle if o["outcome"] != "pass"
    ]
