"""Hop-conditioned evaluation: the hop queue starting at hop K, the prefix plan, the agents' side,
the command line and the ``conditioned_hops`` table.

The queue and the table are pure (no browser); the plan reads a really recorded store; the
``openai`` agent's prompt is checked on a real conditioned episode against the local
OpenAI-compatible server. The hand-over in the browser is in test_conditioned_handover.py.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mmina.agents.heuristic import HeuristicAgent
from mmina.agents.llm import OpenAIAgent
from mmina.agents.oracle import OracleAgent
from mmina.agents.protocol import Handover
from mmina.agents.settings import AgentSettings
from mmina.analysis.data import Episode, HopVerdict
from mmina.analysis.tables import conditioned_hops, hop_positions
from mmina.cli import cli
from mmina.cli.record import _at_hop
from mmina.errors import StoreError
from mmina.evaluators.base import Trace
from mmina.evaluators.hops import Hops
from mmina.executors.interface import Layout
from mmina.observations.observation import Observation, Tab
from mmina.recorder.recording import RecordConfig, RunSummary
from mmina.replayer.conditioned import record_conditioned
from mmina.replayer.fidelity import StepView
from mmina.replayer.handover import PrefixCheck, check_prefix
from mmina.replayer.prefixes import Prefix, PrefixSpec, plan_prefixes
from mmina.replayer.source import Source
from mmina.stats import wilson
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.task import HopTracker, first_agent_step, task_from_dict
from mmina.tasks.taskcheck import load_suite
from tests.fake_openai import FakeOpenAI, last_user_text
from tests.heavy import sized

THREE = task_from_dict({"intent": "x", "procedure": ["kiwix", "shop", "flight", "end"]}, "t/3")
SUITE = load_suite()


# -- the live queue ---------------------------------------------------------------------------


def test_given_hops_complete_at_the_reference_steps_whatever_the_url() -> None:
    tracker = HopTracker(THREE, given=(2, 5), prefix_steps=5)
    assert [tracker.observe("http://nowhere.test/", i) for i in range(5)] == [
        False,
        False,
        True,
        False,
        False,
    ]
    assert tracker.observe("http://flights.test/", 5) and tracker.completed_at == [2, 5]  # hop 2 given at 5
    assert not tracker.observe("http://flights.test/x", 5)  # one hop per step: hop 3 not at the same step
    assert tracker.observe("http://flights.test/x", 6) and tracker.done and tracker.completed_at == [2, 5, 6]


def test_the_agents_hop_cannot_complete_on_a_prefix_page() -> None:
    tracker = HopTracker(THREE, given=(0,), prefix_steps=4)  # --at-step 4: hop 1 given at step 0
    assert tracker.observe("http://wiki.test/", 0) and tracker.current == 1
    assert not any(tracker.observe("http://shop.test/", i) for i in (1, 2, 3))  # the prefix's steps
    assert tracker.observe("http://shop.test/", 4) and tracker.completed_at == [0, 4]
    assert first_agent_step(4, (0,)) == 4 and first_agent_step(4, (4,)) == 5 and first_agent_step(0, ()) == 0


# -- the verdicts -------------------------------------------------------------------------------


def _trace(urls: list[str], given: tuple[int, ...] = (), prefix: int = 0, answer: str | None = None) -> Trace:
    return Trace(
        task=THREE,
        final_answer=answer,
        step_indexes=list(range(len(urls))),
        urls=urls,
        terminal_url=None,
        given=given,
        prefix_steps=prefix,
    )


def test_hops_writes_rows_only_for_the_agents_hops() -> None:
    rows = Hops().rows(_trace(["w", "kiwix", "shop", "flight"], given=(1,), prefix=1))
    hops = [(r.hop_index, r.verdict, r.detail["completed_step"]) for r in rows if r.level == "hop"]
    assert hops == [(1, "pass", 2), (2, "pass", 3)]
    task = rows[-1]
    assert (task.verdict, task.value, task.detail["hops_given"], task.detail["given_hop_steps"]) == (
        "pass",
        1.0,
        1,
        [1],
    )


def test_a_conditioned_episode_fails_from_where_the_agent_failed() -> None:
    rows = Hops().rows(_trace(["w", "kiwix", "nowhere"], given=(1,), prefix=1))
    task = rows[-1]
    assert (task.verdict, task.value, task.detail["first_failed_hop"]) == ("fail", 0.0, 2)  # hop 2, 1-based
    assert [(r.hop_index, r.verdict) for r in rows[:-1]] == [(1, "fail"), (2, "fail")]


def test_a_free_running_episode_is_scored_as_before() -> None:
    rows = Hops().rows(_trace(["kiwix", "shop", "x", "flight"]))
    assert [r.hop_index for r in rows[:-1]] == [0, 1, 2] and rows[-1].value == 1.0
    assert "hops_given" not in rows[-1].detail


@settings(max_examples=sized(100, 300), deadline=None)
@given(
    urls=st.lists(st.sampled_from(["kiwix", "shop", "flight", "other"]), min_size=1, max_size=12),
    start=st.integers(0, 2),
    data=st.data(),
)
def test_no_hop_is_credited_before_the_agent_could_act(
    urls: list[str], start: int, data: st.DataObject
) -> None:
    prefix = data.draw(st.integers(0, len(urls)))
    given_steps = (
        tuple(
            sorted(data.draw(st.lists(st.integers(0, prefix), min_size=start, max_size=start, unique=True)))
        )
        if start <= prefix + 1
        else ()
    )
    rows = Hops().rows(_trace(urls, given_steps, prefix))
    hops = [r for r in rows if r.level == "hop"]
    assert [r.hop_index for r in hops] == list(range(len(given_steps), 3))
    opens = first_agent_step(prefix, given_steps)
    assert all(r.detail["completed_step"] is None or r.detail["completed_step"] >= opens for r in hops)
    assert 0.0 <= rows[-1].value <= 1.0 and rows[-1].detail["hops_completed"] == sum(
        r.verdict == "pass" for r in hops
    )


# -- the agents ---------------------------------------------------------------------------------


def _observation() -> Observation:
    return Observation(
        step_index=3,
        url="http://wiki.mmina.test/kiwix/A/Solaria",
        title="Solaria",
        tabs=[Tab("http://wiki.mmina.test/kiwix/A/Solaria", "Solaria")],
        active_tab=0,
        tree_text='[1] heading "Solaria"',
        intent="x",
    )


@pytest.mark.parametrize("shown", [True, False])
def test_the_openai_agent_lists_the_prefix_as_its_previous_actions_unless_hidden(shown: bool) -> None:
    agent = OpenAIAgent(AgentSettings(model="m"), client=None)
    agent.reset(THREE)
    agent.take_over(
        Handover(
            1,
            ("type [5] [Solaria] [press_enter_after=1]", "click [9]", "not an action"),
            ("http://a/", "http://b/", "http://c/"),
            shown,
        )
    )
    step = agent.messages(_observation())[-1]["content"]
    listed = (
        "PREVIOUS ACTIONS:\n1. type [5] [Solaria] [press_enter_after=1]\n2. click [9]\n"
        "3. (a reply without a valid action)"
    )
    assert step.endswith(listed) if shown else step.endswith("PREVIOUS ACTIONS:\nNone")


def test_the_oracle_and_the_heuristic_go_on_from_the_hand_over() -> None:
    task = SUITE.select(["multi567/1"]).tasks[0]
    oracle = OracleAgent()
    oracle.reset(task)
    oracle.take_over(Handover(1, ("a", "b")))
    assert oracle.act(_observation()).output.startswith("goto [http://video.mmina.test/]")
    heuristic = HeuristicAgent()
    heuristic.reset(task)
    heuristic.take_over(Handover(3))
    assert heuristic.act(_observation()).output == "goto [http://flights.mmina.test/]"


# -- the table ----------------------------------------------------------------------------------


def _episode(
    task: str,
    n_hops: int,
    passed: list[bool],
    start: int | None = None,
    faithful: bool | None = None,
    agent: str = "heuristic",
) -> Episode:
    first = start or 0
    hops = tuple(HopVerdict(first + i, ok, None) for i, ok in enumerate(passed))
    return Episode(
        run_id="run",
        episode_id=f"{task}-{start}",
        task_id=task,
        n_hops=n_hops,
        bucket="2-4",
        verdict="fail",
        passed=all(passed),
        hops_passed=sum(passed),
        hops_total=len(passed),
        first_failed_hop=None,
        status="completed",
        stop_reason="stop",
        final_answer=None,
        n_steps=5,
        prompt_tokens=0,
        completion_tokens=0,
        cost_usd=0.0,
        hops=hops,
        hops_given=start,
        prefix_faithful=faithful,
        agent=agent,
    )


def test_conditioned_hops_sets_the_given_prefix_rate_beside_table_3() -> None:
    free = [
        _episode("a", 3, [True, False, False]),
        _episode("b", 3, [False, False, False]),
        _episode("c", 3, [True, True, False]),
    ]
    conditioned = [
        _episode("a", 3, [True, False], start=1, faithful=True),
        _episode("b", 3, [True, True], start=1, faithful=True),
        _episode("c", 3, [False, True], start=1, faithful=True),
        _episode("a", 3, [True], start=2, faithful=False),
        _episode("b", 3, [False], start=2, faithful=True),
        _episode("x", 3, [True], start=2, faithful=True, agent="oracle"),
    ]
    table = {(r["agent"], r["hop"]): r for r in conditioned_hops(conditioned, free).records()}
    hop2 = table[("heuristic", 2)]
    assert (hop2["episodes"], hop2["passed"], hop2["sr"]) == (3, 2, 2 / 3)
    assert (hop2["sr_lo"], hop2["sr_hi"]) == pytest.approx(wilson(2, 3))
    table3 = {r["hop"]: r for r in hop_positions(free).records()}
    assert (hop2["free_tasks"], hop2["free_passed"], hop2["free_sr"]) == (3, 1, 1 / 3)
    assert hop2["free_conditional_sr"] == table3[2]["conditional_sr"] == 0.5
    assert hop2["gap"] == pytest.approx(2 / 3 - 1 / 3)
    hop3 = table[("heuristic", 3)]
    assert (hop3["episodes"], hop3["passed"], hop3["left_out"], hop3["free_sr"]) == (1, 0, 1, 0.0)
    assert table[("oracle", 3)]["free_tasks"] is None and table[("oracle", 3)]["gap"] is None


def test_table_3_counts_a_conditioned_start_hop_as_reached() -> None:
    rows = {r["hop"]: r for r in hop_positions([_episode("a", 3, [True, False], start=1)]).records()}
    assert (rows[2]["reached"], rows[2]["passed_after_previous"], rows[3]["reached"]) == (1, 1, 1)


# -- the plan, on a recorded reference ------------------------------------------------------------


def test_the_plan_hands_over_where_the_verdicts_say_and_skips_what_it_cannot(
    recorded: tuple[Path, RunSummary],
) -> None:
    store, summary = Store.open(recorded[0]), recorded[1]
    task = SUITE.select(["normal/1"]).tasks[0]
    prefixes, skipped = plan_prefixes(
        store, PrefixSpec(summary.run_id, every_hop=True), {task.task_id: task}, 30
    )
    assert [(p.start_hop, p.steps, p.given) for p in prefixes] == [(0, 0, ()), (1, 0, (0,))]
    (at_step,), none = plan_prefixes(store, PrefixSpec(summary.run_id, step=2), {task.task_id: task}, 30)
    assert (at_step.start_hop, at_step.steps, at_step.actions[0].startswith("type ["), none) == (
        1,
        2,
        True,
        [],
    )
    _, skipped = plan_prefixes(store, PrefixSpec(summary.run_id, step=2), {task.task_id: task}, 2)
    assert "no step of the --max-steps 2 budget" in skipped[0].reason
    _, skipped = plan_prefixes(store, PrefixSpec(summary.run_id, step=99), {task.task_id: task}, 300)
    assert "has only 6 step(s)" in skipped[0].reason


def test_a_reference_without_verdicts_gives_no_prefix(recorded_copy: Path) -> None:
    shutil.rmtree(recorded_copy / "scores")
    store = Store.open(recorded_copy)
    (run_id,) = store.run_ids()
    task = SUITE.select(["normal/1"]).tasks[0]
    prefixes, skipped = plan_prefixes(store, PrefixSpec(run_id, hops=(2,)), {task.task_id: task}, 30)
    assert prefixes == [] and f"mmina rescore --evaluator hops --run {run_id}" in skipped[0].reason


def test_bad_specs_are_refused() -> None:
    for spec in ({}, {"hops": (1,), "step": 2}, {"hops": (0,)}, {"step": -1}):
        with pytest.raises(StoreError):
            PrefixSpec("r", **spec)


# -- the command line ---------------------------------------------------------------------------


@settings(max_examples=sized(100, 300), deadline=None)
@given(st.text(max_size=20))
def test_at_hop_reads_hops_from_1_or_all_and_refuses_the_rest(text: str) -> None:
    import click

    try:
        value = _at_hop(None, None, text)  # type: ignore[arg-type]
    except click.BadParameter:
        return
    assert value == "all" or (
        isinstance(value, tuple) and value and all(isinstance(k, int) and k >= 1 for k in value)
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--at-hop", "2"], "--at-hop, --at-step and --hide-prefix go with --prefix-run"),
        (["--prefix-run", "r"], "needs where to hand over"),
        (["--prefix-run", "r", "--at-hop", "1", "--at-step", "2"], "needs where to hand over"),
        (["--prefix-run", "r", "--at-hop", "0"], "hops are counted from 1"),
        (["--prefix-run", "nope", "--at-hop", "all"], "no run 'nope'"),
    ],
)
def test_bad_command_lines_are_one_line_and_write_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(cli, ["record", "--store", str(tmp_path / "s"), *args])
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "s").exists()


def test_tasks_and_a_free_running_run_cannot_be_resumed_as_conditioned(recorded_copy: Path) -> None:
    store = Store.open(recorded_copy)
    (run_id,) = store.run_ids()
    with pytest.raises(StoreError, match="not --tasks"):
        record_conditioned(store, RecordConfig(tasks="normal"), PrefixSpec(run_id, hops=(1,)))
    with pytest.raises(StoreError, match="is not a hop-conditioned run"):
        record_conditioned(store, RecordConfig(run_id=run_id, resume=True), PrefixSpec(run_id, hops=(1,)))


# -- the openai agent taking over, with memory, against the local server ------------------------------


def test_the_openai_agent_takes_over_with_the_prefix_in_its_prompt_and_its_memory(
    recorded_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test-key")
    store = Store.open(recorded_copy)
    (reference,) = store.run_ids()
    with FakeOpenAI() as server:
        settings_ = AgentSettings(model="fake-model", base_url=server.url, max_retries=1, memory=1)
        summary = record_conditioned(
            store,
            RecordConfig(agent="openai", agent_settings=settings_, run_id="llm"),
            PrefixSpec(reference, step=2),
        )
    (episode,) = summary.episodes
    assert (episode.prefix.steps, episode.check.faithful, episode.result.verdict) == (2, True, "pass")
    first = server.chat_requests[0]
    actions = [
        r[0]
        for r in run_query(
            store, f"select action from steps where run_id = '{reference}' order by step_index limit 2"
        ).rows
    ]
    assert last_user_text(first).endswith(f"PREVIOUS ACTIONS:\n1. {actions[0]}\n2. {actions[1]}")
    assert "Earlier trajectories of similar tasks" in first["messages"][0]["content"]
    assert len(server.chat_requests) == episode.result.n_steps - 2  # no model call for the prefix's steps
    stored = run_query(
        store,
        "select step_index, model_input is not null from steps where run_id = 'llm' order by step_index",
    ).rows
    assert [has for _, has in stored] == [False, False] + [True] * (len(stored) - 2)


# -- results do not depend on how many episodes are in flight ---------------------------------


def _outcomes(store: Store, run_id: str) -> dict[int, tuple]:
    rows = run_query(
        store,
        f"""select e.hops_given, e.prefix_steps, e.prefix_faithful, s.verdict, s.hops_passed,
                                       e.n_steps, e.final_answer,
                                       (select list(action order by step_index) from steps t
                                        where t.episode_id = e.episode_id) as actions
                                from episodes e join episode_scores s on s.episode_id = e.episode_id
                                where e.run_id = '{run_id}' and s.evaluator = 'hops'""",
    ).rows
    return {row[0]: row[1:] for row in rows}


def test_conditioned_results_do_not_depend_on_concurrency(recorded_copy: Path) -> None:
    store = Store.open(recorded_copy)
    (reference,) = store.run_ids()
    runs = {}
    for concurrency in (1, 2):
        config = RecordConfig(
            agent="heuristic", run_id=f"c{concurrency}", layout=Layout(concurrency=concurrency)
        )
        summary = record_conditioned(store, config, PrefixSpec(reference, every_hop=True))
        assert summary.prefix_fidelity == 1.0 and len(summary.episodes) == 2
        runs[concurrency] = _outcomes(store, f"c{concurrency}")
    assert runs[1] == runs[2] and sorted(runs[1]) == [0, 1]


def test_the_command_line_records_resumes_and_reports_a_conditioned_run(recorded_copy: Path) -> None:
    store = Store.open(recorded_copy)
    (reference,) = store.run_ids()
    base = [
        "record",
        "--store",
        str(recorded_copy),
        "--agent",
        "heuristic",
        "--prefix-run",
        reference,
        "--run-id",
        "cli",
        "--format",
        "json",
    ]
    first = CliRunner().invoke(cli, [*base, "--at-hop", "2"])
    assert first.exit_code == 0, first.output
    data = json.loads(first.output[first.output.index("{") :])
    (episode,) = data["episodes"]
    assert (episode["hops_given"], episode["prefix"]["faithful"], data["prefix_fidelity"]) == (1, True, 1.0)
    assert [(r["hop"], r["episodes"]) for r in data["conditioned_hops"]] == [(2, 1)]
    again = CliRunner().invoke(cli, [*base, "--at-hop", "all", "--resume"])
    assert again.exit_code == 0, again.output
    data = json.loads(again.output[again.output.index("{") :])
    assert [e["hops_given"] for e in data["episodes"]] == [0] and data["skipped"] == ["normal/1@2"]
    rows = run_query(store, "select hops_given from episodes where run_id = 'cli' order by hops_given").rows
    assert rows == [(0,), (1,)]
    table = CliRunner().invoke(
        cli,
        [
            "report",
            "--store",
            str(recorded_copy),
            "--run",
            "cli",
            "--table",
            "conditioned_hops",
            "--format",
            "json",
        ],
    )
    assert [(r["hop"], r["free_tasks"]) for r in json.loads(table.output)["tables"]["conditioned_hops"]] == [
        (1, None),
        (2, None),
    ]  # the store holds no free-running heuristic run
    free = CliRunner().invoke(
        cli, ["report", "--store", str(recorded_copy), "--run", reference, "--table", "conditioned_hops"]
    )
    assert free.exit_code == 1 and "no hop-conditioned episode" in free.output


# -- a prefix that did not replay faithfully ----------------------------------------------------


def _prefix(expected: list[StepView | None]) -> Prefix:
    source = Source("ref-ep", "t/3", datetime(2026, 1, 1, tzinfo=UTC), ())
    steps = len(expected) - 1
    return Prefix(
        task_id="t/3",
        source=source,
        start_hop=1,
        given=(steps,),
        actions=tuple(f"click [{i}]" for i in range(steps)),
        urls=tuple(f"http://a/{i}" for i in range(steps)),
        expected=tuple(expected),
    )


def _row(index: int, url: str, tree: str) -> dict:
    return {"step_index": index, "url": url, "tree_text": tree, "screenshot": None}


def test_the_first_unfaithful_prefix_step_is_named() -> None:
    prefix = _prefix(
        [
            StepView(0, "http://a/0", "[1] link 'x'", None),
            StepView(1, "http://a/1", "[2] main", None),
            StepView(2, "http://a/2", "[3] main", None),
        ]
    )
    same = [
        _row(0, "http://a/0", "[1] link 'x'"),
        _row(1, "http://a/1", "[2] main"),
        _row(2, "http://a/2", "[3] main"),
        _row(3, "http://a/9", "agent's"),
    ]
    assert check_prefix(prefix, same, True) == PrefixCheck(3, 3, None)
    tree = check_prefix(prefix, [same[0], _row(1, "http://a/1", "[2] main\n[4] button 'new'"), same[2]], True)
    assert (tree.faithful, tree.faithful_steps, tree.mismatch) == (
        False,
        2,
        "step 1: accessibility tree differs (first difference at line 2: recorded nothing (the tree "
        'ended), replayed `button "new"`; 1 element(s) only in the replay: button "new")',
    )
    url = check_prefix(prefix, [same[0], same[1], _row(2, "http://elsewhere/", "[3] main")], True)
    assert url.mismatch == "step 2: url http://elsewhere/ (reference: http://a/2)"
    assert check_prefix(
        prefix, same[:2], True
    ).faithful  # the agent's first step was not stored: not compared
    missing = check_prefix(prefix, [same[0]], True)
    assert missing.mismatch == "step 1: missing in the replay"
    ended = check_prefix(prefix, same[:1], False)
    assert not ended.faithful and "before the hand-over" in ended.mismatch


def test_a_page_the_archive_served_reaches_the_local_web_after_the_hand_over(tmp_path: Path) -> None:
    """The kiwix viewer handed over at hop 1 (served from the archive, so from no address:
    "public" to Chromium) loads its search results from the live kiwix-serve on 127.0.0.1.
    With Chromium's Local Network Access checks on, the frame was blocked and the oracle lost
    both hops; mmina turns them off (``LOCAL_NETWORK_FEATURES``)."""
    store = tmp_path / "store"
    base = ["record", "--store", str(store), "--task", "normal/43", "--format", "json"]
    reference = CliRunner().invoke(cli, [*base, "--run-id", "oracle"])
    assert reference.exit_code == 0, reference.output
    taken = CliRunner().invoke(cli, [*base, "--run-id", "at", "--prefix-run", "oracle", "--at-hop", "1"])
    assert taken.exit_code == 0, taken.output
    (episode,) = json.loads(taken.output[taken.output.index("{") :])["episodes"]
    assert episode["prefix"]["faithful"]
    steps = run_query(Store.open(store), "select action_error from steps where run_id = 'at'").rows
    assert steps and all(error is None for (error,) in steps), steps
    hops = run_query(
        Store.open(store),
        "select verdict from latest_scores where evaluator = 'hops' and level = 'hop' "
        "and episode_id in (select episode_id from episodes where run_id = 'at')",
    ).rows
    assert hops == [("pass",), ("pass",)]
