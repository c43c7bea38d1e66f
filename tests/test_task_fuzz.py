"""One parser for tasks, fuzzed: whatever ``tasks validate`` accepts, ``record`` runs, and whatever
record could not run, validate reports as an error — over generated task files, names, numbers,
unicode (lone surrogates), nesting and wrong types, and over the cases a hostile fuzzing pass
found (issue 25). Every property goes through the real files on disk, the same code path as
``mmina tasks validate`` and ``mmina record``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmina.agents.oracle import script_action
from mmina.cli import cli
from mmina.errors import TaskError
from mmina.observations.observation import Observation
from mmina.recorder.verdicts import episode_view, verdict_rows
from mmina.store.files import to_arrow
from mmina.store.layout import check_id
from mmina.store.schema import TASKS
from mmina.tasks.answers import answer_verdict
from mmina.tasks.task import MAX_HOPS, builtin_suite_path, id_slug, task_row
from mmina.tasks.taskcheck import MAX_DEPTH, check_suite, load_suite
from tests.heavy import sized

FUZZ = settings(max_examples=sized(50, 150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
NORMAL_1 = json.loads((builtin_suite_path() / "normal" / "1.json").read_text())

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["\ud83d", "a\udcffb", "end", "N/A", "kiwix", "3", "http://a.example/"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
FIELDS = (
    "intent",
    "start_url",
    "eval",
    "cnt_hop",
    "hop_cnt",
    "procedure",
    "city",
    "flight",
    "shop",
    "reference_script",
)
script_steps = st.one_of(
    values,
    st.fixed_dictionaries(
        {
            "action": st.sampled_from(
                ["click", "type", "goto", "stop", "scroll", "tab_focus", "press", [1], {"a": 1}]
            )
        },
        optional={k: values for k in ("target", "text", "answer", "url", "tab", "key", "direction", "enter")},
    ),
)
tasks = st.fixed_dictionaries(
    {},
    optional={
        **{name: values for name in FIELDS},
        "intent": st.one_of(values, st.text(min_size=1)),
        "start_url": st.one_of(
            values,
            st.just("http://a.example/"),
            st.just("http://[::1"),
            st.just(" |AND| ".join(["http://a.example/"] * 25)),
        ),
        "eval": st.fixed_dictionaries(
            {},
            optional={
                "eval_types": values | st.just(["string_match"]),
                "reference_answers": st.dictionaries(
                    st.sampled_from(["exact_match", "must_include", "fuzzy_match", "other"]),
                    values,
                    max_size=3,
                ),
                "reference_url": values,
            },
        ),
        "cnt_hop": st.one_of(values, st.integers(min_value=0, max_value=10**30), st.just(10**9)),
        "reference_script": st.one_of(values, st.lists(script_steps, min_size=1, max_size=4)),
    },
)
task_files = st.one_of(tasks, tasks.map(lambda fields: {**NORMAL_1, **fields}))
"""Generated tasks, alone or over a runnable one (about one in eight then passes validation)."""
suites = st.sampled_from(["normal", "compare", "shopping", "mine"])
OBSERVATION = Observation(
    step_index=0, url="http://a.example/", title="t", tabs=[], active_tab=0, tree_text=""
)


def _write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


def _assert_runnable(folder: Path) -> None:
    """Validate and record's loader agree, and what loads can be stored, scored and scripted."""
    checked = check_suite(folder)
    if checked.errors:
        with pytest.raises(TaskError) as refused:
            load_suite(folder)
        assert "\n" not in str(refused.value)
        return
    suite = load_suite(folder)
    assert [t.task_id for t in suite.tasks] == [t.task_id for t in checked.tasks]
    to_arrow(TASKS, [task_row(t) for t in suite.tasks])  # the tasks table takes every row
    for task in suite.tasks:
        assert task.n_hops <= MAX_HOPS and task.cnt_hop <= MAX_HOPS + 1
        check_id("episode id", f"{id_slug(task.task_id)}-0123456789abcdef")
        json.dumps(task.original, ensure_ascii=False).encode("utf-8")
        assert answer_verdict(task, "some answer") in (True, False, None)
        episode = {"final_answer": "x", "status": "completed", "stop_reason": "stop", "hops_completed": 0}
        assert verdict_rows(episode_view("r", "e", task, episode, []))
        for step in task.reference_script or []:
            script_action(step, OBSERVATION).render()


@FUZZ
@given(raw=task_files, suite=suites)
def test_validate_and_record_agree_on_any_task(raw: dict[str, Any], suite: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _write(Path(folder), f"{suite}/1.json", json.dumps(raw))
        _assert_runnable(Path(folder))


@FUZZ
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_in_a_task_file_are_a_finding_never_a_traceback(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _write(Path(folder), "normal/1.json", data)
        _assert_runnable(Path(folder))


@FUZZ
@given(
    name=st.text(
        st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=120
    )
)
def test_any_file_name_is_a_task_id_that_can_name_an_episode(name: str) -> None:
    if len(os.fsencode(name)) > 200:
        return
    with tempfile.TemporaryDirectory() as folder:
        _write(Path(folder), f"{name}.json", json.dumps(NORMAL_1))
        _assert_runnable(Path(folder))
        assert [t.task_id for t in load_suite(folder).tasks] == [name]


def test_undecodable_file_names_are_shown_without_crashing(tmp_path: Path) -> None:
    (tmp_path / os.fsdecode(b"\xff\xfe.json")).write_text(json.dumps(NORMAL_1))
    _assert_runnable(tmp_path)
    assert load_suite(tmp_path).tasks[0].task_id == "\ufffd\ufffd"


@pytest.mark.parametrize(
    "raw, field",
    [
        ({**NORMAL_1, "cnt_hop": 10**30}, None),  # ignored beside a procedure: a warning
        ({**NORMAL_1, "procedure": None, "cnt_hop": 10**30}, "cnt_hop"),
        ({**NORMAL_1, "procedure": None, "cnt_hop": 1_000_000_000}, "cnt_hop"),
        ({**NORMAL_1, "procedure": None, "cnt_hop": MAX_HOPS + 1}, None),
        ({**NORMAL_1, "procedure": ["x"] * (MAX_HOPS + 1) + ["end"]}, "procedure"),
        ({**NORMAL_1, "reference_script": [["click"]]}, "reference_script[0]"),
        ({**NORMAL_1, "reference_script": [{"action": {"k": "v"}}]}, "reference_script[0]"),
        ({**NORMAL_1, "reference_script": [{"action": ["stop"], "answer": 1}]}, "reference_script[0]"),
        ({**NORMAL_1, "reference_script": [{"action": "tab_focus", "tab": "x"}]}, "reference_script[0]"),
        (
            {**NORMAL_1, "reference_script": [{"action": "click", "target": {"role": ["a"], "name": "b"}}]},
            "reference_script[0]",
        ),
        ({**NORMAL_1, "start_url": "http://[::1"}, "start_url"),
        (
            {**NORMAL_1, "eval": {**NORMAL_1["eval"], "reference_answers": {"must_include": [23.75, None]}}},
            None,
        ),
        ({**NORMAL_1, "intent": "Find \ud83d the price"}, None),
    ],
    ids=[
        "cnt_hop-1e30-with-procedure",
        "cnt_hop-1e30",
        "cnt_hop-1e9",
        "cnt_hop-101",
        "101-hops",
        "script-list",
        "script-action-dict",
        "script-action-list",
        "tab-text",
        "target-role-list",
        "bad-ipv6",
        "must_include-float-null",
        "lone-surrogate",
    ],
)
def test_the_cases_the_fuzzing_pass_found(tmp_path: Path, raw: dict[str, Any], field: str | None) -> None:
    _write(tmp_path, "normal/1.json", json.dumps(raw))
    result = CliRunner().invoke(cli, ["tasks", "validate", "--tasks", str(tmp_path), "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    report = json.loads(result.output)
    failing = [p["field"] for p in report["problems"] if p["severity"] == "error"]
    assert failing == ([field] if field else []) and result.exit_code == (1 if field else 0), report
    _assert_runnable(tmp_path)


def test_a_lone_surrogate_runs_as_u_fffd_with_a_warning(tmp_path: Path) -> None:
    _write(tmp_path, "normal/1.json", json.dumps({**NORMAL_1, "intent": "Find \ud83d the price"}))
    suite = load_suite(tmp_path)
    assert suite.tasks[0].intent == "Find \ufffd the price"
    assert any("lone surrogate" in w for w in suite.warnings)


def test_deep_nesting_and_huge_files_are_errors_not_crashes(tmp_path: Path) -> None:
    _write(tmp_path, "normal/1.json", "[" * 200_000 + "]" * 200_000)
    _write(tmp_path, "normal/2.json", json.dumps({**NORMAL_1, "x": json.loads("[" * 70 + "]" * 70)}))
    _write(tmp_path, "normal/3.json", json.dumps({**NORMAL_1, "x": "y" * (17 * 2**20)}))
    _write(tmp_path, "normal/4.json", '{"intent": 1' + "0" * 5000 + "}")
    messages = {Path(p.file).name: p.message for p in check_suite(tmp_path).errors}
    assert (
        messages["1.json"] == messages["2.json"] == f"not a task: JSON nested deeper than {MAX_DEPTH} levels"
    )
    assert messages["3.json"] == "larger than 16 MB: not a task file"
    assert messages["4.json"].startswith("not valid JSON: Exceeds the limit")


def test_a_fifo_named_like_a_task_is_skipped_without_blocking(tmp_path: Path) -> None:
    _write(tmp_path, "normal/1.json", json.dumps(NORMAL_1))
    os.mkfifo(tmp_path / "normal" / "2.json")
    (tmp_path / "normal" / "3.json").mkdir()
    outcome: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: outcome.update(
            validate=CliRunner().invoke(cli, ["tasks", "validate", "--tasks", str(tmp_path)]),
            suite=load_suite(tmp_path),
            alone=CliRunner().invoke(
                cli, ["tasks", "validate", "--tasks", str(tmp_path / "normal" / "2.json")]
            ),
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "reading a FIFO blocked"
    assert outcome["validate"].exit_code == 0
    assert f"{tmp_path / 'normal' / '2.json'}: -: warning: not a regular file" in outcome["validate"].output
    assert [t.task_id for t in outcome["suite"].tasks] == ["normal/1"]
    assert (
        outcome["alone"].exit_code == 1 and "2.json is not a task file or folder" in outcome["alone"].output
    )


def test_record_keeps_the_episode_of_an_odd_task_and_scores_it(tmp_path: Path) -> None:
    """The issue's case: must_include [23.75, null] in a file named ``a b%20=x&y'".json`` passed
    validate, record ran all 6 steps, then lost the episode to an AttributeError."""
    folder = tmp_path / "tasks"
    raw = {**NORMAL_1, "eval": {**NORMAL_1["eval"], "reference_answers": {"must_include": [23.75, None]}}}
    _write(folder, "a b%20=x&y'\".json", json.dumps(raw))
    store = tmp_path / "store"
    result = CliRunner().invoke(
        cli, ["record", "--tasks", str(folder), "--store", str(store), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    [episode] = summary["episodes"]
    assert (episode["task_id"], episode["status"], episode["n_steps"]) == ("a b%20=x&y'\"", "completed", 6)
    assert episode["success"] and episode["episode_id"].startswith("a-b-20-x-y-")
    scores = CliRunner().invoke(
        cli,
        [
            "sql",
            "--store",
            str(store),
            "--format",
            "json",
            "select evaluator, verdict from scores where level = 'task' order by 1",
        ],
    )
    assert json.loads(scores.stdout) == [
        {"evaluator": "hops", "verdict": "pass"},
        {"evaluator": "task", "verdict": "pass"},
    ]
    shutil.rmtree(folder)
