"""`mmina eval-steps`: teacher-forced next actions over a really recorded oracle run, served back
through a local OpenAI-compatible server, scored per step and reproducible with SQL."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mmina.actions.grammar import SUMMARY_MARKER
from mmina.cli import cli
from mmina.observations.observation import Observation
from mmina.recorder.recording import RecordConfig, record_run
from mmina.stats import wilson
from mmina.store import Store
from mmina.store.sql import run_query
from tests.docs_pages import page
from tests.fake_openai import PROMPT_TOKENS, FakeOpenAI, judge_answer, last_user_text

ORACLE_TASKS = ("normal/1", "shopping/2")
KEY = {"OPENAI_API_KEY": "sk-test-steps"}


def step_key(prompt: str) -> tuple[str, str, str]:
    """What identifies a step in a prompt: objective, URL and the previous actions shown."""
    objective = prompt.splitlines()[0]
    url = next(line for line in prompt.splitlines() if line.startswith("URL:"))
    return objective, url, prompt.rpartition("PREVIOUS ACTIONS:\n")[2].strip()


def expected_key(intent: str, url: str, previous: list[str], k: int = 5) -> tuple[str, str, str]:
    shown = previous[-k:] if k else []
    return (
        f"OBJECTIVE: {intent}",
        f"URL: {url}",
        "\n".join(f"{i}. {a}" for i, a in enumerate(shown, 1)) or "None",
    )


@dataclass
class ScriptedOpenAI(FakeOpenAI):
    """Answers each step's prompt with the action given for its key (``!text`` = that raw text);
    an unknown step gets ``scroll [up]``; judge questions get the fake judge's answer."""

    answers: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def _text(self, body: dict[str, Any]) -> str:
        prompt = last_user_text(body)
        if judge_answer(prompt) is not None or "URL:" not in prompt:
            return super()._text(body)
        action = self.answers.get(step_key(prompt), "scroll [up]")
        return (
            action[1:] if action.startswith("!") else f"I look at the page. {SUMMARY_MARKER} ```{action}```"
        )


class FirstElement:
    """A user agent: clicks the first element of the rebuilt tree, and notes the history it got."""

    histories: list[list[str]] = []

    def reset(self, task) -> None:
        self.task = task

    def set_history(self, actions: list[str]) -> None:
        FirstElement.histories.append(list(actions))

    def act(self, observation: Observation) -> str:
        return f"click [{observation.elements[0].id}]"


@pytest.fixture(scope="module")
def oracle_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """normal/1 and shopping/2 (a select) by the oracle; wikipedia/1 answered wrong in run ``wrong``."""
    store = tmp_path_factory.mktemp("steps") / "store"
    record_run(Store.open(store, create=True), RecordConfig(task_ids=ORACLE_TASKS, run_id="oracle"))
    record_run(
        Store.open(store, create=True),
        RecordConfig(task_ids=("wikipedia/1",), agent="tests.agents_for_tests:WrongAnswer", run_id="wrong"),
    )
    return store


@pytest.fixture
def store(oracle_store: Path, tmp_path: Path) -> Path:
    target = tmp_path / "store"
    shutil.copytree(oracle_store, target)
    return target


def recorded_steps(store: Path, run_id: str = "oracle") -> list[dict[str, Any]]:
    """Every stored step with its task's intent and the actions recorded before it."""
    rows = run_query(
        Store.open(store),
        f"""
        select s.episode_id, s.step_index, s.url, s.action, t.intent from steps s
        join episodes e using (episode_id) join tasks t on t.task_id = e.task_id and t.run_id = e.run_id
        where s.run_id = '{run_id}' order by e.started_at, s.step_index""",
    )
    steps = [dict(zip(rows.columns, r)) for r in rows.rows]
    for step in steps:
        step["previous"] = [
            s["action"]
            for s in steps
            if s["episode_id"] == step["episode_id"] and s["step_index"] < step["step_index"]
        ]
    return steps


def oracle_answers(steps: list[dict[str, Any]], k: int = 5) -> dict[tuple[str, str, str], str]:
    return {expected_key(s["intent"], s["url"], s["previous"], k): s["action"] for s in steps}


def invoke(store: Path, *args: str, server: FakeOpenAI | None = None) -> Result:
    endpoint = ["--model", "m", "--base-url", server.url] if server else []
    return CliRunner().invoke(cli, ["eval-steps", "--store", str(store), *endpoint, *args], env=KEY)


def eval_json(
    store: Path, *args: str, server: FakeOpenAI | None = None, exit_code: int = 0
) -> dict[str, Any]:
    result = invoke(store, "--format", "json", *args, server=server)
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def step_rows(store: Path, batch: str) -> dict[tuple[str, int], dict[str, Any]]:
    rows = run_query(Store.open(store), f"select * from scores where batch_id = '{batch}'")
    return {
        (r["episode_id"], r["step_index"]): r for r in (dict(zip(rows.columns, row)) for row in rows.rows)
    }


def test_the_oracles_own_actions_score_100_percent(store: Path) -> None:
    steps = recorded_steps(store)
    with ScriptedOpenAI(answers=oracle_answers(steps)) as server:
        out = eval_json(store, "--run", "oracle", server=server)
    probe, *asked = server.chat_requests  # the endpoint check before the first step, then one per step
    assert probe["max_tokens"] == 1 and len(asked) == len(steps) == out["overall"]["steps"] == 10
    assert out["overall"]["accuracy"] == 1.0 and out["overall"]["op_accuracy"] == 1.0
    assert out["overall"]["target_accuracy"] == 1.0 and out["overall"]["value_accuracy"] == 1.0
    assert {g["key"] for g in out["groups"]["operation"]} == {"click", "type", "select", "navigation", "stop"}
    assert {g["key"] for g in out["groups"]["website"]} == {"wiki.mmina.test", "shop.mmina.test"}
    assert out["cost"]["prompt_tokens"] == PROMPT_TOKENS * len(steps)
    rows = step_rows(store, out["batch_id"])
    assert set(rows) == {(s["episode_id"], s["step_index"]) for s in steps}
    for row in rows.values():
        detail = json.loads(row["detail_json"])
        assert (row["evaluator"], row["level"], row["verdict"], row["value"]) == (
            "step_action",
            "step",
            "pass",
            1.0,
        )
        assert (
            detail["predicted_action"] == detail["reference_action"]
            and SUMMARY_MARKER in detail["raw_output"]
        )
        assert detail["history_shown"] == min(5, detail["position"]) and detail["parse_error"] is None
    assert json.loads(next(iter(rows.values()))["args_json"])["references"] == "succeeded"


def test_known_wrong_actions_fail_exactly_those_steps(store: Path) -> None:
    steps = recorded_steps(store)
    answers = oracle_answers(steps)
    by_kind: dict[str, dict[str, Any]] = {}
    for step in steps:
        by_kind.setdefault(step["action"].split(" ")[0], step)
    wrong = {"click": "click [99999]", "type": "scroll [down]", "goto": "!I would rather not say."}
    for kind, action in wrong.items():
        answers[expected_key(by_kind[kind]["intent"], by_kind[kind]["url"], by_kind[kind]["previous"])] = (
            action
        )
    with ScriptedOpenAI(answers=answers) as server:
        out = eval_json(store, "--run", "oracle", server=server)
    rows = step_rows(store, out["batch_id"])
    failed = {key for key, row in rows.items() if row["verdict"] == "fail"}
    assert failed == {(by_kind[k]["episode_id"], by_kind[k]["step_index"]) for k in wrong}
    details = {
        k: json.loads(rows[(by_kind[k]["episode_id"], by_kind[k]["step_index"])]["detail_json"])
        for k in wrong
    }
    assert details["click"]["op_ok"] and details["click"]["target_ok"] is False
    assert details["type"]["predicted_op"] == "scroll" and not details["type"]["op_ok"]
    assert (
        details["goto"]["predicted_action"] is None and "unknown action 'I'" in details["goto"]["parse_error"]
    )
    assert out["overall"]["correct"] == len(steps) - 3
    confusion = {r["reference"]: r for r in out["confusion"]}
    assert confusion["type"]["scroll"] == 1 and confusion["navigation"]["unparsable"] == 1
    assert (
        len(out["wrong_targets"]) == 1
        and out["wrong_targets"][0]["predicted_target"] == "[99999] (not on the page)"
    )
    assert out["wrong_targets"][0]["reference_target"].startswith(
        f"[{by_kind['click']['action'][7:-1]}] link"
    )


def test_report_only_and_the_documented_sql_reproduce_the_figures(store: Path) -> None:
    steps = recorded_steps(store)
    answers = oracle_answers(steps)
    answers[next(iter(answers))] = "stop [no idea]"
    with ScriptedOpenAI(answers=answers) as server:
        out = eval_json(store, "--run", "oracle", server=server)
    again = eval_json(store, "--run", "oracle", "--report-only")
    assert again["batch_id"] == out["batch_id"] and again["overall"] == out["overall"]
    assert again["groups"] == out["groups"] and again["confusion"] == out["confusion"]
    query = re.search(r"<!-- eval-steps-sql -->\n```sql\n(.*?)```", page("stepeval.md"), re.DOTALL).group(1)
    result = run_query(Store.open(store), query.replace("BATCH", out["batch_id"]))
    by_op = {row[0]: dict(zip(result.columns, row)) for row in result.rows}
    for group in out["groups"]["operation"]:
        assert by_op[group["key"]]["steps"] == group["steps"]
        assert by_op[group["key"]]["accuracy"] == pytest.approx(group["accuracy"])
    low, high = wilson(out["overall"]["correct"], out["overall"]["steps"])
    assert 0 < low < out["overall"]["accuracy"] < high < 1 and (low, high) == (
        out["overall"]["ci_low"],
        out["overall"]["ci_high"],
    )


def test_sample_seed_and_history_are_what_the_agent_gets(store: Path) -> None:
    with ScriptedOpenAI() as server:
        first = eval_json(
            store, "--run", "oracle", "--sample", "4", "--seed", "7", "--history", "0", server=server
        )
        second = eval_json(
            store, "--run", "oracle", "--sample", "4", "--seed", "7", "--history", "0", server=server
        )
        too_long = invoke(store, "--run", "oracle", "--history", "6", server=server)
    keys = [sorted(step_rows(store, out["batch_id"])) for out in (first, second)]
    assert keys[0] == keys[1] and len(keys[0]) == 4
    asked = [r for r in server.chat_requests if r["max_tokens"] > 1]  # not the endpoint checks
    assert len(asked) == 8 and all(last_user_text(r).endswith("PREVIOUS ACTIONS:\nNone") for r in asked)
    assert [g["key"] for g in first["groups"]["history"]] == ["0"]
    assert too_long.exit_code == 1 and "Error: the openai agent shows at most 5" in too_long.output


def test_a_user_agent_gets_the_recorded_history_and_the_rebuilt_tree(store: Path) -> None:
    FirstElement.histories.clear()
    out = eval_json(
        store, "--run", "oracle", "--agent", "tests.test_eval_steps:FirstElement", "--history", "2"
    )
    steps = recorded_steps(store)
    assert FirstElement.histories == [s["previous"][-2:] for s in steps]
    details = [json.loads(r["detail_json"]) for r in step_rows(store, out["batch_id"]).values()]
    assert all(d["predicted_op"] == "click" and d["predicted_target_label"].startswith("[") for d in details)
    assert out["cost"]["cost_usd"] == 0.0 and out["cost"]["steps"] == len(steps)


def test_references_are_succeeded_episodes_unless_all_steps(store: Path) -> None:
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    refused = invoke(store, "--run", "wrong", "--agent", "tests.test_eval_steps:FirstElement")
    assert refused.exit_code == 1 and refused.output.startswith("Error: run wrong has no reference steps")
    for args in (["--run", "nope"], ["--run", "oracle", "--agent", "oracle"]):
        result = invoke(store, *args)
        assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before
    out = eval_json(store, "--run", "wrong", "--agent", "tests.test_eval_steps:FirstElement", "--all-steps")
    assert out["overall"]["steps"] == len(recorded_steps(store, "wrong")) > 0
    assert out["args"]["references"] == "all"


def test_the_value_judge_accepts_a_paraphrased_answer_and_is_cached(store: Path) -> None:
    steps = recorded_steps(store)
    answers = oracle_answers(steps)
    stop = next(s for s in steps if s["action"].startswith("stop [Vell"))
    answers[expected_key(stop["intent"], stop["url"], stop["previous"])] = (
        f"stop [So: {stop['action'][6:-1]}!]"
    )
    with ScriptedOpenAI(answers=answers) as server:
        exact = eval_json(store, "--run", "oracle", server=server)
        judged = eval_json(store, "--run", "oracle", "--judge-model", "judge", server=server)
        judged_again = eval_json(store, "--run", "oracle", "--judge-model", "judge", server=server)
    judge_requests = [r for r in server.chat_requests if r["model"] == "judge"]
    assert exact["overall"]["correct"] == len(steps) - 1
    assert judged["overall"]["correct"] == judged_again["overall"]["correct"] == len(steps)
    assert len(judge_requests) == 1
    rows = step_rows(store, judged["batch_id"])
    detail = json.loads(rows[(stop["episode_id"], stop["step_index"])]["detail_json"])
    assert (detail["value_ok"], detail["value_method"]) == (True, "fuzzy")
    judge = json.loads(rows[(stop["episode_id"], stop["step_index"])]["judge_json"])
    assert (judge["model"], judge["prompt_version"], judge["calls"], judge["asked"]["temperature"]) == (
        "judge",
        "fuzzy-1",
        1,
        0.0,
    )
    assert all(json.loads(r["judge_json"])["model"] == "judge" for r in rows.values()), (
        "every row: the value judge's"
    )
    assert all(r["judge_json"] is None for r in step_rows(store, exact["batch_id"]).values()), (
        "no judge: none"
    )


def test_without_patience_an_endpoint_failure_leaves_the_step_unscored(store: Path) -> None:
    with FakeOpenAI(fail_after=1, fail_status=500) as server:  # the endpoint check passes, then it breaks
        result = invoke(store, "--run", "oracle", "--sample", "1", "--endpoint-patience", "0", server=server)
    assert result.exit_code == 1 and "failed" in result.output and "model endpoint failed" in result.output
    assert (
        run_query(Store.open(store), "select count(*) from scores where evaluator = 'step_action'").rows[0][0]
        == 0
    )


def test_help_has_an_example_and_the_docs_document_it() -> None:
    for command in (["eval-steps"], ["import", "mind2web"]):
        result = CliRunner().invoke(cli, [*command, "--help"])
        assert result.exit_code == 0 and "Example" in result.output
        assert f"mmina {' '.join(command)}" in page("stepeval.md")


def test_mmina_report_shows_the_step_level_figures(store: Path) -> None:
    with ScriptedOpenAI(answers=oracle_answers(recorded_steps(store))) as server:
        out = eval_json(store, "--run", "oracle", server=server)
    result = CliRunner().invoke(
        cli,
        [
            "report",
            "--store",
            str(store),
            "--evaluator",
            "step_action",
            "--run",
            "oracle",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["batch_id"], report["overall"], report["groups"]) == (
        out["batch_id"],
        out["overall"],
        out["groups"],
    )
    table = CliRunner().invoke(
        cli, ["report", "--store", str(store), "--evaluator", "step_action", "--run", "oracle"]
    )
    assert table.exit_code == 0 and "by operation" in table.output and "100.0%" in table.output
    both = CliRunner().invoke(cli, ["report", "--store", str(store), "--evaluator", "step_action"])
    assert both.exit_code == 2 and "one --run" in both.output
