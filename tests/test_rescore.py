"""`mmina rescore`: evaluators over really recorded stores, the cached LLM judge, batches and flips."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mmina.cli import cli
from mmina.evaluators import EpisodeView, Score, StepView, get, names
from mmina.evaluators.base import EvaluatorError
from mmina.evaluators.hops import Hops
from mmina.evaluators.judge import (
    FUZZY_PROMPT_VERSION,
    PROMPT,
    JudgeConfig,
    JudgeSettings,
    endpoint_host,
    judge_prompt,
    parse_verdict,
)
from mmina.evaluators.registry import parse_args
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.task import task_from_dict
from mmina.tasks.taskcheck import load_suite
from tests import rescore_reference
from tests.fake_openai import FakeOpenAI

BUILTIN_TASKS = ("normal/1", "wikipedia/1", "compare/5", "multi567/1")
BUILTIN_RUNS = ("oracle", "wrong", "cheat")
JUDGED_RUNS = ("judged", "judged-wrong")
AGENTS = {
    "oracle": "oracle",
    "wrong": "tests.agents_for_tests:WrongAnswer",
    "cheat": "tests.agents_for_tests:Cheater",
}
KEY = {"OPENAI_API_KEY": "sk-test-judge"}


def _judged_suite(root: Path) -> Path:
    """Two fixture tasks whose eval asks for exact, fuzzy and URL matches (the built-ins only have must_include)."""
    builtin = {t.task_id: t.original for t in load_suite().tasks}
    evals = {
        "wikipedia/1": {
            "eval_types": ["string_match", "url_match"],
            "reference_answers": {"exact_match": "Vell tea", "fuzzy_match": ["Vell tea", "tea"]},
            "reference_url": "http://wiki.mmina.test/kiwix/A/Solaria",
        },
        "shopping/1": {
            "eval_types": ["string_match"],
            "reference_answers": {
                "exact_match": "$23.75",
                "must_include": ["$23.75"],
                "fuzzy_match": ["23.75"],
            },
            "reference_url": "http://shop.mmina.test/product/vell-mountain-tea",
        },
    }
    folder = root / "suite" / "judged"
    folder.mkdir(parents=True)
    for number, (source, evaluation) in enumerate(evals.items(), start=1):
        task = {**builtin[source], "eval": {**builtin[source]["eval"], **evaluation}}
        (folder / f"{number}.json").write_text(json.dumps(task, indent=2))
    return root / "suite"


@pytest.fixture(scope="module")
def recorded_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store, really recorded: the oracle, an agent that answers wrong after visiting every
    page, one that answers right without visiting anything, and the judged suite twice."""
    root = tmp_path_factory.mktemp("rescore")
    store = root / "store"
    browser = BrowserConfig(screenshots=False)  # no evaluator reads them; each test copies the store
    for run_id in BUILTIN_RUNS:
        record_run(
            Store.open(store, create=True),
            RecordConfig(task_ids=BUILTIN_TASKS, agent=AGENTS[run_id], run_id=run_id, browser=browser),
        )
    suite = _judged_suite(root)
    record_run(
        Store.open(store, create=True), RecordConfig(tasks=str(suite), run_id="judged", browser=browser)
    )
    record_run(
        Store.open(store, create=True),
        RecordConfig(tasks=str(suite), agent=AGENTS["wrong"], run_id="judged-wrong", browser=browser),
    )
    return store


@pytest.fixture
def store(recorded_runs: Path, tmp_path: Path) -> Path:
    """A private copy (rescoring writes)."""
    target = tmp_path / "store"
    shutil.copytree(recorded_runs, target)
    return target


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, ["rescore", *args], env=env)


def rescore_json(
    store: Path, *args: str, env: dict[str, str | None] | None = None, exit_code: int = 0
) -> dict[str, Any]:
    result = invoke("--store", str(store), "--format", "json", *args, env=env)
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def verdicts(report: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(e["run_id"], e["task_id"]): e["verdict"] for e in report["episodes"]}


def stored_rows(store: Path, batch_id: str, level: str | None = None) -> list[dict[str, Any]]:
    rows = Store.open(store).read("scores").to_pylist()
    return [r for r in rows if r["batch_id"] == batch_id and (level is None or r["level"] == level)]


def files_of(store: Path) -> list[Path]:
    return sorted(p.relative_to(store) for p in store.rglob("*") if p.is_file())


def expect(table: dict[str, dict[str, str]]) -> dict[tuple[str, str], str]:
    return {(run, task): verdict for run, by_task in table.items() for task, verdict in by_task.items()}


# -- the built-in evaluators on real episodes --------------------------------------------

ALL = dict.fromkeys(BUILTIN_TASKS)


def test_must_include_and_exact_match(store: Path) -> None:
    report = rescore_json(store, "--evaluator", "must_include")
    assert verdicts(report) == expect(
        {
            "oracle": dict.fromkeys(ALL, "pass"),
            "wrong": dict.fromkeys(ALL, "fail"),
            "cheat": dict.fromkeys(ALL, "pass"),
            "judged": {"judged/1": "n/a", "judged/2": "pass"},
            "judged-wrong": {"judged/1": "n/a", "judged/2": "fail"},
        }
    )
    exact = rescore_json(store, "--evaluator", "exact_match")
    assert verdicts(exact) == expect(
        {
            **{
                run: dict.fromkeys(ALL, "n/a") for run in BUILTIN_RUNS
            },  # the built-in tasks have no exact_match
            "judged": {"judged/1": "pass", "judged/2": "pass"},
            "judged-wrong": {"judged/1": "fail", "judged/2": "fail"},
        }
    )
    row = stored_rows(store, exact["batch_id"])[0]
    assert (row["evaluator"], row["evaluator_version"], row["args_json"], row["level"]) == (
        "exact_match",
        "1",
        "{}",
        "task",
    )


def test_url_match_checks_the_final_url_or_any(store: Path) -> None:
    final = rescore_json(
        store, "--evaluator", "url_match", "--run", "oracle", "--run", "wrong", "--run", "cheat"
    )
    assert verdicts(final) == expect(
        {
            "oracle": dict.fromkeys(ALL, "pass"),
            "wrong": dict.fromkeys(ALL, "pass"),
            "cheat": dict.fromkeys(ALL, "fail"),
        }
    )
    rows = stored_rows(store, final["batch_id"])
    assert {r["args_json"] for r in rows} == {'{"where": "final"}'}
    detail = json.loads(
        next(r for r in rows if r["run_id"] == "oracle" and r["task_id"] == "compare/5")["detail_json"]
    )
    assert detail["matched_step"] == 3 and detail["final_url"] == detail["gold"][0]
    anywhere = rescore_json(store, "--evaluator", "url_match", "--arg", "where=any", "--run", "cheat")
    assert set(verdicts(anywhere).values()) == {"fail"}


def test_hops_clean_queue(store: Path) -> None:
    report = rescore_json(store, "--evaluator", "hops", "--run", "oracle", "--run", "wrong", "--run", "cheat")
    # The cheater's start page completes normal/1's wiki hop, its right answer the last hop;
    # wikipedia/1 has one hop, which a right answer completes; elsewhere it reached nothing.
    assert verdicts(report) == expect(
        {
            "oracle": dict.fromkeys(ALL, "pass"),
            "wrong": dict.fromkeys(ALL, "fail"),
            "cheat": {"normal/1": "pass", "wikipedia/1": "pass", "compare/5": "fail", "multi567/1": "fail"},
        }
    )
    by_episode = {(e["run_id"], e["task_id"]): e for e in report["episodes"]}
    assert (
        by_episode[("wrong", "multi567/1")]["hops_passed"]
        == 5
        == by_episode[("wrong", "multi567/1")]["hops_total"]
    )
    assert by_episode[("cheat", "compare/5")]["hops_passed"] == 0
    rows = stored_rows(store, report["batch_id"])
    hop_rows = sorted(
        (r["hop"], json.loads(r["detail_json"]))
        for r in rows
        if r["run_id"] == "oracle" and r["task_id"] == "multi567/1" and r["level"] == "hop"
    )
    assert [d["completed_step"] for _, d in hop_rows] == [2, 5, 8, 12, 15]
    assert all(d["rule"] == "reference_url" and d["by"] == "url" for _, d in hop_rows)
    normal = [
        json.loads(r["detail_json"])
        for r in rows
        if r["run_id"] == "oracle" and r["task_id"] == "normal/1" and r["level"] == "hop"
    ]
    assert [d["requires"] for d in sorted(normal, key=lambda d: d["keyword"] != "kiwix")] == [
        ["kiwix"],
        ["shop", "vell-mountain-tea"],
    ]  # no mmina_hops: the official fields decide
    buckets = {b["name"]: b for b in report["buckets"]}
    assert buckets["overall"]["episodes"] == 12 and buckets["5+"]["episodes"] == 3
    assert buckets["1"]["hops_total"] == 3 and buckets["2-4"]["hops_total"] == 12


def test_official_rules_on_recorded_episodes(store: Path) -> None:
    official = rescore_json(
        store, "--evaluator", "mmina_official", "--run", "oracle", "--run", "wrong", "--run", "cheat"
    )
    rows = [r for r in stored_rows(store, official["batch_id"]) if r["level"] == "task"]
    outcome = {(r["run_id"], r["task_id"]): json.loads(r["detail_json"]) for r in rows}
    # normal/1 is scored by the "2hop" rule, which wants must_include[0] ("23.75", the answer) in a URL: never
    for run_id in BUILTIN_RUNS:
        detail = outcome[(run_id, "normal/1")]
        assert (detail["rule_set"], detail["outcome"], detail["numerator"], detail["denominator"]) == (
            "2hop",
            "fail",
            0,
            2,
        )
    # wikipedia/1: "singlehop", the answer alone decides; one unit in the denominator, none in the numerator
    assert [outcome[(r, "wikipedia/1")]["outcome"] for r in BUILTIN_RUNS] == ["pass", "fail", "pass"]
    assert {(d["numerator"], d["denominator"]) for (r, t), d in outcome.items() if t == "wikipedia/1"} == {
        (0, 1)
    }
    # the multihop rule set: END is in the denominator (len(procedure)), the answer is never read
    assert (
        outcome[("oracle", "multi567/1")]["denominator"] == 6
        and outcome[("oracle", "compare/5")]["denominator"] == 3
    )
    assert outcome[("wrong", "compare/5")]["outcome"] == outcome[("oracle", "compare/5")]["outcome"]
    hop_rows = [r for r in stored_rows(store, official["batch_id"]) if r["level"] == "hop"]
    assert len(hop_rows) == sum(d["denominator"] for d in outcome.values())
    assert sum(r["verdict"] == "pass" for r in hop_rows) == sum(d["numerator"] for d in outcome.values())
    again = rescore(Store.open(store), RescoreConfig("mmina_official", runs=BUILTIN_RUNS))
    rescore_reference.check(Store.open(store), again, list(BUILTIN_RUNS))


def test_task_evaluator_follows_each_tasks_eval(store: Path) -> None:
    report = rescore_json(store, "--evaluator", "task", "--run", "oracle", "--run", "cheat")
    assert set(verdicts(report).values()) == {"pass"}  # the built-in tasks ask for must_include only
    with FakeOpenAI() as server:
        judged = rescore_json(
            store,
            "--evaluator",
            "task",
            "--run",
            "judged",
            "--run",
            "judged-wrong",
            "--judge-model",
            "fake-judge",
            "--judge-base-url",
            server.url,
            env=KEY,
        )
    assert verdicts(judged) == expect(
        {
            "judged": {"judged/1": "pass", "judged/2": "pass"},
            "judged-wrong": {"judged/1": "fail", "judged/2": "fail"},
        }
    )
    row = next(
        r
        for r in stored_rows(store, judged["batch_id"])
        if r["run_id"] == "judged" and r["task_id"] == "judged/1"
    )
    assert set(json.loads(row["detail_json"])["checks"]) == {"exact_match", "fuzzy_match", "url_match"}
    assert json.loads(row["args_json"]) == {"judge_model": "fake-judge"}


def test_recorded_episodes_score_at_once_as_one_by_one(store: Path) -> None:
    """The batch path of the deterministic built-ins and the per-view path of the judged
    ones write, for really recorded episodes, what scoring each episode on its own gives."""
    for name, args in rescore_reference.DETERMINISTIC[:-1]:
        rescore_reference.check(Store.open(store), rescore(Store.open(store), RescoreConfig(name, args=args)))
    with FakeOpenAI() as server:
        judge = JudgeSettings(model="fake-judge", base_url=server.url)
        for name, args in (("fuzzy", {}), ("task", {})):
            config = RescoreConfig(name, args=args, runs=JUDGED_RUNS, judge=judge)
            with pytest.MonkeyPatch.context() as env:
                env.setenv("OPENAI_API_KEY", "sk-test-judge")
                result = rescore(Store.open(store), config)
            rescore_reference.check(Store.open(store), result, list(JUDGED_RUNS))


def test_task_evaluator_needs_a_judge_only_for_fuzzy_references(store: Path) -> None:
    before = files_of(store)
    result = invoke("--store", str(store), "--evaluator", "task", "--run", "judged")
    assert (
        result.exit_code == 1
        and result.output == "Error: this evaluator asks an LLM judge: pass --judge-model NAME\n"
    )
    assert files_of(store) == before


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--evaluator", "nosuch"],
            "no evaluator 'nosuch' (evaluators: exact_match, fuzzy, hops, "
            "keypoints, mmina_official, must_include, task, url_match",
        ),
        (["--evaluator", "hops", "--run", "nosuch"], "no run 'nosuch' in"),
        (["--evaluator", "hops", "--episode", "nosuch"], "no episode 'nosuch' in"),
        (["--evaluator", "hops", "--arg", "x=1"], "evaluator hops has no argument x"),
        (["--evaluator", "url_match", "--arg", "where=middle"], "where must be one of final, any"),
        (["--evaluator", "hops", "--arg", "novalue"], "is not KEY=VALUE"),
        (["--evaluator", "fuzzy"], "evaluator fuzzy asks an LLM judge: pass --judge-model NAME"),
    ],
)
def test_user_errors_are_one_line_and_write_nothing(store: Path, args: list[str], message: str) -> None:
    before = files_of(store)
    result = invoke("--store", str(store), *args)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: ") and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert files_of(store) == before


def test_missing_store_is_one_line(tmp_path: Path) -> None:
    result = invoke("--store", str(tmp_path / "none"), "--evaluator", "hops")
    assert result.exit_code == 1 and result.output.startswith("Error: no store at")
    assert not (tmp_path / "none").exists()


def test_episode_selection(store: Path) -> None:
    episode = Store.open(store).read("episodes", run_id="wrong").to_pylist()[0]
    report = rescore_json(store, "--evaluator", "hops", "--episode", episode["episode_id"])
    assert [(e["run_id"], e["episode_id"]) for e in report["episodes"]] == [("wrong", episode["episode_id"])]
    result = invoke(
        "--store", str(store), "--evaluator", "hops", "--run", "oracle", "--episode", episode["episode_id"]
    )
    assert result.exit_code == 1 and "no episode" in result.output and "run(s) oracle" in result.output


# -- batches, flips, overwrite ------------------------------------------------------------------


def test_flips_against_the_previous_scoring_and_overwrite(store: Path) -> None:
    with FakeOpenAI(judge_reply="Yes") as lenient:
        first = rescore_json(
            store,
            "--evaluator",
            "fuzzy",
            "--arg",
            "reference=must_include",
            "--judge-model",
            "lenient",
            "--judge-base-url",
            lenient.url,
            "--run",
            "oracle",
            "--run",
            "wrong",
            env=KEY,
        )
    assert set(verdicts(first).values()) == {"pass"} and first["flips"] == []
    files_before = files_of(store)
    with FakeOpenAI() as strict:
        second = rescore_json(
            store,
            "--evaluator",
            "fuzzy",
            "--arg",
            "reference=must_include",
            "--judge-model",
            "strict",
            "--judge-base-url",
            strict.url,
            "--run",
            "oracle",
            "--run",
            "wrong",
            "--action",
            "overwrite",
            env=KEY,
        )
    flips = {
        (f["run_id"], f["task_id"], f["before"], f["after"], f["previous_batch"]) for f in second["flips"]
    }
    assert flips == {("wrong", t, "pass", "fail", first["batch_id"]) for t in BUILTIN_TASKS}
    assert set(files_before) < set(files_of(store)), "overwrite must not delete anything"
    rows = stored_rows(store, second["batch_id"])
    assert rows and all(json.loads(r["detail_json"])["supersedes"] == [first["batch_id"]] for r in rows)
    latest = run_query(
        Store.open(store),
        """
        select run_id, task_id, verdict, batch_id from scores where level = 'task' and evaluator = 'fuzzy'
        qualify row_number() over (partition by episode_id, evaluator order by scored_at desc, batch_id desc) = 1
        order by run_id, task_id""",
    ).rows
    assert {r[3] for r in latest} == {second["batch_id"]}
    assert {(r[0], r[2]) for r in latest} == {("oracle", "pass"), ("wrong", "fail")}


def test_flips_in_the_table_output(store: Path) -> None:
    invoke("--store", str(store), "--evaluator", "must_include", "--run", "cheat")
    result = invoke("--store", str(store), "--evaluator", "must_include", "--run", "cheat")
    assert (
        result.exit_code == 0
        and "no task verdict flipped against the previous must_include scoring" in result.output
    )
    assert "overall" in result.output and "4 episode(s) scored, 1 file(s) written (append)" in result.output


# -- the fuzzy judge against a local OpenAI-compatible server ------------------------------------


def _fuzzy(
    store: Path, server: FakeOpenAI, *extra: str, exit_code: int = 0, env: dict[str, str | None] | None = None
) -> dict[str, Any]:
    return rescore_json(
        store,
        "--evaluator",
        "fuzzy",
        "--run",
        "judged",
        "--run",
        "judged-wrong",
        "--judge-model",
        "fake-judge",
        "--judge-base-url",
        server.url,
        "--judge-concurrency",
        "3",
        *extra,
        env=env or KEY,
        exit_code=exit_code,
    )


def _answers(store: Path, batch_id: str) -> dict[tuple[str, str], tuple[str, str]]:
    return {
        (r["run_id"], r["task_id"]): (r["verdict"], r["detail_json"])
        for r in stored_rows(store, batch_id, "task")
    }


def test_fuzzy_scores_every_episode_then_a_second_run_sends_nothing(store: Path) -> None:
    with FakeOpenAI() as server:
        first = _fuzzy(store, server)
        sent = len(server.requests)
        second = _fuzzy(store, server, env={"OPENAI_API_KEY": None})  # cached: no key, no request needed
        assert len(server.requests) == sent == 6  # 3 references x 2 answers, each asked once
    assert verdicts(first) == expect(
        {
            "judged": {"judged/1": "pass", "judged/2": "pass"},
            "judged-wrong": {"judged/1": "fail", "judged/2": "fail"},
        }
    )
    assert first["judge"] == {"cached": 0, "requested": 6, "failed": 0}
    assert second["judge"] == {"cached": 6, "requested": 0, "failed": 0}
    assert _answers(store, first["batch_id"]) == _answers(store, second["batch_id"])
    assert second["flips"] == []
    bodies = [r for r in server.requests]
    assert all(b["model"] == "fake-judge" and b["_authorization"] == "Bearer sk-test-judge" for b in bodies)


def test_judge_cache_rows(store: Path) -> None:
    with FakeOpenAI() as server:
        report = _fuzzy(store, server)
    cache = Store.open(store).read("judge_cache").to_pylist()
    assert len(cache) == 6 and len(Store.open(store).files("judge_cache")) == 1
    prompts = {r["prompt"] for r in cache}
    assert judge_prompt("Vell tea", "tea") in prompts
    assert judge_prompt("I do not know", "23.75") in prompts
    config = JudgeConfig("fake-judge", endpoint_host(server.url))
    for row in cache:
        assert row["prompt_sha256"] == config.key(row["prompt"], 16) and row["model"] == "fake-judge"
        assert json.loads(row["judge_json"]) == {
            "model": "fake-judge",
            "endpoint": endpoint_host(server.url),
            "prompt_version": "fuzzy-1",
            "sent": {"temperature": 0.0, "max_tokens": 16},
            "refused": [],
            "reply_model": "fake-judge",
            "fingerprint": "fp_fake",
        }
        assert row["response"] in ("Yes.", "No.") and row["prompt_tokens"] > 0 and row["created_at"].tzinfo
    detail = json.loads(_answers(store, report["batch_id"])[("judged", "judged/1")][1])
    assert [(j["reference"], j["reply"], j["verdict"]) for j in detail["judgments"]] == [
        ("Vell tea", "Yes.", "pass"),
        ("tea", "Yes.", "pass"),
    ]


def test_judge_500_three_times_still_gives_a_complete_identical_rescore(store: Path, tmp_path: Path) -> None:
    clean_store = tmp_path / "clean"
    shutil.copytree(store, clean_store)
    with FakeOpenAI() as clean:
        reference = _fuzzy(clean_store, clean)
    with FakeOpenAI(fail_first=3, fail_status=500) as flaky:
        report = _fuzzy(store, flaky)
        assert sum(bool(r.get("_failed")) for r in flaky.requests) == 3 and len(flaky.chat_requests) == 6
    assert report["unscored"] == [] and len(report["episodes"]) == 4
    assert _answers(store, report["batch_id"]) == _answers(clean_store, reference["batch_id"])


def test_judge_down_leaves_episodes_unscored_and_writes_no_scores(store: Path) -> None:
    before = files_of(store)
    with FakeOpenAI(always_fail=True, fail_status=500) as down:
        result = invoke(
            "--store",
            str(store),
            "--evaluator",
            "fuzzy",
            "--run",
            "judged",
            "--judge-model",
            "m",
            "--judge-base-url",
            down.url,
            env=KEY,
        )
    assert result.exit_code == 1
    assert "Error: 2 episode(s) could not be scored; nothing written for run(s) judged" in result.output
    assert (
        result.output.count("unscored judged-") == 2
        and "judge endpoint failed after 5 retries" in result.output
    )
    assert files_of(store) == before


@pytest.mark.parametrize(
    "evaluator, extra", [("fuzzy", []), ("task", []), ("keypoints", ["--arg", "images=false"])]
)
def test_a_judge_that_is_down_never_falls_back_to_another_evaluator(
    store: Path, evaluator: str, extra: list[str]
) -> None:
    """No connection at all (the server stopped listening): no verdict, exit 1, nothing written —
    not the string checks of ``task`` alone, nor any other evaluator's verdict in the judge's place."""
    before = files_of(store)
    with FakeOpenAI() as server:
        server.go_down()
        result = invoke(
            "--store",
            str(store),
            "--evaluator",
            evaluator,
            "--run",
            "judged",
            "--judge-model",
            "m",
            "--judge-base-url",
            server.url,
            "--judge-retries",
            "1",
            "--format",
            "json",
            *extra,
            env=KEY,
        )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["files"] == [] and len(report["unscored"]) == 2
    assert all("judge endpoint failed" in u["reason"] for u in report["unscored"])
    assert files_of(store) == before, "no scores, no judge cache: nothing at all was written"


def _judge_rows(store: Path, batch_id: str) -> list[dict[str, Any]]:
    return [json.loads(r["judge_json"]) for r in stored_rows(store, batch_id)]


def test_every_judged_verdict_row_carries_the_judges_whole_configuration(store: Path) -> None:
    with FakeOpenAI() as server:
        report = _fuzzy(store, server, "--judge-seed", "7", "--judge-top-p", "0.5")
        sent = [
            {k: b.get(k) for k in ("model", "temperature", "top_p", "seed", "max_tokens")}
            for b in server.requests
        ]
        cached = _fuzzy(
            store, server, "--judge-seed", "7", "--judge-top-p", "0.5", env={"OPENAI_API_KEY": None}
        )
        shown = invoke(
            "--store",
            str(store),
            "--evaluator",
            "fuzzy",
            "--run",
            "judged",
            "--judge-model",
            "fake-judge",
            "--judge-base-url",
            server.url,
            "--judge-seed",
            "7",
            "--judge-top-p",
            "0.5",
        ).output
    assert (
        f"judge: fake-judge at {endpoint_host(server.url)}, prompt fuzzy-1, temperature 0, top_p 0.5, seed 7"
        in shown
    )
    assert (
        sent == [{"model": "fake-judge", "temperature": 0.0, "top_p": 0.5, "seed": 7, "max_tokens": 16}] * 6
    )
    rows = stored_rows(store, report["batch_id"])
    configs = [json.loads(r["judge_json"]) for r in rows]
    assert len(configs) == 4 and {(c["calls"], c["cached"]) for c in configs} == {(1, 0), (2, 0)}
    for config in configs:
        assert {k: v for k, v in config.items() if k not in ("calls", "cached")} == {
            "model": "fake-judge",
            "endpoint": endpoint_host(server.url),
            "prompt_version": FUZZY_PROMPT_VERSION,
            "asked": {"temperature": 0.0, "top_p": 0.5, "seed": 7},
            "max_tokens": [16],
            "refused": [],
            "reply_models": ["fake-judge"],
            "fingerprints": ["fp_fake"],
        }
    assert all("sk-test-judge" not in r["judge_json"] and "/v1" not in r["judge_json"] for r in rows)
    assert cached["judge"]["requested"] == 0
    assert cached["judge_config"] == {
        "model": "fake-judge",
        "endpoint": endpoint_host(server.url),
        "prompt_version": "fuzzy-1",
        "asked": {"temperature": 0.0, "top_p": 0.5, "seed": 7},
    }
    assert {c["cached"] == c["calls"] for c in _judge_rows(store, cached["batch_id"])} == {True}
    other = [r for r in Store.open(store).read("scores").to_pylist() if r["evaluator"] != "fuzzy"]
    assert all(r["judge_json"] is None for r in other)


def test_endpoint_host_keeps_no_credentials_nor_path() -> None:
    assert (
        endpoint_host("https://user:sk-secret@judge.example.com:8443/key-abc123/v1")
        == "judge.example.com:8443"
    )
    assert endpoint_host("http://[::1]:8000/v1") == "[::1]:8000"
    assert endpoint_host("https://api.example.com/v1?key=sk-x") == "api.example.com"


def test_a_changed_temperature_seed_endpoint_or_prompt_version_is_a_cache_miss(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI() as server, FakeOpenAI() as elsewhere:

        def asked(*extra: str, at: FakeOpenAI = server) -> int:
            before = len(server.requests) + len(elsewhere.requests)
            _fuzzy(store, at, *extra)
            return len(server.requests) + len(elsewhere.requests) - before

        assert asked() == 6 and asked() == 0
        assert asked("--judge-temperature", "0.5") == 6 and asked("--judge-temperature", "0.5") == 0
        assert asked("--judge-seed", "3") == 6 and asked("--judge-seed", "3") == 0
        assert asked(at=elsewhere) == 6, "another endpoint (host and port) is another judge"
        from mmina.evaluators.fuzzy import Fuzzy

        monkeypatch.setattr(Fuzzy, "prompt_version", "fuzzy-2")
        assert asked() == 6 and asked() == 0
    versions = {
        json.loads(r["judge_json"])["prompt_version"]
        for r in Store.open(store).read("judge_cache").to_pylist()
    }
    assert versions == {"fuzzy-1", "fuzzy-2"}


def test_a_refused_parameter_is_dropped_and_every_verdict_says_so(store: Path) -> None:
    """A provider that takes only its default temperature (HTTP 400 naming it) and answers from a
    dated snapshot: the calls go on without temperature, and each verdict and cached call says both."""
    with FakeOpenAI(refuses=("temperature",), reply_model="fake-judge-2026-01-01") as server:
        report = _fuzzy(store, server)
        refused = [b for b in server.requests if b.get("_failed")]
    assert report["ok"] and 1 <= len(refused) <= 3, "refused once per call in flight, then never sent again"
    assert report["judge_changes"] == [
        "the judge endpoint refused temperature: dropped from the calls that it refused (their verdicts say so in "
        "judge_json.refused)",
        "the judge's replies say fake-judge-2026-01-01 answered, not fake-judge",
    ]
    assert all("temperature" not in b for b in server.chat_requests) and len(server.chat_requests) == 6
    for config in _judge_rows(store, report["batch_id"]):
        assert config["refused"] == ["temperature"] and config["reply_models"] == ["fake-judge-2026-01-01"]
        assert config["asked"]["temperature"] == 0.0, "what was asked for is kept beside what was refused"
    for row in Store.open(store).read("judge_cache").to_pylist():
        call = json.loads(row["judge_json"])
        assert call["sent"] == {"max_tokens": 16} and call["refused"] == ["temperature"]


def test_a_refused_reply_budget_is_not_dropped_and_gives_no_verdict(store: Path) -> None:
    """Only sampling parameters are dropped: a refused ``max_tokens`` (or anything else) fails the calls."""
    before = files_of(store)
    with FakeOpenAI(refuses=("max_tokens",)) as server:
        report = _fuzzy(store, server, exit_code=1)
    assert len(report["unscored"]) == 4 and all(
        "Unsupported value: 'max_tokens'" in u["reason"] for u in report["unscored"]
    )
    assert files_of(store) == before


def test_only_the_run_with_an_unscored_episode_goes_unwritten(store: Path) -> None:
    """The right answers' judgments are cached; the endpoint then fails for the wrong ones."""
    with FakeOpenAI() as server:
        rescore_json(
            store,
            "--evaluator",
            "fuzzy",
            "--run",
            "judged",
            "--judge-model",
            "fake-judge",
            "--judge-base-url",
            server.url,
            env=KEY,
        )
        server.always_fail = True
        report = _fuzzy(store, server, exit_code=1)
    assert {u["run_id"] for u in report["unscored"]} == {"judged-wrong"}
    assert [Path(f).parent.name for f in report["files"]] == ["run_id=judged"]
    assert not list((store / "scores" / "run_id=judged-wrong").glob(f"{report['batch_id']}*")), (
        "no file of this batch for the run with an unscored episode"
    )
    assert {b["name"]: b["episodes"] for b in report["buckets"]}["overall"] == 2


def test_unclear_replies_are_recorded_not_guessed(store: Path) -> None:
    with FakeOpenAI(judge_reply="Probably, yes.") as server:
        report = _fuzzy(store, server)
    assert set(verdicts(report).values()) == {"unclear"}


def test_parse_verdict_is_strict() -> None:
    assert [parse_verdict(r) for r in ("Yes", "yes.", " **YES** it is", "No", "no, never", "'No'")] == [
        "pass"
    ] * 3 + ["fail"] * 3
    assert [parse_verdict(r) for r in ("", None, "Maybe", "Y", "Yes/No", "I think yes", "Nope")] == [
        "unclear"
    ] * 7


def test_the_prompt_is_the_papers() -> None:
    assert PROMPT == 'Given the statement "{pred}", would it be correct to infer "{reference}"? Yes or No'
    assert FUZZY_PROMPT_VERSION == "fuzzy-1", "a changed question or reading of it is a new prompt version"
    assert (
        judge_prompt("a {b}", "c")
        == 'Given the statement "a {b}", would it be correct to infer "c"? Yes or No'
    )


# -- the evaluator rules on hand-made episodes ---------------------------------------------------


def _episode(task: dict[str, Any], urls: list[str], answer: str | None) -> EpisodeView:
    full = {
        "intent": "x",
        "start_url": urls[0] if urls else "",
        "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["42"]}},
        **task,
    }
    steps = tuple(StepView(i, u) for i, u in enumerate(urls))
    return EpisodeView("r", "e", task_from_dict(full, "t/1"), {"final_answer": answer}, steps)


def test_hops_queue_completes_one_hop_per_step_in_order() -> None:
    task = {
        "procedure": ["a", "b", "end"],
        "mmina_hops": [
            {"reference_url": "http://x/1", "answer": "1"},
            {"reference_url": "http://x/1", "answer": "42"},
        ],
    }
    one_visit = Hops().score(_episode(task, ["http://x/1"], None))
    assert [s.verdict for s in one_visit] == ["pass", "fail", "fail"]
    two_visits = Hops().score(_episode(task, ["http://x/1", "http://x/1"], "42"))
    assert [s.verdict for s in two_visits] == ["pass", "pass", "pass"]
    out_of_order = Hops().score(
        _episode(
            {**task, "mmina_hops": [{"reference_url": "http://x/1"}, {"reference_url": "http://x/2"}]},
            ["http://x/2", "http://x/1"],
            "0",
        )
    )
    assert [s.verdict for s in out_of_order] == ["pass", "fail", "fail"]


def test_parse_args() -> None:
    assert parse_args(["n=3", "flag=true", "reference=must_include", "s=a=b"]) == {
        "n": 3,
        "flag": True,
        "reference": "must_include",
        "s": "a=b",
    }
    with pytest.raises(EvaluatorError):
        parse_args(["=x"])


# -- third-party evaluators -----------------------------------------------------------------------

CONSTANT = '''
from mmina.evaluators import Score


class Constant:
    """Always the same verdict (a test evaluator shipped by another distribution)."""

    name = "constant"
    version = "7"

    def __init__(self, verdict="pass"):
        self.args = {"verdict": verdict}

    def score(self, episode):
        return [Score(self.args["verdict"], float(self.args["verdict"] == "pass"), \
detail={"steps": len(episode.steps)})]
'''


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    info = site / "mmina_constant-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mmina-constant\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[mmina.evaluators]\nconstant = mmina_constant_eval:Constant\n")
    (site / "mmina_constant_eval.py").write_text(CONSTANT)
    monkeypatch.syspath_prepend(str(site))


def test_entry_point_evaluator_is_found_by_name(third_party: None, store: Path) -> None:
    assert "constant" in names()
    assert get("constant", verdict="fail").args == {"verdict": "fail"}
    first = rescore_json(store, "--evaluator", "constant", "--run", "oracle")
    second = rescore_json(store, "--evaluator", "constant", "--arg", "verdict=fail", "--run", "oracle")
    assert set(verdicts(first).values()) == {"pass"} and len(second["flips"]) == 4
    row = stored_rows(store, second["batch_id"])[0]
    assert (row["evaluator"], row["evaluator_version"], row["args_json"]) == (
        "constant",
        "7",
        '{"verdict": "fail"}',
    )
    listing = CliRunner().invoke(cli, ["rescore", "--list", "--format", "json"])
    assert {
        "evaluator": "constant",
        "version": "7",
        "description": "Always the same verdict (a test evaluator shipped by another distribution).",
    } in json.loads(listing.stdout)


def test_evaluators_import_no_heavy_dependencies() -> None:
    code = (
        "import sys, mmina.evaluators, mmina.evaluators.rescore; "
        "print(sorted(m for m in ('playwright', 'duckdb', 'click', 'rich', 'openai') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_scores_are_read_back_with_the_documented_latest_query(store: Path) -> None:
    rescore_json(store, "--evaluator", "hops", "--run", "wrong")
    newest = rescore_json(store, "--evaluator", "hops", "--run", "wrong")
    rows = run_query(
        Store.open(store),
        """
        select level, count(*) from (
            select * from scores where evaluator = 'hops' and run_id = 'wrong'
            qualify batch_id = first_value(batch_id) over (partition by episode_id, evaluator
                                                           order by scored_at desc, batch_id desc))
        group by level order by level""",
    ).rows
    assert rows == [("hop", 10), ("task", 4)]
    assert {r["batch_id"] for r in stored_rows(store, newest["batch_id"])} == {newest["batch_id"]}
    view = run_query(
        Store.open(store),
        """
        select level, count(*), count(distinct batch_id), any_value(batch_id) from latest_scores
        where evaluator = 'hops' and run_id = 'wrong' group by level order by level""",
    ).rows
    assert view == [("hop", 10, 1, newest["batch_id"]), ("task", 4, 1, newest["batch_id"])]
    assert isinstance(Score("pass", 1.0), Score)
