"""`mmina report` over a really recorded run of an imperfect agent whose tables are known by
construction (tests.agents_for_tests.SeededMistakes), and the documented SQL for every table (docs/analysis.md)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.evaluators.base import EvaluatorError
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.recorder.recording import RecordConfig, record_run
from mmina.stats import mcnemar_exact, wilson
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.taskcheck import load_suite
from tests import rescore_reference
from tests.agents_for_tests import SeededMistakes
from tests.built_once import built_once
from tests.docs_pages import page

TASKS = (
    "wikipedia/1",
    "normal/2",
    "normal/3",
    "normal/24",
    "compare/5",
    "normal/32",
    "normal/38",
    "multi567/1",
    "multi567/4",
)
B_TASKS = ("wikipedia/1", "normal/2", "normal/3", "compare/5")
# task: (hops passed, task passed, first failure, failure modes) — what the seeded mistakes make.
EXPECTED: dict[str, tuple[int, bool, str, set[str]]] = {
    "wikipedia/1": (1, True, "passed", set()),
    "normal/2": (0, False, "1", {"wrong_answer"}),
    "normal/3": (0, False, "1", {"unparsable"}),
    "normal/24": (1, False, "2", {"wandered", "wrong_answer"}),
    "compare/5": (2, True, "passed", set()),
    "normal/32": (1, False, "2", {"lingered", "out_of_budget"}),
    "normal/38": (2, False, "3", {"error"}),
    "multi567/1": (3, False, "4", {"action_error", "wrong_answer"}),
    "multi567/4": (6, False, "answer", {"wrong_answer"}),
}
SUITE = {t.task_id: t for t in load_suite().tasks}


def recorded_store() -> Path:
    """Recorded once per test run (``tests/built_once.py``): run ``seeded`` (9 tasks), run
    ``seeded-b`` (4), scored by ``hops``. Read only: a test that writes copies it."""
    return built_once("report-seeded", _record_seeded) / "store"


def _record_seeded(folder: Path) -> None:
    store = folder / "store"
    record_run(
        Store.open(store, create=True),
        RecordConfig(task_ids=TASKS, agent="tests.agents_for_tests:SeededMistakes", run_id="seeded"),
    )
    record_run(
        Store.open(store, create=True),
        RecordConfig(task_ids=B_TASKS, agent="tests.agents_for_tests:SeededMistakesB", run_id="seeded-b"),
    )
    assert rescore(Store.open(store), RescoreConfig(evaluator="hops")).ok


@pytest.fixture(scope="module")
def store() -> Path:
    return recorded_store()


def mmina(*args: str, exit_code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == exit_code, result.output
    return result.output


def report_json(store: Path, *args: str) -> dict[str, Any]:
    return json.loads(mmina("report", "--store", str(store), "--run", "seeded", "--format", "json", *args))


def documented_sql() -> dict[str, str]:
    """Each report table's query as docs/analysis.md gives it."""
    text = page("analysis.md")
    return dict(re.findall(r"<!-- report-sql: (\w+) -->\n```sql\n(.*?)```", text, re.S))


def sql_rows(store: Path, name: str, run: str = "seeded") -> list[dict[str, Any]]:
    """The documented query of a table, restricted to one run the way the page says."""
    query = documented_sql()[name].replace(
        "episode_scores where evaluator", f"episode_scores where run_id = '{run}' and evaluator"
    )
    query = query.replace("where l.evaluator = 'hops'", f"where s.run_id = '{run}' and l.evaluator = 'hops'")
    query = query.replace("where s.evaluator = 'hops'", f"where s.run_id = '{run}' and s.evaluator = 'hops'")
    result = run_query(Store.open(store), query)
    return [dict(zip(result.columns, row)) for row in result.rows]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(a - b) < 1e-9
    return a == b


def assert_matches_sql(report: list[dict[str, Any]], sql: list[dict[str, Any]]) -> None:
    """Every column the SQL gives equals the report's, row by row (as sets: orders may differ)."""
    assert len(report) == len(sql)
    key = lambda r: json.dumps([r[c] for c in sql[0]] if sql else [], default=str)  # noqa: E731
    for mine in report:
        match = [s for s in sql if all(same(mine[c], s[c]) for c in s)]
        assert match, f"no SQL row equals {mine}; SQL rows: {sorted(sql, key=key)}"


def test_seeded_mistakes_score_at_once_as_one_by_one(store: Path, tmp_path: Path) -> None:
    """Errors, unparsable outputs, budgets, action errors: every deterministic evaluator writes
    what scoring each of these recorded episodes on its own gives."""
    copy = Store.open(shutil.copytree(store, tmp_path / "store"))
    for name, args in rescore_reference.DETERMINISTIC:
        if name == "exact_match":  # no built-in task has an exact_match reference: nothing to judge, refused
            with pytest.raises(EvaluatorError, match="nothing to judge in 13 task"):
                rescore(copy, RescoreConfig(evaluator=name, args=args))
            continue
        rescore_reference.check(copy, rescore(copy, RescoreConfig(evaluator=name, args=args)))


def test_mistakes_are_seeded_as_expected() -> None:
    """The table of expectations is derived from the agent's mistakes, not from a run."""
    for task_id, (hops, passed, _, _) in EXPECTED.items():
        mistake = SeededMistakes.MISTAKES.get(task_id)
        assert passed == (mistake is None)
        assert hops == (mistake[0] if mistake else SUITE[task_id].n_hops)


def test_success_by_bucket(store: Path) -> None:
    rows = {r["bucket"]: r for r in report_json(store)["tables"]["sr_by_bucket"]}
    buckets = {
        "1": ["wikipedia/1", "normal/2", "normal/3"],
        "2-4": ["normal/24", "compare/5", "normal/32", "normal/38"],
        "5+": ["multi567/1", "multi567/4"],
        "overall": list(TASKS),
    }
    assert list(rows) == list(buckets)
    for bucket, tasks in buckets.items():
        passed = sum(EXPECTED[t][1] for t in tasks)
        hops = sum(SUITE[t].n_hops for t in tasks)
        hops_passed = sum(EXPECTED[t][0] for t in tasks)
        row = rows[bucket]
        assert (row["tasks"], row["tasks_passed"], row["hops"], row["hops_passed"]) == (
            len(tasks),
            passed,
            hops,
            hops_passed,
        )
        assert row["task_sr"] == pytest.approx(passed / len(tasks))
        assert (row["task_sr_lo"], row["task_sr_hi"]) == pytest.approx(wilson(passed, len(tasks)))
        assert row["hop_sr"] == pytest.approx(hops_passed / hops)
    assert rows["overall"]["task_sr"] == pytest.approx(2 / 9) and rows["overall"]["hop_sr"] == pytest.approx(
        16 / 25
    )
    assert_matches_sql(list(rows.values()), sql_rows(store, "sr_by_bucket"))


def test_hop_positions(store: Path) -> None:
    rows = report_json(store)["tables"]["hop_positions"]
    expected = []
    for n in sorted({SUITE[t].n_hops for t in TASKS}):
        tasks = [t for t in TASKS if SUITE[t].n_hops == n]
        for hop in range(1, n + 1):
            passed = sum(EXPECTED[t][0] >= hop for t in tasks)
            reached = sum(EXPECTED[t][0] >= hop - 1 for t in tasks)
            expected.append((n, hop, len(tasks), passed, reached, passed))
    assert [
        (r["n_hops"], r["hop"], r["tasks"], r["passed"], r["reached"], r["passed_after_previous"])
        for r in rows
    ] == expected
    three = {r["hop"]: r for r in rows if r["n_hops"] == 3}
    assert (three[1]["sr"], three[2]["sr"], three[2]["conditional_sr"], three[3]["conditional_sr"]) == (
        1,
        0,
        0,
        None,
    )
    assert_matches_sql(rows, sql_rows(store, "hop_positions"))


def test_first_failures(store: Path) -> None:
    rows = report_json(store)["tables"]["first_failures"]
    expected: dict[tuple[int, str], int] = {}
    for task in TASKS:
        key = (SUITE[task].n_hops, EXPECTED[task][2])
        expected[key] = expected.get(key, 0) + 1
    assert {(r["n_hops"], r["first_failure"]): r["tasks"] for r in rows} == expected
    assert all(r["share"] == pytest.approx(r["tasks"] / r["of_tasks"]) for r in rows)
    assert_matches_sql(rows, sql_rows(store, "first_failures"))


def test_failure_modes(store: Path) -> None:
    tables = report_json(store)["tables"]
    per_episode = tables["episode_failures"]
    modes = [
        m
        for m in per_episode[0]
        if m not in ("run_id", "episode_id", "task_id", "n_hops", "hops_passed", "stop_reason")
    ]
    assert {r["task_id"]: {m for m in modes if r[m]} for r in per_episode} == {
        t: m for t, (_, passed, _, m) in EXPECTED.items() if not passed
    }
    counts = {r["mode"]: (r["episodes"], r["failed"]) for r in tables["failure_modes"]}
    assert counts == {m: (sum(m in e[3] for e in EXPECTED.values()), 7) for m in modes}
    assert_matches_sql(per_episode, sql_rows(store, "episode_failures"))


def test_per_site_actions_and_cost(store: Path) -> None:
    tables = report_json(store)["tables"]
    sites: dict[str, list[int]] = {}
    for task in TASKS:
        for hop in SUITE[task].hops:
            sites.setdefault(hop.keyword, [0, 0])[0] += 1
            sites[hop.keyword][1] += hop.index < EXPECTED[task][0]
    assert {r["site"]: [r["hops"], r["hops_passed"]] for r in tables["per_site"]} == sites
    assert_matches_sql(tables["per_site"], sql_rows(store, "per_site"))
    steps = {
        r["task_id"]: r
        for r in mmina_json_sql(store, "select task_id, n_steps from episodes where run_id = 'seeded'")
    }
    for task in ("wikipedia/1", "compare/5"):  # the oracle's script, one step per action
        assert steps[task]["n_steps"] == len(SUITE[task].reference_script)
    assert (steps["normal/2"]["n_steps"], steps["normal/3"]["n_steps"]) == (1, 3)
    one = next(r for r in tables["actions_by_hops"] if r["n_hops"] == 1)
    assert (one["tasks"], one["min_steps"], one["max_steps"], one["mean_steps_passed"]) == (3, 1, 3, 3)
    assert_matches_sql(tables["actions_by_hops"], sql_rows(store, "actions_by_hops"))
    overall = next(r for r in tables["cost"] if r["bucket"] == "overall")
    total_steps = sum(r["n_steps"] for r in steps.values())
    assert overall["mean_prompt_tokens"] == pytest.approx(100 * total_steps / 9)
    assert overall["total_cost_usd"] == pytest.approx(0.001 * total_steps)
    assert_matches_sql(tables["cost"], sql_rows(store, "cost"))


def test_hop_cost_puts_every_step_on_one_hop_and_prices_a_passed_hop(store: Path) -> None:
    """Every step (110 tokens, $0.001 each) lands on exactly one hop the episode reached; the
    hops reached are those passed and the one after; the documented SQL gives the same cells."""
    rows = report_json(store, "--table", "hop_cost")["tables"]["hop_cost"]
    cells = [r for r in rows if r["n_hops"] != "all"]
    (total,) = mmina_json_sql(store, "select sum(n_steps) as steps from episodes where run_id = 'seeded'")
    total_steps = total["steps"]
    reached = sum(min(hops + 1, SUITE[task].n_hops) for task, (hops, *_) in EXPECTED.items())
    everything = rows[-1]
    assert (everything["n_hops"], everything["hop"], everything["reached"]) == ("all", "all", reached)
    assert everything["passed"] == sum(hops for hops, *_ in EXPECTED.values())
    assert sum(r["reached"] * r["mean_steps"] for r in cells) == pytest.approx(total_steps)
    assert sum(r["reached"] * r["mean_tokens"] for r in cells) == pytest.approx(110 * total_steps)
    assert everything["cost_per_pass_usd"] == pytest.approx(0.001 * total_steps / everything["passed"])
    assert_matches_sql(cells, sql_rows(store, "hop_cost"))


def mmina_json_sql(store: Path, query: str) -> list[dict[str, Any]]:
    return json.loads(mmina("sql", "--store", str(store), query, "--format", "json"))


def test_documented_sql_runs_through_mmina_sql(store: Path) -> None:
    """The documented queries run as they are with `mmina sql` (all runs of the store)."""
    rows = mmina_json_sql(store, documented_sql()["sr_by_bucket"])
    overall = rows[-1]
    assert overall["bucket"] == "overall" and overall["tasks"] == 13 and overall["tasks_passed"] == 2 + 3


def test_formats_show_the_same_numbers(store: Path, tmp_path: Path) -> None:
    data = report_json(store)
    csv_text = mmina(
        "report", "--store", str(store), "--run", "seeded", "--format", "csv", "--table", "sr_by_bucket"
    )
    lines = csv_text.strip().splitlines()
    assert lines[0].split(",")[:4] == ["bucket", "tasks", "tasks_passed", "task_sr"]
    assert lines[-1].split(",")[3] == str(data["tables"]["sr_by_bucket"][-1]["task_sr"])
    mmina("report", "--store", str(store), "--format", "csv", "--output", str(tmp_path / "tables"))
    assert {p.stem for p in (tmp_path / "tables").iterdir()} == set(data["tables"])
    terminal = mmina("report", "--store", str(store), "--run", "seeded", "--table", "sr_by_bucket")
    assert "22.2%" in terminal and "64.0%" in terminal and "Wilson" in terminal


def test_missing_scores_suggest_the_rescore_command(store: Path, tmp_path: Path) -> None:
    output = mmina("report", "--store", str(store), "--evaluator", "must_include", exit_code=1)
    assert output.count("\n") == 1 and output.startswith("Error: ")
    assert "mmina rescore --evaluator must_include --run seeded --run seeded-b" in output
    assert "no run 'nope'" in mmina("report", "--store", str(store), "--run", "nope", exit_code=1)


def test_compare_two_runs_lists_exactly_the_flips(store: Path) -> None:
    data = json.loads(
        mmina("compare", "--run", "seeded", "--run", "seeded-b", "--store", str(store), "--format", "json")
    )
    flips = {(f["task_id"], f["direction"]) for f in data["flips"]}
    assert flips == {("wikipedia/1", "pass→fail"), ("normal/2", "fail→pass"), ("normal/3", "fail→pass")}
    assert (data["paired_tasks"], data["both_passed"], data["both_failed"]) == (4, 1, 0)
    assert data["only_in_a"] == sorted(set(TASKS) - set(B_TASKS)) and data["only_in_b"] == []
    assert data["mcnemar_p"] == pytest.approx(mcnemar_exact(1, 2)) == pytest.approx(1.0)
    query = documented_sql()["flips"].replace("RUN_A", "seeded").replace("RUN_B", "seeded-b")
    assert {(r["task_id"], r["direction"]) for r in mmina_json_sql(store, query)} == flips
    table = mmina("compare", "--run", "seeded", "--run", "seeded-b", "--store", str(store))
    assert "McNemar" in table and "normal/3" in table


def test_compare_two_evaluators_on_one_run(store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    assert rescore(Store.open(copy), RescoreConfig(evaluator="must_include", runs=("seeded",))).ok
    data = json.loads(
        mmina(
            "compare",
            "--run",
            "seeded",
            "--evaluator",
            "hops",
            "--evaluator",
            "must_include",
            "--store",
            str(copy),
            "--format",
            "json",
        )
    )
    # must_include passes every task whose answer holds the references: the two the oracle answered.
    assert data["paired_tasks"] == 9 and data["flips"] == [] and data["mcnemar_p"] == 1.0
    assert "two different sides" in mmina("compare", "--run", "seeded", "--store", str(copy), exit_code=1)


def test_wilson_and_mcnemar_known_values() -> None:
    assert wilson(0, 0) == (None, None)
    low, high = wilson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(0, 6) == pytest.approx(2 / 64)
