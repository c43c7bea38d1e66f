"""Repeated runs and cost per hop: ``mmina record --repeats K`` on the fixture web with a seeded
noisy oracle (15 real episodes; 30 with MMINA_HEAVY=1), the report's repeats, consistency, flaky_tasks and hop_cost
tables checked against the store, resume and compare over repeats; the estimators against
enumeration and scipy."""

from __future__ import annotations

import json
import shutil
from itertools import combinations
from math import comb
from pathlib import Path
from statistics import mean
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mmina.agents.protocol import agent_seed
from mmina.analysis.data import Episode, HopVerdict, StepRow
from mmina.analysis.hop_cost import episode_spend
from mmina.analysis.html import report_sections
from mmina.analysis.names import REPEAT_TABLES
from mmina.analysis.report import build_report
from mmina.cli import cli
from mmina.models.model_input import load_request
from mmina.stats import nested_bootstrap, pass_at_k, pass_hat_k
from mmina.store import Store
from mmina.store.sql import run_query
from tests.built_once import built_once
from tests.fake_openai import FakeOpenAI
from tests.heavy import sized
from tests.test_report import assert_matches_sql, documented_sql

TASKS = sized(
    ("compare/1", "normal/13", "normal/14", "normal/16", "normal/24"),
    (
        "compare/1",
        "compare/2",
        "compare/3",
        "compare/4",
        "normal/13",
        "normal/14",
        "normal/16",
        "normal/18",
        "normal/24",
        "normal/32",
    ),
)
"""The default run records 5 tasks × 3 (15 episodes); MMINA_HEAVY=1 the issue's 10 × 3."""
REPEATS = 3
EPISODES = len(TASKS) * REPEATS
RUN = "noisy"


def invoke(store: Path, *args: str, exit_code: int = 0) -> Result:
    result = CliRunner().invoke(cli, [*args, "--store", str(store)])
    assert result.exit_code == exit_code, result.output
    return result


def as_json(store: Path, *args: str) -> Any:
    return json.loads(invoke(store, *args, "--format", "json").stdout)


# -- the estimators ------------------------------------------------------------------------------


def test_pass_at_k_and_pass_hat_k_are_the_enumerated_means() -> None:
    """Every subset of k of n repeats, c of them passed: pass@k is the share of subsets with a
    pass, pass^k the share with passes only (the estimators are unbiased because they are exact)."""
    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(combinations(outcomes, k))
                assert pass_at_k(n, c, k) == pytest.approx(mean(any(s) for s in subsets))
                assert pass_hat_k(n, c, k) == pytest.approx(mean(all(s) for s in subsets))
            assert pass_at_k(n, c, n + 1) is None and pass_hat_k(n, c, n + 1) is None


def _binomial_quantile(n: int, p: float, share: float) -> float:
    """The ``share`` quantile of Binomial(n, p) / n, exactly (the bootstrap distribution of a
    mean of n pass/fail values, c of them passes, is Binomial(n, c / n) / n)."""
    total = 0.0
    for k in range(n + 1):
        total += comb(n, k) * p**k * (1 - p) ** (n - k)
        if total >= share:
            return k / n
    return 1.0


def test_nested_bootstrap_is_the_exact_bootstrap_of_one_repeat_and_widens_with_repeats() -> None:
    values = [1.0] * 23 + [0.0] * 17
    lo, hi = nested_bootstrap([[(v, 1.0)] for v in values], resamples=4000, seed=1)
    assert lo == pytest.approx(_binomial_quantile(40, 23 / 40, 0.025), abs=0.026)
    assert hi == pytest.approx(_binomial_quantile(40, 23 / 40, 0.975), abs=0.026)
    assert nested_bootstrap([[(v, 1.0)] for v in values], resamples=200, seed=5) == nested_bootstrap(
        [[(v, 1.0)] for v in values], resamples=200, seed=5
    )
    steady = nested_bootstrap([[(1.0, 1.0)] * 3, [(0.0, 1.0)] * 3] * 10, resamples=2000)
    flaky = nested_bootstrap(
        [[(1.0, 1.0), (1.0, 1.0), (0.0, 1.0)], [(0.0, 1.0), (0.0, 1.0), (1.0, 1.0)]] * 10, resamples=2000
    )
    assert (
        steady[1] - steady[0] > flaky[1] - flaky[0] > 0
    )  # steady tasks spread most; flaky ones add run noise
    assert nested_bootstrap([]) == (None, None)


def test_agent_seeds_are_stable_and_differ_per_repeat() -> None:
    assert agent_seed("normal/1", 1) == 1171975365  # the same in every process and on every machine
    seeds = {agent_seed(task, attempt) for task in TASKS for attempt in range(1, 4)}
    assert len(seeds) == len(TASKS) * 3 and all(0 <= s < 2**31 for s in seeds)


# -- which steps a hop cost ------------------------------------------------------------------


def _episode(hops: tuple[HopVerdict, ...], steps: int, n_hops: int = 3, passed: bool = False) -> Episode:
    rows = tuple(
        StepRow(
            i,
            f"http://x/{i}",
            "click [1]",
            None,
            tokens=10 * (i + 1),
            cost_usd=0.01,
            agent_ms=100.0,
            wall_ms=1000.0,
        )
        for i in range(steps)
    )
    return Episode(
        run_id="r",
        episode_id="e",
        task_id="t",
        n_hops=n_hops,
        bucket="2-4",
        verdict="fail",
        passed=passed,
        hops_passed=sum(h.passed for h in hops),
        hops_total=len(hops),
        first_failed_hop=None,
        status="completed",
        stop_reason="stop",
        final_answer=None,
        n_steps=steps,
        prompt_tokens=0,
        completion_tokens=0,
        cost_usd=0.0,
        hops=hops,
        steps=rows,
    )


def test_a_step_belongs_to_the_hop_at_the_head_of_the_queue() -> None:
    """Hop 1 completed at step 2 (its observation), hop 2 at step 4, hop 3 failed: steps 0-1 are
    hop 1's, 2-3 hop 2's, 4-6 hop 3's; a passed last hop keeps the steps after it."""
    failed = _episode((HopVerdict(0, True, 2), HopVerdict(1, True, 4), HopVerdict(2, False, None)), steps=7)
    spend = episode_spend(failed)
    assert {hop: (s.reached, s.passed, s.sums[0], s.sums[1]) for hop, s in spend.items()} == {
        1: (1, 1, 2, 10 + 20),
        2: (1, 1, 2, 30 + 40),
        3: (1, 0, 3, 50 + 60 + 70),
    }
    early = episode_spend(
        _episode(
            (HopVerdict(0, False, None), HopVerdict(1, False, None), HopVerdict(2, False, None)), steps=4
        )
    )
    assert list(early) == [1] and early[1].sums[0] == 4  # hops after a failed one are not reached
    done = episode_spend(
        _episode((HopVerdict(0, True, 1), HopVerdict(1, True, 3)), steps=6, n_hops=2, passed=True)
    )
    assert {hop: s.sums[0] for hop, s in done.items()} == {1: 1, 2: 5}


# -- end to end on the fixture web ---------------------------------------------------------------


def _record(folder: Path) -> None:
    store = folder / "store"
    summary = as_json(
        store,
        "record",
        "--task",
        ",".join(TASKS),
        "--repeats",
        str(REPEATS),
        "--error-rate",
        "0.15",
        "--seed",
        "3",
        "--concurrency",
        "4",
        "--run-id",
        RUN,
    )
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture(scope="module")
def recorded() -> tuple[Path, dict[str, Any]]:
    folder = built_once("repeats-noisy", _record)
    return folder / "store", json.loads((folder / "summary.json").read_text())


def _verdicts(store: Path) -> dict[tuple[str, int], bool]:
    rows = run_query(
        Store.open(store), "select task_id, attempt, passed from episode_scores where evaluator = 'hops'"
    )
    return {(task, attempt): passed for task, attempt, passed in rows.rows}


def test_record_repeats_gives_every_task_k_episodes_once(recorded: tuple[Path, dict[str, Any]]) -> None:
    store, summary = recorded
    rows = run_query(Store.open(store), "select task_id, attempt from episodes").rows
    assert sorted(rows) == sorted((task, attempt) for task in TASKS for attempt in range(1, REPEATS + 1))
    assert summary["repeats"] == REPEATS and summary["finished"] == EPISODES and summary["errors"] == 0
    order = [
        (e["task_id"], e["attempt"]) for e in summary["episodes"]
    ]  # every task's first repeat, then the second
    assert order == [(task, attempt) for attempt in range(1, REPEATS + 1) for task in TASKS]
    assert summary["repeats_table"][-1]["episodes"] == EPISODES
    outputs: dict[tuple[str, int], list[str]] = {}
    episodes = run_query(Store.open(store), "select episode_id, task_id, attempt from episodes").rows
    for episode, task, attempt in episodes:
        steps = run_query(
            Store.open(store),
            f"select model_output from steps where episode_id = '{episode}' order by step_index",
        ).rows
        outputs[(task, attempt)] = [s[0] for s in steps]
    assert any(
        len({tuple(outputs[(t, a)]) for a in range(1, 4)}) > 1 for t in TASKS
    )  # the repeats were drawn apart


def test_report_gives_rates_over_repeats_consistency_and_flaky_tasks(
    recorded: tuple[Path, dict[str, Any]],
) -> None:
    store, _ = recorded
    verdicts = _verdicts(store)
    tables = as_json(store, "report", "--run", RUN)["tables"]
    overall = tables["repeats"][-1]
    pooled = sum(verdicts.values()) / EPISODES
    assert (overall["bucket"], overall["tasks"], overall["repeats"], overall["episodes"]) == (
        "overall",
        len(TASKS),
        REPEATS,
        EPISODES,
    )
    assert overall["task_sr"] == pytest.approx(pooled) == tables["sr_by_bucket"][-1]["task_sr"]
    assert overall["task_sr_lo"] < pooled < overall["task_sr_hi"]
    per_repeat = [mean(verdicts[(t, a)] for t in TASKS) for a in (1, 2, 3)]
    assert (overall["task_sr_min"], overall["task_sr_max"]) == pytest.approx(
        (min(per_repeat), max(per_repeat))
    )
    consistency = {r["k"]: r for r in tables["consistency"]}
    counts = {t: sum(verdicts[(t, a)] for a in (1, 2, 3)) for t in TASKS}
    assert consistency[1]["pass_at_k"] == pytest.approx(pooled) == consistency[1]["pass_hat_k"]
    assert consistency[3]["pass_at_k"] == pytest.approx(mean(c > 0 for c in counts.values()))
    assert consistency[3]["pass_hat_k"] == pytest.approx(mean(c == 3 for c in counts.values()))
    flaky = tables["flaky_tasks"]
    assert {r["task_id"] for r in flaky} == {t for t, c in counts.items() if 0 < c < 3} != set()
    assert all(r["passed"] == counts[r["task_id"]] for r in flaky)
    for name in REPEAT_TABLES:  # docs/analysis.md's SQL gives the same rows (the report adds the intervals)
        result = run_query(Store.open(store), documented_sql()[name])
        assert_matches_sql(tables[name], [dict(zip(result.columns, row)) for row in result.rows])


def test_hop_cost_accounts_for_every_step_and_passed_hop(recorded: tuple[Path, dict[str, Any]]) -> None:
    store, _ = recorded
    tables = as_json(store, "report", "--run", RUN, "--table", "hop_cost", "--table", "sr_by_bucket")[
        "tables"
    ]
    rows = tables["hop_cost"]
    steps = run_query(Store.open(store), "select sum(n_steps) from episodes").rows[0][0]
    by_position = [r for r in rows if r["n_hops"] != "all"]
    assert sum(r["reached"] * r["mean_steps"] for r in by_position) == pytest.approx(steps)
    total = rows[-1]
    assert (total["n_hops"], total["hop"], total["passed"]) == (
        "all",
        "all",
        tables["sr_by_bucket"][-1]["hops_passed"],
    )
    assert total["cost_per_pass_usd"] == 0 and total["mean_model_s"] > 0  # the oracle costs nothing but time
    two_hops = sum(1 for t in TASKS if t.startswith("compare/") or t == "normal/24")
    first = next(r for r in by_position if r["n_hops"] == 2 and r["hop"] == 1)
    assert first["reached"] == two_hops * REPEATS and first["steps_per_pass"] >= first["mean_steps"]


def test_resume_records_the_repeats_a_crash_lost_once_and_keeps_the_runs_repeats(
    recorded: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """An episode whose commit never happened (its ``episodes`` file missing, as after a crash)
    is recorded again by ``--resume``, with its repeat number; nothing else is."""
    store = Path(shutil.copytree(recorded[0], tmp_path / "store"))
    lost = next(
        e["episode_id"] for e in recorded[1]["episodes"] if (e["task_id"], e["attempt"]) == (TASKS[1], 2)
    )
    (path,) = (store / "episodes" / f"run_id={RUN}").glob(f"{lost}*.parquet")
    path.unlink()
    assert "partial" in invoke(store, "runs").output
    refused = invoke(store, "record", "--resume", "--run-id", RUN, "--repeats", "2", exit_code=1)
    assert "recorded with --repeats 3" in refused.output and "Traceback" not in refused.output
    rest = as_json(store, "record", "--resume", "--run-id", RUN)
    assert [(e["task_id"], e["attempt"]) for e in rest["episodes"]] == [(TASKS[1], 2)]
    assert len(rest["skipped"]) == EPISODES - 1 and f"{TASKS[0]} (repeat 2)" in rest["skipped"]
    rows = run_query(Store.open(store), "select task_id, attempt from episodes").rows
    assert sorted(rows) == sorted((task, attempt) for task in TASKS for attempt in range(1, REPEATS + 1))
    assert "complete" in invoke(store, "runs").output


def test_compare_pairs_repeats(recorded: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(recorded[0], copy)
    invoke(copy, "rescore", "--evaluator", "must_include", "--run", RUN)
    data = as_json(copy, "compare", "--run", RUN, "--evaluator", "hops", "--evaluator", "must_include")
    verdicts = _verdicts(copy)
    assert data["paired_tasks"] == EPISODES
    assert all(
        verdicts[(f["task_id"], f["repeat"])] == (f["direction"] == "pass→fail") for f in data["flips"]
    )


def test_html_and_serve_sections_show_the_repeats_and_hop_cost(recorded: tuple[Path, dict[str, Any]]) -> None:
    """``mmina serve``'s analysis page and the HTML report show the sections of
    :func:`report_sections` (tests/test_serve.py checks each table's cells in the page)."""
    report = build_report(Store.open(recorded[0]), [RUN])
    shown = {name for _, _, name in report_sections(report)}
    assert {"repeats", "consistency", "flaky_tasks", "hop_cost"} <= shown


def test_the_openai_agent_sends_a_seed_per_repeat_and_hop_cost_counts_its_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --seed, every request of an episode carries one seed of the run's seed, the task and
    the repeat (stored with the step's model input); the hops' tokens add up to the episodes'."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test-key")
    store = tmp_path / "store"
    with FakeOpenAI() as server:
        summary = as_json(
            store,
            "record",
            "--agent",
            "openai",
            "--model",
            "m",
            "--base-url",
            server.url,
            "--temperature",
            "0.7",
            "--task",
            "normal/13",
            "--repeats",
            "2",
            "--seed",
            "5",
        )
        sent = [r.get("seed") for r in server.chat_requests]
    assert summary["finished"] == 2 and summary["errors"] == 0
    expected = {
        attempt: (5 * 1_000_003 + agent_seed("normal/13", attempt)) & 0x7FFFFFFF for attempt in (1, 2)
    }
    assert sent.count(None) == 1  # the endpoint check before the first episode
    assert set(sent) - {None} == set(expected.values()) and len(set(expected.values())) == 2
    stored = run_query(
        Store.open(store), "select e.attempt, s.model_input from steps s join episodes e using (episode_id)"
    ).rows
    blobs = Store.open(store)
    seeds = {
        (attempt, load_request(digest, lambda d: blobs.read_blobs([d])[d])["seed"])
        for attempt, digest in stored
    }
    assert seeds == set(expected.items())
    rows = as_json(store, "report", "--table", "hop_cost")["tables"]["hop_cost"]
    tokens = run_query(Store.open(store), "select sum(prompt_tokens + completion_tokens) from episodes").rows[
        0
    ][0]
    assert rows[-1]["reached"] * rows[-1]["mean_tokens"] == pytest.approx(tokens) and tokens > 0


def test_options_that_cannot_go_together_are_refused_before_anything_starts(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for args, words in (
        (("--prefix-run", "x", "--at-hop", "1", "--repeats", "2"), "does not go with --prefix-run"),
        (("--agent", "heuristic", "--error-rate", "0.2"), "--error-rate is the oracle agent's"),
        (
            (
                "--repeats",
                "0",
            ),
            "0 is not in the range",
        ),
        (
            (
                "--error-rate",
                "1.5",
            ),
            "1.5 is not in the range",
        ),
    ):
        result = invoke(store, "record", *args, exit_code=2)
        assert words in result.output and "Traceback" not in result.output, result.output
    assert not store.exists()
