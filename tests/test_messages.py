"""Messages that said the wrong thing (issue 52, item 6): each now says what happened and what
to do. Real stores (written by the real writer, or really recorded), the real command line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.store import Store
from tests.local_site import LocalSite
from tests.store_helpers import REPO_ROOT, begin, write_episode

DAMAGE_HINT = "restore that file from a backup"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


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


def test_a_store_whose_only_runs_file_is_damaged_says_so_for_rescore_report_and_a_named_run(
    two_runs: Path,
) -> None:
    shutil.rmtree(two_runs / "runs" / "run_id=r2")
    runs = damaged(two_runs, "runs", "r1")
    for args in (["rescore", "--evaluator", "hops"], ["report"], ["store", "compact"]):
        result = invoke(*args, "--store", str(two_runs))
        assert_error_line(
            result,
            f"{two_runs} holds no readable run: the runs file {runs} cannot be read (",
            DAMAGE_HINT,
            "mmina store verify",
        )
        assert "bug in mmina" not in result.output and "holds no runs" not in result.output
    named = invoke("report", "--run", "r1", "--store", str(two_runs))
    assert_error_line(named, f"run r1 cannot be used: the runs file {runs} cannot be read (", DAMAGE_HINT)


def test_beside_a_readable_run_a_damaged_runs_file_is_a_warning_and_the_rest_is_scored(
    two_runs: Path,
) -> None:
    runs = damaged(two_runs, "runs", "r1")
    result = invoke("rescore", "--evaluator", "hops", "--store", str(two_runs), "--format", "json")
    assert result.exit_code == 0 and result.stderr.startswith(f"Warning: skipped {runs}: "), result.output
    assert {e["run_id"] for e in json.loads(result.stdout)["episodes"]} == {"r1", "r2"}
    assert json.loads(invoke("report", "--store", str(two_runs), "--format", "json").stdout)["runs"] == ["r2"]


# -- 2. a damaged tasks file ----------------------------------------------------------------------


def test_an_episode_whose_tasks_file_is_damaged_names_the_file(two_runs: Path) -> None:
    tasks = damaged(two_runs, "tasks", "r1")
    result = invoke("rescore", "--evaluator", "hops", "--store", str(two_runs))
    assert_error_line(
        result,
        "episode ep-r1 of run r1 has no task normal/1: ",
        f"the tasks file {tasks} cannot be read (",
        DAMAGE_HINT,
    )


# -- 3. --browser that is no Chromium -----------------------------------------------------------

POINT = "point --browser (or MMINA_CHROMIUM) at a Chromium executable"


def test_a_browser_that_is_no_chromium_says_so_and_where_to_point(tmp_path: Path) -> None:
    """A plain file, a folder, and a program that runs but is no browser (the real launch):
    never Playwright's "Target page, context or browser has been closed"."""
    plain, program = tmp_path / "hostname", tmp_path / "not-a-browser"
    plain.write_text("box\n")
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    cases = {
        plain: f"browser executable {plain} is not executable",
        tmp_path: f"browser executable {tmp_path} is not a file",
        program: f"the browser {program} could not be started: it exited before Playwright could connect",
    }
    for browser, expected in cases.items():
        result = invoke(
            "record", "--task", "normal/1", "--browser", str(browser), "--store", str(tmp_path / "s")
        )
        assert_error_line(result, expected, POINT)
        assert "has been closed" not in result.output
    assert not (tmp_path / "s" / "episodes").exists()


# -- 4 and 6. task files: what is wrong with a field ------------------------------------------------

TASK = {
    "intent": "Find the price of the tea.",
    "start_url": "http://wiki.mmina.test/kiwix/",
    "eval": {
        "eval_types": ["string_match"],
        "reference_answers": {"must_include": ["23.75"]},
        "reference_url": "",
    },
    "cnt_hop": 3,
    "procedure": ["kiwix", "shop", "end"],
}


def validate(tmp_path: Path, **fields: object) -> list[str]:
    """``mmina tasks validate`` of one normal task with these fields: the lines about that file."""
    (tmp_path / "normal").mkdir(parents=True, exist_ok=True)
    path = tmp_path / "normal" / "1.json"
    path.write_text(json.dumps({**TASK, **fields}))
    result = invoke("tasks", "validate", str(tmp_path))
    assert "Traceback" not in result.output, result.output
    return [
        line.removeprefix(f"{path}: ") for line in result.output.splitlines() if line.startswith(str(path))
    ]


@pytest.mark.parametrize(
    ("count", "said"),
    [
        (-5, "negative (-5): a hop count is 1 or more (it counts the END marker): ignored"),
        ("-5", "negative ('-5'): a hop count is 1 or more"),
        (2.5, "not a whole number (2.5): ignored"),
        (True, "not a number but a boolean (True): ignored"),
        ("three", "not a number ('three'): ignored"),
        ([3], "not a number but a list ([3]): ignored"),
        (None, "null: ignored"),
    ],
)
def test_a_hop_count_says_why_it_is_no_count(tmp_path: Path, count: object, said: str) -> None:
    [line] = validate(tmp_path, cnt_hop=count)
    assert line.startswith(f"cnt_hop: warning: {said}"), line


@pytest.mark.parametrize(
    ("intent", "said"),
    [
        (["Find", "the tea"], "must be text, not a list ['Find', 'the tea']"),
        (7, "must be text, not a number 7"),
        ("  ", "empty"),
        (None, "null"),
    ],
)
def test_an_intent_that_is_not_text_says_what_it_is(tmp_path: Path, intent: object, said: str) -> None:
    assert validate(tmp_path, intent=intent) == [f"intent: {said} (the instruction for the agent)"]


def test_a_missing_intent_is_missing(tmp_path: Path) -> None:
    (tmp_path / "normal").mkdir()
    (tmp_path / "normal" / "1.json").write_text(json.dumps({k: v for k, v in TASK.items() if k != "intent"}))
    result = invoke("tasks", "validate", str(tmp_path))
    assert result.exit_code == 1 and "intent: missing (the instruction for the agent)" in result.output


@pytest.mark.parametrize(
    "reference",
    ["the tea page", "shop.mmina.test/product/vell", "http://shop.mmina.test/a |OR| javascript:alert(1)"],
)
def test_a_reference_url_that_is_no_url_is_a_warning_not_ok(tmp_path: Path, reference: str) -> None:
    lines = validate(tmp_path, eval={**TASK["eval"], "reference_url": reference, "eval_types": ["url_match"]})
    bad = reference.split(" |OR| ")[-1]
    said = f"eval.reference_url: warning: not an http(s) URL: {bad!r} (url_match looks for it as text inside "
    assert lines == [said + "the page's URL; give the whole http(s) URL)"]


def test_good_reference_urls_stay_ok(tmp_path: Path) -> None:
    good = "http://shop.mmina.test/product/vell |OR| https://shop.mmina.test/p/vell"
    assert validate(tmp_path, eval={**TASK["eval"], "reference_url": good}) == []


# -- 7. several SQL statements ------------------------------------------------------------------------


def test_several_statements_are_refused_not_all_but_the_last_dropped(two_runs: Path) -> None:
    result = invoke("sql", "select 1; select 2", "--store", str(two_runs))
    assert_error_line(
        result, "the query holds 2 statements and mmina sql shows one result: give one statement"
    )
    assert result.stdout == ""
    write = invoke("sql", "select 1; drop view steps", "--store", str(two_runs))  # a write is refused as one
    assert_error_line(write, "mmina sql is read-only: DROP statements are not allowed")
    one = invoke("sql", "select 1 as a;", "--store", str(two_runs), "--format", "csv")
    assert one.exit_code == 0 and one.stdout == "a\n1\n", one.output


# -- 8. javascript: is never allowable ------------------------------------------------------------------


def test_javascript_cannot_be_allowed(tmp_path: Path) -> None:
    result = invoke(
        "record", "--task", "normal/1", "--allow-scheme", "JavaScript:", "--store", str(tmp_path / "s")
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert (
        "the javascript: scheme cannot be allowed: a javascript: URL runs a script in the page"
        in result.output
    )
    assert not (tmp_path / "s").exists()


# -- 5 and 9. what the hop counts say ---------------------------------------------------------------

BUILTIN_NORMAL_1 = REPO_ROOT / "fixtures" / "tasks" / "normal" / "1.json"


def recorded(*args: str) -> dict:
    result = invoke("record", *args, "--format", "json")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    return json.loads(result.stdout)


def test_a_task_without_procedure_is_judged_by_its_answer_as_validate_says(tmp_path: Path) -> None:
    """The oracle's right answer completes both hops (it scored 0/2 while validate said "judged
    by the final answer")."""
    suite = tmp_path / "suite"
    said = (
        "procedure: warning: missing: the hops are counted from cnt_hop (else the suite) and judged by the "
        "final answer alone (a passing answer completes them all)"
    )
    assert validate(suite, procedure=None) == [said]
    task = json.loads(BUILTIN_NORMAL_1.read_text())
    del task["procedure"]
    (suite / "normal" / "1.json").write_text(json.dumps(task))
    [episode] = recorded("--tasks", str(suite), "--store", str(tmp_path / "store"))["episodes"]
    assert (episode["answer_ok"], episode["n_hops"], episode["hops_passed"], episode["verdict"]) == (
        True,
        2,
        2,
        "pass",
    )
    # a wrong answer completes none: the rescoring pins of tests/test_rescore_batch.py hold such episodes


def test_an_episode_that_fails_before_its_first_step_completes_no_hop(tmp_path: Path) -> None:
    """The start page is on hop 1's site, but the agent never acted: 0/2, not 1/2."""
    result = invoke(
        "record",
        "--task",
        "normal/1",
        "--agent",
        "tests.agents_for_tests:Crasher",
        "--store",
        str(tmp_path / "store"),
    )
    assert result.exit_code == 0 and "normal/1: error (agent), error, 0/2 hops, 0 steps" in result.stderr, (
        result.stderr
    )
    assert "│ 0/2  │ 0     │" in result.stdout and "hop SR 0.0%" in result.stdout, result.stdout
    rescored = invoke(
        "rescore", "--evaluator", "hops", "--store", str(tmp_path / "store"), "--format", "json"
    )
    [episode] = json.loads(rescored.stdout)["episodes"]
    assert (episode["hops_passed"], episode["hops_total"]) == (0, 2)


# -- 10. a redirect loop ---------------------------------------------------------------------------------


class LoopSite(BaseHTTPRequestHandler):
    """``/start`` a page, ``/loop`` a redirect to itself."""

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        if self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
            return
        body = b"<!doctype html><title>Start</title><a href='/loop'>loop</a>"
        self.send_response(200 if self.path == "/start" else 404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loop_site() -> Iterator[str]:
    with LocalSite(LoopSite) as site:
        yield site.url.rstrip("/")


def test_a_replayed_redirect_loop_fails_as_recorded_not_as_missing_from_the_archive(
    tmp_path: Path, loop_site: str
) -> None:
    task = {
        **TASK,
        "start_url": f"{loop_site}/start",
        "reference_script": [
            {"action": "goto", "url": f"{loop_site}/loop"},
            {"action": "stop", "answer": "x"},
        ],
    }
    (tmp_path / "suite" / "normal").mkdir(parents=True)
    (tmp_path / "suite" / "normal" / "1.json").write_text(json.dumps(task))
    store = str(tmp_path / "store")
    recorded("--tasks", str(tmp_path / "suite"), "--store", store)
    error = invoke(
        "sql", "select action_error from steps where step_index = 0", "--store", store, "--format", "csv"
    )
    assert "net::ERR_TOO_MANY_REDIRECTS" in error.stdout, error.output
    replay = invoke("replay", "--run", "latest", "--store", store, "--format", "json")
    assert replay.exit_code == 0, replay.output
    [episode] = json.loads(replay.stdout)["episodes"]
    after = episode["steps"][1]
    assert after["recorded_url"] == after["replayed_url"] == "chrome-error://chromewebdata/", after
    assert after["faithful"] and "not in the archive" not in json.dumps(episode), after


# -- found by fuzzing ----------------------------------------------------------------------------------------


def test_view_of_a_screenshot_that_is_no_image_shows_no_screenshot(tmp_path: Path) -> None:
    """A damaged blob under a step's screenshot: no PIL traceback, the page is written without it."""
    store = Store.open(tmp_path / "store", create=True)
    begin(store, "r1")
    write_episode(store, "r1", "ep1", [b"not an image"])
    result = invoke(
        "view", "--episode", "ep1", "--store", str(tmp_path / "store"), "-o", str(tmp_path / "v.html")
    )
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "data:image/jpeg" not in (tmp_path / "v.html").read_text()


def test_report_out_with_the_terminal_tables_is_refused_not_ignored(two_runs: Path, tmp_path: Path) -> None:
    """``--out`` was silently ignored for the table format (the tables went to the terminal)."""
    invoke("rescore", "--evaluator", "hops", "--store", str(two_runs))
    result = invoke("report", "-o", str(tmp_path / "r.txt"), "--store", str(two_runs))
    assert result.exit_code == 2 and "-o/--output writes --format json, csv or html" in result.output, (
        result.output
    )
    written = invoke("report", "-o", str(tmp_path / "r.json"), "--format", "json", "--store", str(two_runs))
    assert written.exit_code == 0 and json.loads((tmp_path / "r.json").read_text())["runs"] == ["r1", "r2"]


def test_report_of_an_evaluator_nothing_was_scored_with_says_whose_verdicts_there_are(two_runs: Path) -> None:
    invoke("rescore", "--evaluator", "hops", "--store", str(two_runs))
    result = invoke("report", "--evaluator", "hopz", "--store", str(two_runs))
    assert_error_line(
        result,
        "no hopz score for some episodes (1 in run r1, 1 in run r2; the store holds verdicts "
        "of hops, and `mmina rescore --list` names every evaluator)",
    )


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"procedure": []},
            [
                "procedure: warning: empty: the hops are counted from cnt_hop (else the suite) and judged "
                "by the final answer alone (a passing answer completes them all)"
            ],
        ),
        (
            {"procedure": ["end"], "cnt_hop": 1},
            [
                "procedure: warning: no site keyword before 'end': the task has no hop "
                "(its answer alone is judged)"
            ],
        ),
        (
            {"mmina_hops": "x"},
            [
                "mmina_hops: warning: not a list of objects (one per hop): ignored, the hops are judged "
                "by their procedure keywords"
            ],
        ),
        (
            {"eval": {**TASK["eval"], "eval_types": ["url_match"], "reference_url": " |OR| "}},
            ["eval.reference_url: warning: url_match without a reference URL: n/a (nothing to judge)"],
        ),
    ],
)
def test_task_fields_that_validated_ok_or_said_the_wrong_thing(
    tmp_path: Path, fields: dict, said: list[str]
) -> None:
    """Found by fuzzing: an empty procedure was "no 'end' marker: every entry is a hop" though its
    hops come from cnt_hop; one of only "end" has no hop; a malformed mmina_hops and a
    reference_url of only separators validated OK."""
    assert validate(tmp_path, **fields) == said


def test_an_episode_whose_episodes_file_is_damaged_is_named_with_the_file(
    two_runs: Path, tmp_path: Path
) -> None:
    """Found by fuzzing: "no episode" for an episode whose file is there but damaged."""
    episodes = damaged(two_runs, "episodes", "r1")
    for args in (
        ["view", "--episode", "ep-r1", "-o", str(tmp_path / "v.html")],
        ["rescore", "--evaluator", "hops", "--episode", "ep-r1"],
    ):
        result = invoke(*args, "--store", str(two_runs))
        assert_error_line(
            result,
            "no episode 'ep-r1'",
            f"): the episodes file {episodes} cannot be read (",
            "`mmina record --resume --run-id r1` records that episode again",
        )
    assert_error_line(invoke("view", "--episode", "ep-zz", "--store", str(two_runs)), "no episode 'ep-zz'")


def test_a_report_of_episodes_whose_tasks_file_is_damaged_says_so_not_fewer_tasks(two_runs: Path) -> None:
    """Found by fuzzing: the report left those episodes out of every table without a word."""
    invoke("rescore", "--evaluator", "hops", "--store", str(two_runs))
    tasks = damaged(two_runs, "tasks", "r1")
    result = invoke("report", "--store", str(two_runs))
    assert_error_line(
        result,
        f"1 episode(s) of run r1 have no task: the tasks file {tasks} cannot be read (",
        DAMAGE_HINT,
        "report the other runs with --run",
    )
    other = invoke("report", "--run", "r2", "--store", str(two_runs), "--format", "json")
    assert other.exit_code == 0 and json.loads(other.stdout)["runs"] == ["r2"], other.output


@pytest.mark.parametrize(("spec", "what"), [("os:path", "a module"), ("os:getcwd", "a function")])
def test_an_agent_that_is_no_class_says_what_it_is(tmp_path: Path, spec: str, what: str) -> None:
    """Found by probing: "cannot create agent os:path: TypeError: 'module' object is not callable"."""
    result = invoke("record", "--task", "normal/1", "--agent", spec, "--store", str(tmp_path / "s"))
    assert_error_line(
        result, f"agent {spec} is {what}, not a class: name your agent class (package.module:Class"
    )


def test_agreement_with_an_evaluator_nothing_was_scored_with_says_whose_verdicts_there_are(
    two_runs: Path,
) -> None:
    invoke("rescore", "--evaluator", "hops", "--store", str(two_runs))
    result = invoke("agreement", "--evaluator", "hops", "--reference", "hopz", "--store", str(two_runs))
    assert_error_line(
        result,
        "no hopz verdicts in run(s) r1, r2; the store holds verdicts of hops, and "
        "`mmina rescore --list` names every evaluator",
    )
