"""One vocabulary across commands (old names still work, with a warning), --format offering
what its help says, and honest scores when an evaluator has nothing to judge."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.store import Store
from tests.fake_openai import FakeOpenAI
from tests.store_helpers import episode_row, judged_task_row, run_row, step_row
from tests.test_cli_start import every_command

KEY = {"OPENAI_API_KEY": "sk-test"}
TASKS = [judged_task_row("normal/1", {"must_include": ["tea"]}, reference_url="http://site1.test/"),
         judged_task_row("normal/2", {"must_include": ["tea"]})]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs of two tasks with must_include references (no fuzzy_match), one with a reference_url."""
    root = tmp_path_factory.mktemp("vocabulary") / "store"
    opened = Store.open(root, create=True)
    for run_id, answer in (("run-a", "green tea"), ("run-b", "coffee")):
        opened.begin_run(run_id, run_row(task_count=2), TASKS)
        for task in ("normal/1", "normal/2"):
            writer = opened.episode_writer(run_id, f"{run_id}-{task[-1]}")
            writer.add_step(step_row(0, url="http://site0.test/"))
            writer.add_step(step_row(1, url="http://site1.test/"))
            writer.commit(episode_row(task, final_answer=answer))
    return root


def invoke(store: Path, *args: str, exit_code: int = 0, env: dict[str, str] | None = None) -> Any:
    result = CliRunner().invoke(cli, [*args, "--store", str(store)], env=env)
    assert result.exit_code == exit_code, result.output
    return result


def scores(store: Path) -> int:
    return Store.open(store).read("scores", columns=["episode_id"]).num_rows


# -- old names -------------------------------------------------------------------------------------

def test_old_judge_names_work_with_a_warning(store: Path, tmp_path: Path) -> None:
    with FakeOpenAI() as server:
        result = invoke(store, "rescore", "--evaluator", "fuzzy", "--arg", "reference=must_include", "--judge-model",
                        "j", "--base-url", server.url, "--run", "run-a", env=KEY)
    assert server.requests, "the old --base-url reached the judge"
    assert "Warning: --base-url is an old name; use --judge-base-url" in result.stderr
    both = invoke(store, "rescore", "--evaluator", "hops", "--judge-concurrency", "2", "--concurrency", "3",
                  exit_code=2)
    assert "give --judge-concurrency or its old name --concurrency, not both" in both.output
    value_judge = invoke(store, "eval-steps", "--run", "run-a", "--report-only", "--value-judge", "j",
                         "--judge-model", "j", exit_code=2)
    assert "give --judge-model or its old name --value-judge, not both" in value_judge.output


def test_positional_ids_of_compare_and_view_still_work_with_a_warning(store: Path, tmp_path: Path) -> None:
    invoke(store, "rescore", "--evaluator", "must_include")
    old = invoke(store, "compare", "run-a", "run-b", "--evaluator", "must_include", "--format", "json")
    new = invoke(store, "compare", "--run", "run-a", "--run", "run-b", "--evaluator", "must_include", "--format", "json")
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert "Warning: RUN_A [RUN_B] as arguments is an old form; use --run A --run B" in old.stderr
    out = tmp_path / "episode.html"
    viewed = invoke(store, "view", "run-a-1", "--out", str(out))
    assert out.exists() and "use --episode ID" in viewed.stderr


def test_help_shows_only_the_new_names() -> None:
    for command, old in ((["rescore"], ("--base-url", "--concurrency", "--model-deadline", "--model-retries")),
                         (["eval-steps"], ("--value-judge",))):
        text = CliRunner().invoke(cli, [*command, "--help"]).output
        assert not [name for name in old if re.search(rf"(?<![\w-]){name}\b", text)], command
        assert "--judge-model" in text and "--judge-base-url" in text and "--judge-concurrency" in text


def test_every_format_option_offers_what_its_help_says() -> None:
    for path in every_command():
        command = cli
        for name in path:
            command = command.get_command(click.Context(command), name)
        option = next((p for p in command.params if p.name == "fmt"), None)
        if option is None:
            continue
        offered = set(option.type.choices)
        help_text = option.help or ""
        assert {f for f in ("csv", "json") if re.search(rf"\b{f}\b", help_text)} <= offered, path
        if path[0] in ("import", "export"):  # a summary of what was written: a line or its json
            assert offered == {"table", "json"}, path
        elif path != ("serve",):
            assert {"table", "csv", "json"} <= offered, path


def test_compare_prints_rates_as_percentages(store: Path) -> None:
    invoke(store, "rescore", "--evaluator", "hops")
    table = invoke(store, "compare", "--run", "run-a", "--run", "run-b").stdout
    header = next(line for line in table.splitlines() if "hop_sr" in line)
    assert "hop_sr [95% CI]" in header and "task_sr [95% CI]" in header
    row = next(line for line in table.splitlines() if "run-a" in line)
    assert re.search(r"\d+\.\d% \[\d+%–\d+%\].*\d+\.\d% \[\d+%–\d+%\]", row), row


# -- nothing to judge ----------------------------------------------------------------------------

def test_an_evaluator_with_nothing_to_judge_refuses_with_a_hint(store: Path) -> None:
    before = scores(store)
    result = invoke(store, "rescore", "--evaluator", "fuzzy", "--judge-model", "j", env=KEY, exit_code=1)
    assert result.output.count("\n") == 1 and "nothing to judge in 4 task(s)" in result.output
    assert "the tasks have must_include in 4, url_match in 2: try --arg reference=must_include" in result.output
    assert scores(store) == before


def test_an_episode_with_nothing_to_judge_is_na_and_in_no_rate(store: Path, tmp_path: Path) -> None:
    data = json.loads(invoke(store, "rescore", "--evaluator", "url_match", "--run", "run-a", "--format",
                             "json").stdout)
    verdicts = {e["task_id"]: e["verdict"] for e in data["episodes"]}
    assert verdicts == {"normal/1": "pass", "normal/2": "n/a"}
    overall = data["buckets"][-1]
    assert (overall["episodes"], overall["tasks_na"], overall["tasks_passed"], overall["task_sr"]) == (2, 1, 1, 1.0)
    report = invoke(store, "report", "--run", "run-a", "--evaluator", "url_match")
    assert "1 task(s) (and 1 with nothing to judge (n/a): in no rate)" in report.stdout
    table = json.loads(invoke(store, "report", "--run", "run-a", "--evaluator", "url_match", "--format",
                              "json").stdout)["tables"]["sr_by_bucket"]
    assert (table[-1]["tasks"], table[-1]["task_sr"]) == (1, 1.0)


def test_a_batch_with_nothing_judged_reports_a_dash_not_zero(store: Path) -> None:
    """A batch of n/a verdicts only (as another evaluator may write): no rate, shown as –."""
    rows = [{"episode_id": f"run-b-{i}", "task_id": f"normal/{i}", "evaluator": "mine", "evaluator_version": "1",
             "args_json": "{}", "level": "task", "hop": None, "step_index": None, "verdict": "n/a", "value": 0.0,
             "detail_json": "{}", "batch_id": "b-na", "scored_at": episode_row()["started_at"]} for i in (1, 2)]
    Store.open(store).append("scores", rows, stem="b-na", run_id="run-b")
    table = invoke(store, "report", "--run", "run-b", "--evaluator", "mine", "--table", "sr_by_bucket").stdout
    overall = next(line for line in table.splitlines() if "overall" in line)
    assert "–" in overall and "0.0%" not in overall and "with nothing to judge" in table
    data = json.loads(invoke(store, "report", "--run", "run-b", "--evaluator", "mine", "--format", "json").stdout)
    assert (data["tables"]["sr_by_bucket"][-1]["tasks"], data["tables"]["sr_by_bucket"][-1]["task_sr"]) == (0, None)


# -- wording: did you mean, plurals, SQL errors ------------------------------------------------------

def test_a_mistyped_command_is_offered_the_nearest_of_every_command() -> None:
    """Commands are imported when used, so click alone offered only those loaded already."""
    for typed, meant in ((["recrd"], "record"), (["store", "verfy"], "verify"), (["export", "wac"], "wacz")):
        result = CliRunner().invoke(cli, typed)
        assert result.exit_code == 2 and f"'{meant}'" in result.output and "Did you mean" in result.output, typed


def test_counts_take_the_right_number(store: Path) -> None:
    from mmina.errors import plural

    assert (plural(1, "retry", "retries"), plural(2, "retry", "retries"), plural(0, "run")) == \
        ("1 retry", "2 retries", "0 runs")
    assert ": 2 runs, 4 episodes, 8 steps" in invoke(store, "store", "info").output


def test_a_query_naming_what_is_not_there_points_to_the_schema(store: Path) -> None:
    table = invoke(store, "sql", "select * from episode", exit_code=1).output
    assert 'Did you mean "episodes"?' in table and "mmina sql --schema" in table
    column = invoke(store, "sql", "select nosuch from episodes", exit_code=1).output
    assert "nosuch" in column and "mmina sql --schema" in column
