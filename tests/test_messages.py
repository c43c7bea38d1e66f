"""Messages that said the wrong thing (issue 52, item 6): each now says what happened and what
to do. Real stores (written by the real writer, or really recorded), the real command line."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.store import Store
from tests.store_helpers import REPO_ROOT, begin, write_episode

DAMAGE_HINT = "restore that file from a backup"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def mmina(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mmina", *args], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=timeout)


def damaged(root: Path, table: str, run_id: str) -> Path:
    """The run's only file of ``table``, cut to its first 50 bytes."""
    [path] = list(root.glob(f"{table}/run_id={run_id}/*.parquet"))
    path.write_bytes(path.read_bytes()[:50])
    return path


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    """Runs r1 and r2 of one committed episode each."""
    store = Store.open(tmp_path / "store", create=True)
    for run_id in ("r1", "r2"):
        begin(store, run_id)
        write_episode(store, run_id, f"ep-{run_id}")
    return tmp_path / "store"


def assert_error_line(result, *parts: str) -> None:
    """One ``Error:`` line holding every part, exit 1, no traceback."""
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert result.exit_code == 1 and len(errors) == 1 and "Traceback" not in result.output, result.output
    assert all(part in errors[0] for part in parts), errors[0]


# -- 1. the only runs file damaged --------------------------------------------------------------


def test_a_store_whose_only_runs_file_is_damaged_says_so_for_rescore_report_and_a_named_run(two_runs: Path) -> None:
    shutil.rmtree(two_runs / "runs" / "run_id=r2")
    runs = damaged(two_runs, "runs", "r1")
    for args in (["rescore", "--evaluator", "hops"], ["report"], ["store", "compact"]):
        result = invoke(*args, "--store", str(two_runs))
        assert_error_line(result, f"{two_runs} holds no readable run: the runs file {runs} cannot be read (",
                          DAMAGE_HINT, "mmina store verify")
        assert "bug in mmina" not in result.output and "holds no runs" not in result.output
    named = invoke("report", "--run", "r1", "--store", str(two_runs))
    assert_error_line(named, f"run r1 cannot be used: the runs file {runs} cannot be read (", DAMAGE_HINT)


def test_beside_a_readable_run_a_damaged_runs_file_is_a_warning_and_the_rest_is_scored(two_runs: Path) -> None:
    runs = damaged(two_runs, "runs", "r1")
    result = invoke("rescore", "--evaluator", "hops", "--store", str(two_runs), "--format", "json")
    assert result.exit_code == 0 and result.stderr.startswith(f"Warning: skipped {runs}: "), result.output
    assert {e["run_id"] for e in json.loads(result.stdout)["episodes"]} == {"r1", "r2"}
    assert json.loads(invoke("report", "--store", str(two_runs), "--format", "json").stdout)["runs"] == ["r2"]


# -- 2. a damaged tasks file ----------------------------------------------------------------------


def test_an_episode_whose_tasks_file_is_damaged_names_the_file(two_runs: Path) -> None:
    tasks = damaged(two_runs, "tasks", "r1")
    result = invoke("rescore", "--evaluator", "hops", "--store", str(two_runs))
    assert_error_line(result, "episode ep-r1 of run r1 has no task normal/1: ",
                      f"the tasks file {tasks} cannot be read (", DAMAGE_HINT)


# -- 3. --browser that is no Chromium -----------------------------------------------------------

POINT = "point --browser (or MMINA_CHROMIUM) at a Chromium executable"


def test_a_browser_that_is_no_chromium_says_so_and_where_to_point(tmp_path: Path) -> None:
    """A plain file, a folder, and a program that runs but is no browser (the real launch):
    never Playwright's "Target page, context or browser has been closed"."""
    plain, program = tmp_path / "hostname", tmp_path / "not-a-browser"
    plain.write_text("box\n")
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    cases = {plain: f"browser executable {plain} is not executable", tmp_path: f"browser executable {tmp_path} is not a file",
             program: f"the browser {program} could not be started: it exited before Playwright could connect to it"}
    for browser, expected in cases.items():
        result = invoke("record", "--task", "normal/1", "--browser", str(browser), "--store", str(tmp_path / "s"))
        assert_error_line(result, expected, POINT)
        assert "has been closed" not in result.output
    assert not (tmp_path / "s" / "episodes").exists()


# -- 4 and 6. task files: what is wrong with a field ------------------------------------------------

TASK = {"intent": "Find the price of the tea.", "start_url": "http://wiki.mmina.test/kiwix/",
        "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["23.75"]}, "reference_url": ""},
        "cnt_hop": 3, "procedure": ["kiwix", "shop", "end"]}


def validate(tmp_path: Path, **fields: object) -> list[str]:
    """``mmina tasks validate`` of one normal task with these fields: the lines about that file."""
    (tmp_path / "normal").mkdir(exist_ok=True)
    path = tmp_path / "normal" / "1.json"
    path.write_text(json.dumps({**TASK, **fields}))
    result = invoke("tasks", "validate", str(tmp_path))
    assert "Traceback" not in result.output, result.output
    return [line.removeprefix(f"{path}: ") for line in result.output.splitlines() if line.startswith(str(path))]


@pytest.mark.parametrize(("count", "said"), [
    (-5, "negative (-5): a hop count is 1 or more (it counts the END marker): ignored"),
    ("-5", "negative ('-5'): a hop count is 1 or more"), (2.5, "not a whole number (2.5): ignored"),
    (True, "not a number but a boolean (True): ignored"), ("three", "not a number ('three'): ignored"),
    ([3], "not a number but a list ([3]): ignored"), (None, "null: ignored")])
def test_a_hop_count_says_why_it_is_no_count(tmp_path: Path, count: object, said: str) -> None:
    [line] = validate(tmp_path, cnt_hop=count)
    assert line.startswith(f"cnt_hop: warning: {said}"), line


@pytest.mark.parametrize(("intent", "said"), [
    (["Find", "the tea"], "must be text, not a list ['Find', 'the tea']"), (7, "must be text, not a number 7"),
    ("  ", "empty"), (None, "null")])
def test_an_intent_that_is_not_text_says_what_it_is(tmp_path: Path, intent: object, said: str) -> None:
    assert validate(tmp_path, intent=intent) == [f"intent: {said} (the instruction for the agent)"]


def test_a_missing_intent_is_missing(tmp_path: Path) -> None:
    (tmp_path / "normal").mkdir()
    (tmp_path / "normal" / "1.json").write_text(json.dumps({k: v for k, v in TASK.items() if k != "intent"}))
    result = invoke("tasks", "validate", str(tmp_path))
    assert result.exit_code == 1 and "intent: missing (the instruction for the agent)" in result.output


@pytest.mark.parametrize("reference", ["the tea page", "shop.mmina.test/product/vell",
                                       "http://shop.mmina.test/a |OR| javascript:alert(1)"])
def test_a_reference_url_that_is_no_url_is_a_warning_not_ok(tmp_path: Path, reference: str) -> None:
    lines = validate(tmp_path, eval={**TASK["eval"], "reference_url": reference, "eval_types": ["url_match"]})
    bad = reference.split(" |OR| ")[-1]
    assert lines == [f"eval.reference_url: warning: not an http(s) URL: {bad!r} (url_match looks for it as text "
                     "inside the page's URL; give the whole http(s) URL)"]


def test_good_reference_urls_stay_ok(tmp_path: Path) -> None:
    good = "http://shop.mmina.test/product/vell |OR| https://shop.mmina.test/p/vell"
    assert validate(tmp_path, eval={**TASK["eval"], "reference_url": good}) == []


# -- 7. several SQL statements ------------------------------------------------------------------------


def test_several_statements_are_refused_not_all_but_the_last_dropped(two_runs: Path) -> None:
    result = invoke("sql", "select 1; select 2", "--store", str(two_runs))
    assert_error_line(result, "the query holds 2 statements and mmina sql shows one result: give one statement")
    assert result.stdout == ""
    write = invoke("sql", "select 1; drop view steps", "--store", str(two_runs))  # a write is refused as one
    assert_error_line(write, "mmina sql is read-only: DROP statements are not allowed")
    one = invoke("sql", "select 1 as a;", "--store", str(two_runs), "--format", "csv")
    assert one.exit_code == 0 and one.stdout == "a\n1\n", one.output


# -- 8. javascript: is never allowable ------------------------------------------------------------------


def test_javascript_cannot_be_allowed(tmp_path: Path) -> None:
    result = invoke("record", "--task", "normal/1", "--allow-scheme", "JavaScript:", "--store", str(tmp_path / "s"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "the javascript: scheme cannot be allowed: a javascript: URL runs a script in the page" in result.output
    assert not (tmp_path / "s").exists()
