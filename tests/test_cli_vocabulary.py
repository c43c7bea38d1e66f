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
from mmina.cli.reference import walk
from mmina.store import Store
from tests.fake_openai import FakeOpenAI
from tests.store_helpers import episode_row, judged_task_row, run_row, step_row
from tests.test_cli_start import every_command

KEY = {"OPENAI_API_KEY": "sk-test"}
TASKS = [
    judged_task_row("normal/1", {"must_include": ["tea"]}, reference_url="http://site1.test/"),
    judged_task_row("normal/2", {"must_include": ["tea"]}),
]


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
        result = invoke(
            store,
            "rescore",
            "--evaluator",
            "fuzzy",
            "--arg",
            "reference=must_include",
            "--judge-model",
            "j",
            "--base-url",
            server.url,
            "--run",
            "run-a",
            env=KEY,
        )
    assert server.requests, "the old --base-url reached the judge"
    assert "Warning: --base-url is an old name; use --judge-base-url" in result.stderr
    both = invoke(
        store, "rescore", "--evaluator", "hops", "--judge-concurrency", "2", "--concurrency", "3", exit_code=2
    )
    assert "give --judge-concurrency or its old name --concurrency, not both" in both.output
    value_judge = invoke(
        store,
        "eval-steps",
        "--run",
        "run-a",
        "--report-only",
        "--value-judge",
        "j",
        "--judge-model",
        "j",
        exit_code=2,
    )
    assert "give --judge-model or its old name --value-judge, not both" in value_judge.output


def test_positional_ids_of_compare_and_view_still_work_with_a_warning(store: Path, tmp_path: Path) -> None:
    invoke(store, "rescore", "--evaluator", "must_include")
    old = invoke(store, "compare", "run-a", "run-b", "--evaluator", "must_include", "--format", "json")
    new = invoke(
        store,
        "compare",
        "--run",
        "run-a",
        "--run",
        "run-b",
        "--evaluator",
        "must_include",
        "--format",
        "json",
    )
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert "Warning: RUN_A [RUN_B] as arguments is an old form; use --run A --run B" in old.stderr
    out = tmp_path / "episode.html"
    viewed = invoke(store, "view", "run-a-1", "--out", str(out))
    assert out.exists() and "use --episode ID" in viewed.stderr


def test_help_shows_only_the_new_names() -> None:
    for command, old in (
        (["rescore"], ("--base-url", "--concurrency", "--model-deadline", "--model-retries")),
        (["eval-steps"], ("--value-judge",)),
    ):
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
    assert (
        "the tasks have must_include in 4, url_match in 2: try --arg reference=must_include" in result.output
    )
    assert scores(store) == before


def test_an_episode_with_nothing_to_judge_is_na_and_in_no_rate(store: Path, tmp_path: Path) -> None:
    data = json.loads(
        invoke(store, "rescore", "--evaluator", "url_match", "--run", "run-a", "--format", "json").stdout
    )
    verdicts = {e["task_id"]: e["verdict"] for e in data["episodes"]}
    assert verdicts == {"normal/1": "pass", "normal/2": "n/a"}
    overall = data["buckets"][-1]
    assert (overall["episodes"], overall["tasks_na"], overall["tasks_passed"], overall["task_sr"]) == (
        2,
        1,
        1,
        1.0,
    )
    report = invoke(store, "report", "--run", "run-a", "--evaluator", "url_match")
    assert "1 task(s) (and 1 with nothing to judge (n/a): in no rate)" in report.stdout
    table = json.loads(
        invoke(store, "report", "--run", "run-a", "--evaluator", "url_match", "--format", "json").stdout
    )["tables"]["sr_by_bucket"]
    assert (table[-1]["tasks"], table[-1]["task_sr"]) == (1, 1.0)


def test_a_batch_with_nothing_judged_reports_a_dash_not_zero(store: Path) -> None:
    """A batch of n/a verdicts only (as another evaluator may write): no rate, shown as –."""
    rows = [
        {
            "episode_id": f"run-b-{i}",
            "task_id": f"normal/{i}",
            "evaluator": "mine",
            "evaluator_version": "1",
            "args_json": "{}",
            "level": "task",
            "hop": None,
            "step_index": None,
            "verdict": "n/a",
            "value": 0.0,
            "detail_json": "{}",
            "batch_id": "b-na",
            "scored_at": episode_row()["started_at"],
        }
        for i in (1, 2)
    ]
    Store.open(store).append("scores", rows, stem="b-na", run_id="run-b")
    table = invoke(store, "report", "--run", "run-b", "--evaluator", "mine", "--table", "sr_by_bucket").stdout
    overall = next(line for line in table.splitlines() if "overall" in line)
    assert "–" in overall and "0.0%" not in overall and "with nothing to judge" in table
    data = json.loads(
        invoke(store, "report", "--run", "run-b", "--evaluator", "mine", "--format", "json").stdout
    )
    assert (data["tables"]["sr_by_bucket"][-1]["tasks"], data["tables"]["sr_by_bucket"][-1]["task_sr"]) == (
        0,
        None,
    )


# -- wording: did you mean, plurals, SQL errors ------------------------------------------------------


def test_a_mistyped_command_is_offered_the_nearest_of_every_command() -> None:
    """Commands are imported when used, so click alone offered only those loaded already."""
    for typed, meant in ((["recrd"], "record"), (["store", "verfy"], "verify"), (["export", "wac"], "wacz")):
        result = CliRunner().invoke(cli, typed)
        assert result.exit_code == 2 and f"'{meant}'" in result.output and "Did you mean" in result.output, (
            typed
        )


def test_counts_take_the_right_number(store: Path) -> None:
    from mmina.errors import plural

    assert (plural(1, "retry", "retries"), plural(2, "retry", "retries"), plural(0, "run")) == (
        "1 retry",
        "2 retries",
        "0 runs",
    )
    assert ": 2 runs, 4 episodes, 8 steps" in invoke(store, "store", "info").output


def test_a_query_naming_what_is_not_there_points_to_the_schema(store: Path) -> None:
    table = invoke(store, "sql", "select * from episode", exit_code=1).output
    assert 'Did you mean "episodes"?' in table and "mmina sql --schema" in table
    column = invoke(store, "sql", "select nosuch from episodes", exit_code=1).output
    assert "nosuch" in column and "mmina sql --schema" in column


# -- one vocabulary: one output flag, one task flag, one suite option, one wording for what is not there ---


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None, path
        command = found
    return command


def _visible_options(path: tuple[str, ...]) -> list[click.Option]:
    return [p for p in _command(path).params if isinstance(p, click.Option) and not p.hidden]


def test_every_command_that_writes_calls_its_output_o_or_output(store: Path, tmp_path: Path) -> None:
    writers = {path: [o for o in _visible_options(path) if o.name == "output"] for path in every_command()}
    assert {path for path, found in writers.items() if found} >= {("report",), ("view",), ("export", "warc")}
    for path, found in writers.items():
        assert all(sorted(o.opts) == ["--output", "-o"] for o in found), path
        assert not [o for o in _visible_options(path) if "--out" in o.opts], path
    short = invoke(store, "report", "--run", "run-a", "--format", "json", "-o", str(tmp_path / "short.json"))
    old = invoke(store, "report", "--run", "run-a", "--format", "json", "--out", str(tmp_path / "old.json"))
    assert "old name" not in short.stderr
    assert "Warning: --out is an old name; use --output" in old.stderr
    assert json.loads((tmp_path / "old.json").read_text()) == json.loads(
        (tmp_path / "short.json").read_text()
    )
    both = invoke(store, "report", "--out", str(tmp_path / "a"), "--output", str(tmp_path / "b"), exit_code=2)
    assert "give --output or its old name --out, not both" in both.output


def test_record_names_tasks_with_one_flag_and_the_old_one_still_works(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    expected = "Error: no task 'normal/1x' in suite builtin (did you mean 'normal/1'? see mmina tasks list)"
    new = invoke(fresh, "record", "--task", "normal/2,normal/1x", exit_code=1)
    old = invoke(fresh, "record", "--task-ids", "normal/2,normal/1x", exit_code=1)
    assert expected in new.stderr and "old name" not in new.stderr
    assert expected in old.stderr and "Warning: --task-ids is an old name; use --task" in old.stderr
    both = invoke(fresh, "record", "--task", "normal/1", "--task-ids", "normal/2", exit_code=2)
    assert "give --task or its old name --task-ids, not both" in both.output
    assert not fresh.exists()
    assert [o.opts for o in _visible_options(("record",)) if o.name == "task_ids"] == [["--task"]]


def test_every_command_that_reads_a_suite_takes_tasks_path() -> None:
    for path in every_command():
        suites = [o for o in _visible_options(path) if o.name == "tasks_path"]
        assert all(o.opts == ["--tasks"] for o in suites), path
        assert not [
            p
            for p in _command(path).params
            if isinstance(p, click.Argument) and p.name == "path" and path[0] == "tasks"
        ], path
    for command in ("list", "validate"):
        new = CliRunner().invoke(cli, ["tasks", command, "--tasks", "multi567", "--format", "json"])
        old = CliRunner().invoke(cli, ["tasks", command, "multi567", "--format", "json"])
        assert new.exit_code == old.exit_code == 0, old.output
        assert json.loads(new.stdout) == json.loads(old.stdout) and json.loads(new.stdout)
        assert "Warning: PATH as arguments is an old form; use --tasks PATH" in old.stderr and not new.stderr
        both = CliRunner().invoke(cli, ["tasks", command, "normal", "--tasks", "multi567"])
        assert both.exit_code == 2 and "give the suite once: --tasks PATH" in both.output


def test_the_agent_defaults_differ_only_where_help_says_why() -> None:
    agents = {
        path: next(o for o in _visible_options(path) if o.name == "agent")
        for path in (("record",), ("eval-steps",))
    }
    assert (agents[("record",)].default, agents[("eval-steps",)].default) == ("oracle", "openai")
    assert "not record's default oracle" in (agents[("eval-steps",)].help or "")


UNKNOWN = [
    (["report", "--run", "run-x"], "run", "run-x", "run-[ab]"),
    (["view", "--episode", "run-a-3"], "episode", "run-a-3", "run-a-[12]"),
    (["rescore", "--evaluator", "hops", "--episode", "run-b-3"], "episode", "run-b-3", "run-b-[12]"),
    (["export", "har", "--episode", "run-b-9"], "episode", "run-b-9", "run-b-[12]"),
    (["rescore", "--evaluator", "hop"], "evaluator", "hop", "hops"),
    (["record", "--agent", "oracel", "--task", "normal/1"], "agent", "oracel", "oracle"),
    (["record", "--task", "normal/1x"], "task", "normal/1x", "normal/1"),
]


@pytest.mark.parametrize(
    ("args", "kind", "name", "nearest"), UNKNOWN, ids=[" ".join(c[0][:2]) for c in UNKNOWN]
)
def test_what_is_not_there_is_said_the_same_way_for_every_kind(
    store: Path, tmp_path: Path, args: list[str], kind: str, name: str, nearest: str
) -> None:
    """``no KIND 'NAME' in WHERE (did you mean 'NEAREST'? ...; see COMMAND)``: one line, exit 1."""
    target = tmp_path / "fresh" if args[0] == "record" else store
    result = invoke(target, *args, exit_code=1)
    line = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"Error: no {kind} '{re.escape(name)}'( in [^(]+)? \(did you mean '{nearest}'\? .+\)", line
    ), line
    assert len([entry for entry in result.stderr.splitlines() if entry.startswith("Error:")]) == 1


def test_a_table_the_report_does_not_have_is_said_the_same_way(store: Path) -> None:
    invoke(store, "rescore", "--evaluator", "must_include", "--run", "run-a")
    result = invoke(
        store, "report", "--run", "run-a", "--evaluator", "must_include", "--table", "runner_log", exit_code=1
    )
    assert (
        result.stderr.strip()
        == "Error: no table 'runner_log' in this report (only with --evaluator mmina_official)"
    )


def test_not_found_offers_the_nearest_name_only_when_one_is_close() -> None:
    from mmina.errors import not_found

    assert (
        not_found("run", "nightlx", "/s", ["nightly", "weekly"], "mmina runs")
        == "no run 'nightlx' in /s (did you mean 'nightly'? see mmina runs)"
    )
    assert not_found("episode", "zzz", "/s", ["normal-1-abc"]) == "no episode 'zzz' in /s"
    assert (
        not_found("agent", "x", known=["oracle"], listing="agents: oracle") == "no agent 'x' (agents: oracle)"
    )


def test_a_mistyped_option_is_offered_the_nearest_on_every_command() -> None:
    """Commands are loaded lazily; each still offers click's nearest option for a typo.

    Each command's parameters are read in the context ``--help`` gets (from ``walk``): click caches a
    command's help option the first time it is asked for, so a bare ``click.Context(command)`` (whose
    help names are click's ``--help`` alone, not mmina's ``-h, --help``) would change what every later
    ``--help`` of that command prints in this process."""
    contexts = {tuple(ctx.command_path.split()[1:]): ctx for ctx, _ in walk(cli)}
    for path in [(), *every_command()]:
        command = _command(path)
        known = {n for p in command.get_params(contexts[path]) for n in p.opts}
        typos = [n[:-2] + n[-1] + n[-2] for n in sorted(known) if n.startswith("--") and len(n) > 5]
        typo = next(t for t in typos if t not in known)  # the last two letters swapped
        result = CliRunner().invoke(cli, [*path, typo])
        assert result.exit_code == 2 and f"No such option '{typo}'" in result.output, (path, result.output)
        assert "Did you mean" in result.output or "did you mean" in result.output, (path, result.output)
