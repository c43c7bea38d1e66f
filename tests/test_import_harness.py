"""`mmina import harness`: a result folder written like the official MMInA / WebArena harness
writes it (tests/data/harness, see its README), imported through the store's writers and
analysed end to end by `mmina report`, `mmina sql` and `mmina view`."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mmina.actions.grammar import parse_action
from mmina.cli import cli
from mmina.errors import ActionParseError
from mmina.importers.harness import convert_action, parse_log
from mmina.store import Store
from mmina.store.sql import run_query
from tests.docs_pages import page

DATA = Path(__file__).parent / "data" / "harness"
RESULTS = DATA / "results"
LOG = DATA / "log_files" / "log_20240415120000_4242.log"
RUN = "gpt4v-normal"
BROKEN = "no <body>…</body> (not a harness render file, or cut off while written)"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def import_json(path: Path, store: Path, *extra: str) -> dict[str, Any]:
    result = invoke(
        "import", "harness", str(path), "--store", str(store), "--run-id", RUN, "--format", "json", *extra
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def sql(store: Path, query: str) -> list[dict[str, Any]]:
    result = run_query(Store.open(store), query)
    return [dict(zip(result.columns, row)) for row in result.rows]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("harness") / "store"
    out = import_json(RESULTS, path)
    assert (out["files"], out["tasks"], out["imported"], out["already"]) == (3, 2, 2, 0)
    assert (out["passed"], out["failed"], out["task_sr"], out["without_result"]) == (1, 1, 0.5, [])
    assert out["skipped"] == [{"file": str(RESULTS / "render_3.html"), "reason": BROKEN}]
    assert out["logs"] == [str(LOG.resolve())]
    return path


def episode_of(store: Path, task_id: str) -> str:
    return sql(store, f"select episode_id from episodes where task_id = '{task_id}'")[0]["episode_id"]


def test_steps_keep_url_observation_prediction_and_the_action_in_the_grammar(store: Path) -> None:
    rows = sql(
        store,
        "select e.task_id, s.step_index, s.url, s.action, s.action_kind, s.action_error, "
        "s.model_output, s.tree_text, s.live_hops, s.live_hop_completed from steps s "
        "join episodes e using (episode_id) order by e.task_id, s.step_index",
    )
    assert [(r["task_id"], r["action"]) for r in rows] == [
        ("normal/1", "type [12] [Glasgow] [press_enter_after=1]"),
        ("normal/1", "goto [https://www.eventbrite.com/d/united-kingdom--glasgow/events/]"),
        ("normal/1", "stop [Celtic Connections]"),
        ("normal/2", "click [25]"),
        ("normal/2", None),
        ("normal/2", "scroll [down]"),
        ("normal/2", "stop [Early stop: Reach max steps 3]"),
    ]
    first, unparsed, forced = rows[0], rows[4], rows[6]
    assert (
        first["url"]
        == "http://localhost:8888/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing"
    )
    assert first["tree_text"].endswith("\t[26] StaticText 'Price < 5 & more'")  # unescaped '<' in the file
    assert first["model_output"].endswith(
        "In summary, the next action I will perform is ```type [12] [Glasgow] [1]```"
    )
    assert unparsed["model_output"] == "I am not sure what to do next." and unparsed["action_kind"] is None
    assert unparsed["action_error"] == "the harness parsed no action from the model output (none)"
    assert (
        forced["model_output"] == "stop [Early stop: Reach max steps 3]"
    )  # no raw output: the harness's action
    assert [(r["live_hops"], r["live_hop_completed"]) for r in rows[:3]] == [(1, True), (1, False), (2, True)]


def test_episodes_tasks_and_run_come_from_render_log_and_configs(store: Path) -> None:
    episodes = {r["task_id"]: r for r in sql(store, "select * from episodes")}
    one, two = episodes["normal/1"], episodes["normal/2"]
    assert (one["status"], one["stop_reason"], one["final_answer"], one["n_steps"]) == (
        "completed",
        "stop",
        "Celtic Connections",
        3,
    )
    assert (two["stop_reason"], two["final_answer"], two["n_steps"]) == ("max_steps", None, 4)
    assert (one["n_hops"], one["live_hops"], list(one["hop_steps"]), two["live_hops"]) == (2, 2, [0, 2], 1)
    assert (
        one["started_at"].isoformat() == "2024-04-15T12:00:03.101000+00:00" and one["duration_ms"] == 38919.0
    )
    tasks = {r["task_id"]: r for r in sql(store, "select * from tasks")}
    assert json.loads(tasks["normal/1"]["original_json"]) == json.loads(
        (DATA / "WebQA/normal/1.json").read_text()
    )
    assert (
        tasks["normal/2"]["intent"] == "Find an event this weekend in the capital of Scotland."
    )  # the render's dump
    assert (
        list(tasks["normal/2"]["procedure"]) == ["kiwix", "event", "end"] and tasks["normal/2"]["n_hops"] == 2
    )
    assert json.loads(tasks["normal/2"]["reference_answers_json"]) == {"must_include": ["Fringe"]}
    run = sql(store, "select agent, model, task_suite, viewport_width, task_count from runs")[0]
    assert run == {
        "agent": "harness",
        "model": "gpt-4-vision-preview",
        "task_suite": "normal",
        "viewport_width": 1280,
        "task_count": 2,
    }


def test_screenshots_are_the_decoded_images(store: Path) -> None:
    text = (RESULTS / "render_2.html").read_text()
    expected = [base64.b64decode(data) for data in re.findall(r"data:image/png;base64,([^']*)'", text)]
    rows = sql(
        store,
        "select s.screenshot, s.screenshot_width, b.media_type from steps s join blobs b "
        f"on b.sha256 = s.screenshot where s.episode_id = '{episode_of(store, 'normal/2')}' "
        "order by s.step_index",
    )
    blobs = Store.open(store).read_blobs([r["screenshot"] for r in rows])
    assert [blobs[r["screenshot"]] for r in rows] == expected and len(expected) == 4
    assert {(r["media_type"], r["screenshot_width"]) for r in rows} == {("image/png", 64)}


def test_the_harness_verdicts_are_scores_the_report_reads(store: Path) -> None:
    scores = sql(
        store,
        "select e.task_id, s.level, s.hop, s.verdict, s.evaluator_version from scores s "
        "join episodes e using (episode_id) where s.evaluator = 'harness' "
        "order by e.task_id, s.level desc, s.hop",
    )
    assert [(r["task_id"], r["level"], r["hop"], r["verdict"]) for r in scores] == [
        ("normal/1", "task", None, "pass"),
        ("normal/1", "hop", 1, "pass"),
        ("normal/1", "hop", 2, "pass"),
        ("normal/2", "task", None, "fail"),
        ("normal/2", "hop", 1, "pass"),
        ("normal/2", "hop", 2, "fail"),
    ]
    result = invoke(
        "report", "--store", str(store), "--evaluator", "harness", "--run", RUN, "--format", "json"
    )
    assert result.exit_code == 0, result.output
    overall = json.loads(result.stdout)["tables"]["sr_by_bucket"][-1]
    assert (overall["bucket"], overall["tasks"], overall["task_sr"], overall["hop_sr"]) == (
        "overall",
        2,
        0.5,
        0.75,
    )


def test_view_writes_the_episode_viewer(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "episode.html"
    result = invoke("view", "--episode", episode_of(store, "normal/1"), "--store", str(store), "-o", str(out))
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "Celtic Connections" in page and "data:image/jpeg;base64," in page and "harness" in page


def test_importing_again_skips_what_is_there(store: Path) -> None:
    before = sql(store, "select count(*) as n from scores")[0]["n"]
    out = import_json(RESULTS, store)
    assert (out["imported"], out["already"], out["task_sr"]) == (0, 2, 0.5)
    assert sql(store, "select count(*) as n from episodes")[0]["n"] == 2
    assert sql(store, "select count(*) as n from scores")[0]["n"] == before


def test_without_logs_verdicts_are_unclear_and_a_log_can_be_named(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    for name in ("render_1.html", "render_2.html"):
        shutil.copy(RESULTS / name, folder / name)
    out = import_json(folder, tmp_path / "a")
    assert (out["imported"], out["task_sr"], out["without_result"]) == (2, None, ["1", "2"])
    verdicts = sql(tmp_path / "a", "select verdict from scores where level = 'task'")
    assert [r["verdict"] for r in verdicts] == ["unclear", "unclear"]
    out = import_json(folder, tmp_path / "b", "--log", str(LOG))
    assert (out["passed"], out["failed"]) == (1, 1)
    assert sorted(r["task_id"] for r in sql(tmp_path / "b", "select task_id from episodes")) == [
        "normal/1",
        "normal/2",
    ]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: p, "no harness render files (render_<task_id>.html) under"),
        (
            lambda p: shutil.copy(RESULTS / "render_3.html", p / "render_3.html") and p,
            f"nothing importable in {{p}}: {{p}}/render_3.html: {BROKEN}",
        ),
    ],
)
def test_nothing_to_import_is_one_line_and_leaves_no_store(tmp_path: Path, make, message: str) -> None:
    path = make(tmp_path)
    result = invoke("import", "harness", str(path), "--store", str(tmp_path / "store"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message.format(p=tmp_path) in lines[0]
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    "harness, mmina",
    [
        ("click [1234] where [1234] is link 'Foo [bar]'", "click [1234]"),
        ("hover [7] where [7] is button 'Menu'", "hover [7]"),
        (
            "type [164] [restaurants near CMU\n] where [164] is searchbox 'Search'",
            "type [164] [restaurants near CMU] [press_enter_after=1]",
        ),
        ("type [164] [a [b] c] where [164] is textbox ''", "type [164] [a [b] c] [press_enter_after=0]"),
        ("scroll [down]", "scroll [down]"),
        ("press [Control+a]", "press [Control+a]"),
        ("goto [http://localhost:7770/]", "goto [http://localhost:7770/]"),
        ("new_tab", "new_tab"),
        ("page_focus [1]", "tab_focus [1]"),
        ("close_tab", "close_tab"),
        ("go_back", "go_back"),
        ("stop [$25.99]", "stop [$25.99]"),
        ("stop []", "stop []"),
    ],
)
def test_harness_actions_convert_to_the_grammar(harness: str, mmina: str) -> None:
    action = convert_action(harness)
    assert action.render() == mmina and parse_action(mmina) == action


def test_no_action_does_not_convert() -> None:
    with pytest.raises(ActionParseError, match="none"):
        convert_action("none")


def test_logs_latest_run_of_a_task_wins_and_crashes_are_kept() -> None:
    lines = [
        "2024-04-15 10:00:00,000 - INFO - [Config file]: config_files/5.json",
        "2024-04-15 10:00:09,000 - INFO - [Result] (FAIL) config_files/5.json",
        "[Config file]: config_files/5.json",  # console output has no prefix
        "[Result] (PASS) config_files/5.json",
        "2024-04-15 11:00:00,000 - INFO - [Config file]: config_files/6.json",
        "2024-04-15 11:00:05,500 - INFO - [Unhandled Error] TimeoutError('page.goto')]",
    ]
    outcomes = parse_log(lines, "log")
    assert (outcomes["config_files/5.json"].passed, outcomes["config_files/5.json"].started) == (True, None)
    six = outcomes["config_files/6.json"]
    assert (six.passed, six.error, six.ended.isoformat()) == (
        None,
        "TimeoutError('page.goto')",
        "2024-04-15T11:00:05.500000+00:00",
    )


def test_help_has_an_example_and_the_docs_document_it() -> None:
    result = invoke("import", "harness", "--help")
    assert result.exit_code == 0 and "Example" in result.output
    assert "mmina import harness" in page("stepeval.md")


def test_a_named_log_that_is_missing_is_one_line(tmp_path: Path) -> None:
    result = invoke(
        "import",
        "harness",
        str(RESULTS),
        "--store",
        str(tmp_path / "store"),
        "--log",
        str(tmp_path / "gone.log"),
    )
    assert (
        result.exit_code == 1
        and result.output.strip() == f"Error: log file {tmp_path / 'gone.log'} does not exist"
    )
    assert not (tmp_path / "store").exists()
