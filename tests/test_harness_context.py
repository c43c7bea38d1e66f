"""A task's ``storage_state`` (a logged-in session) and ``geolocation`` reach the episode's browser
context as in the official harness (issue 30, item 7; ``mmina.tasks.harness_context``).

The account page (``tests/account_site.py``) shows who is signed in (the session cookie the server
received), the basket kept in ``localStorage`` and the position the browser gives.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mmina.errors import TaskError
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.replayer.replays import replay_run
from mmina.store import Store
from mmina.tasks.harness_context import Geolocation, harness_context, state_places
from mmina.tasks.taskcheck import check_path, load_suite
from tests.account_site import BASKET, USER, AccountSite

FAST = BrowserConfig(screenshots=False, set_of_marks=False)
TOKYO = {"latitude": 35.6812, "longitude": 139.7671, "accuracy": 10}


def _task(url: str, **fields: object) -> dict[str, object]:
    return {
        "intent": "Read the account page.",
        "start_url": url,
        "procedure": ["account", "end"],
        "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["done"]}},
        "reference_script": [{"action": "stop", "answer": "done"}],
        **fields,
    }


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


# ---------------------------------------------------------------- reading the fields (no browser)


def test_a_relative_state_file_is_found_above_the_task_folder_as_in_the_release(tmp_path: Path) -> None:
    """The release says ``./.auth/shopping_state.json``, read by a harness run from its repository's
    root; a suite kept inside that repository finds it from any current folder."""
    repo = tmp_path / "MMInA"
    state = _write(repo / ".auth" / "shopping_state.json", {"cookies": [], "origins": []})
    task = _write(
        repo / "mmina" / "shopping" / "1.json",
        _task("http://shop.test/", storage_state="./.auth/shopping_state.json", geolocation=TOKYO),
    )
    context = harness_context(json.loads(task.read_text()), str(task.parent))
    assert context.state_file == state.resolve() and context.storage_state == {"cookies": [], "origins": []}
    assert context.geolocation == Geolocation(35.6812, 139.7671, 10.0)
    assert state_places("./x.json")[0] == Path(os.getcwd()) / "x.json"  # the harness's own place first
    assert state_places("/abs/x.json", str(task.parent)) == [Path("/abs/x.json")]
    assert check_path(task) == []


def test_a_missing_state_file_is_a_warning_a_bad_one_or_a_bad_position_refuses_the_task(
    tmp_path: Path,
) -> None:
    missing = _write(tmp_path / "s" / "1.json", _task("http://a.test/", storage_state="./.auth/nobody.json"))
    findings = check_path(missing)
    assert [(p.field, p.severity) for p in findings] == [("storage_state", "warning")]
    assert "runs without the logged-in session" in findings[0].message
    assert load_suite(missing).tasks  # runnable, logged out
    _write(tmp_path / "t" / "bad.json", "{not json")
    corrupt = _write(tmp_path / "t" / "1.json", _task("http://a.test/", storage_state="bad.json"))
    far = _write(
        tmp_path / "u" / "1.json", _task("http://a.test/", geolocation={"latitude": 123, "longitude": 0})
    )
    words = _write(tmp_path / "v" / "1.json", _task("http://a.test/", geolocation="Tokyo"))
    for path, message in (
        (corrupt, "is not a storage state"),
        (far, "latitude must be within -90..90"),
        (words, "not an object with latitude and longitude"),
    ):
        [problem] = check_path(path)
        assert problem.severity == "error" and message in problem.message
        with pytest.raises(TaskError, match=message.split(" (")[0]):
            load_suite(path)
    assert (
        check_path(
            _write(tmp_path / "w" / "1.json", _task("http://a.test/", storage_state=None, geolocation=None))
        )
        == []
    )


# ---------------------------------------------------------------- a real browser


def test_the_session_and_the_position_reach_the_page_and_the_replay(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    with AccountSite() as site:
        _write(tmp_path / "repo" / ".auth" / "state.json", site.storage_state())
        suite = tmp_path / "repo" / "tasks" / "account"
        _write(suite / "1.json", _task(site.url, storage_state="./.auth/state.json", geolocation=TOKYO))
        _write(suite / "2.json", _task(site.url, storage_state=None, geolocation=None))
        summary = record_run(store, RecordConfig(tasks=str(suite), agent="oracle", browser=FAST))
        by_task = {e.task_id: e for e in summary.episodes}
        assert all(e.status == "completed" for e in by_task.values()), [e.error for e in by_task.values()]
        rows = {
            r["episode_id"]: r
            for r in store.read("steps", run_id=summary.run_id).to_pylist()
            if r["step_index"] == 0
        }
        trees = {e.task_id: rows[e.episode_id]["tree_text"] for e in summary.episodes}
        signed_in, anonymous = trees["1"], trees["2"]
        assert f"Signed in as {USER}" in signed_in and f"Basket: {BASKET}" in signed_in
        assert "Position: 35.6812, 139.7671" in signed_in
        assert "Not signed in" in anonymous and "Basket: empty" in anonymous
        assert "Position: unavailable" in anonymous
        report = replay_run(store, summary.run_id, browser=FAST)  # finds the state file again
    assert all(e.fidelity == 1.0 for e in report.episodes), [
        s.tree_diff for e in report.episodes for s in e.steps
    ]
    cookies = [
        h["value"]
        for r in store.read("requests", run_id=summary.run_id).to_pylist()
        for h in r["request_headers"] or []
        if h["name"].lower() == "cookie"
    ]
    assert cookies and site.token not in json.dumps(cookies)  # the session went out, redacted in the store
