"""Recording for real: Chromium, the fixture web, Parquet and DuckDB, through the library API."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from mmina.agents.settings import AgentSettings
from mmina.errors import AgentError, StoreError
from mmina.executors.interface import Layout
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.store import Store
from mmina.store.inspect import verify_store
from mmina.store.sql import run_query
from mmina.tasks.budget import Limits
from mmina.tasks.taskcheck import load_suite


def _one(store: Path, query: str):
    return run_query(Store.open(store), query).rows


def test_oracle_completes_builtin_task(recorded: tuple[Path, RunSummary]) -> None:
    store, summary = recorded
    task = load_suite().select(["normal/1"]).tasks[0]
    assert [e.task_id for e in summary.episodes] == ["normal/1"]
    episode = summary.episodes[0]
    assert episode.status == "completed" and episode.stop_reason == "stop"
    assert episode.live_hops == episode.n_hops == task.n_hops == 2
    expected = task.reference_answers["must_include"][0]
    assert expected in (episode.final_answer or "")
    rows = _one(store, "select count(*), count(distinct step_index), min(step_index) from steps")
    assert rows == [(episode.n_steps, episode.n_steps, 0)]


def test_steps_hold_observation_action_and_timings(recorded: tuple[Path, RunSummary]) -> None:
    store, _ = recorded
    rows = _one(
        store,
        """
        select url, title, tree_text, screenshot, action, action_kind, action_error, observe_ms, tree_ms, tabs
        from steps order by step_index""",
    )
    first = rows[0]
    assert first[0].startswith("http://wiki.mmina.test/kiwix")
    assert first[1] and "[" in first[2] and "]" in first[2]
    assert all(r[3] and len(r[3]) == 64 for r in rows)
    assert rows[-1][5] == "stop" and rows[-1][4].startswith("stop [")
    assert all(r[6] is None for r in rows), "the oracle's actions all succeed"
    assert all(r[7] > 0 and r[8] > 0 for r in rows)
    assert first[9][0]["url"] == first[0]
    # the element ids in the tree are the ones actions name
    typed = next(r for r in rows if r[5] == "type")
    element = typed[4].split("]")[0].removeprefix("type [")
    assert f"[{element}] " in typed[2]


def test_screenshots_are_jpeg_blobs_of_the_viewport(recorded: tuple[Path, RunSummary]) -> None:
    store, _ = recorded
    db = Store.open(store)
    digests = [r[0] for r in run_query(db, "select screenshot from steps order by step_index").rows]
    packs = run_query(db, "select blob_packs from episodes").rows[0][0]
    blobs = db.read_blobs(digests, packs)
    image = Image.open(io.BytesIO(blobs[digests[0]]))
    assert image.format == "JPEG" and image.size == (1280, 2048)


def test_network_trace_with_bodies(recorded: tuple[Path, RunSummary]) -> None:
    store, _ = recorded
    rows = _one(
        store,
        """
        select r.step_index, r.method, r.status, r.url, r.mime_type, b.data
        from requests r join blobs b on b.sha256 = r.response_body order by r.seq""",
    )
    assert rows[0][0] == -1 and rows[0][3].startswith("http://wiki.mmina.test/")
    assert {r[2] for r in rows} <= {200, 302, 303, 304}
    html = [r for r in rows if r[4].startswith("text/html")]
    assert html and b"<html" in html[0][5].lower()
    steps = _one(store, "select max(step_index) from steps")[0][0]
    assert max(r[0] for r in rows) <= steps
    n_requests = _one(store, "select n_requests, (select count(*) from requests) from episodes")[0]
    assert n_requests[0] == n_requests[1] > 0


def test_hop_tracking_is_stored_per_step(recorded: tuple[Path, RunSummary]) -> None:
    store, _ = recorded
    hops = _one(store, "select hop, live_reached, live_reached_step from episode_hops order by hop")
    assert [h[:2] for h in hops] == [(1, True), (2, True)]
    steps = dict(_one(store, "select step_index, live_hops from steps"))
    assert steps[hops[1][2]] == 2 and steps[max(steps)] == 2


def test_run_and_task_rows(recorded: tuple[Path, RunSummary]) -> None:
    store, summary = recorded
    run = _one(
        store, "select run_id, agent, browser_version, viewport_width, viewport_height, task_count from runs"
    )
    assert run == [(summary.run_id, "oracle", run[0][2], 1280, 2048, 1)]
    assert run[0][2].startswith("chromium ")
    task = _one(store, "select task_id, cnt_hop, n_hops, procedure, original_json from tasks")[0]
    assert task[1] == task[2] + 1 and task[3][-1] == "end"
    assert json.loads(task[4])["intent"]


def test_resume_skips_finished_tasks(recorded_copy: Path) -> None:
    run_id = Store.open(recorded_copy).run_ids()[0]
    summary = record_run(
        Store.open(recorded_copy, create=True),
        RecordConfig(run_id=run_id, resume=True, task_ids=("normal/1",)),
    )
    assert summary.episodes == [] and summary.skipped == ["normal/1"]
    with pytest.raises(StoreError, match="already exists"):
        record_run(
            Store.open(recorded_copy, create=True), RecordConfig(run_id=run_id, task_ids=("normal/1",))
        )


def test_resume_records_only_the_run_s_own_tasks(recorded_copy: Path) -> None:
    store = Store.open(recorded_copy, create=True)
    run_id = store.run_ids()[0]
    summary = record_run(
        store, RecordConfig(run_id=run_id, resume=True)
    )  # the whole suite named: only normal/1 is the run's
    assert summary.episodes == [] and summary.skipped == ["normal/1"]
    with pytest.raises(StoreError, match=f"run {run_id} has no task shopping/1 .*only its own tasks"):
        record_run(store, RecordConfig(run_id=run_id, resume=True, task_ids=("normal/1", "shopping/1")))
    with pytest.raises(StoreError, match="nothing to resume: .* has no run never-was .leave out --resume"):
        record_run(store, RecordConfig(run_id="never-was", resume=True))
    assert store.run_ids() == [run_id]


def _record(tmp_path: Path, agent: str, **limits: int) -> RunSummary:
    return record_run(
        Store.open(tmp_path / "store", create=True),
        RecordConfig(agent=agent, task_ids=("normal/1",), limits=Limits(**limits)),
    )


def test_action_error_is_recorded_and_episode_goes_on(tmp_path: Path) -> None:
    summary = _record(tmp_path, "tests.agents_for_tests:MissingThenStop")
    assert summary.episodes[0].stop_reason == "stop" and summary.episodes[0].n_steps == 2
    rows = _one(tmp_path / "store", "select action, action_error from steps order by step_index")
    assert rows[0][0] == "click [99999]" and "not on the current page" in rows[0][1]
    assert rows[1] == ("stop [done]", None)


def test_repeated_action_budget_and_token_accounting(tmp_path: Path) -> None:
    summary = _record(tmp_path, "tests.agents_for_tests:Repeater")
    assert summary.episodes[0].stop_reason == "repeated_action" and summary.episodes[0].n_steps == 3
    rows = _one(
        tmp_path / "store", "select prompt_tokens, completion_tokens, round(cost_usd, 6) from episodes"
    )
    assert rows == [(30, 15, 0.003)]


def test_unparsable_and_max_steps_budgets(tmp_path: Path) -> None:
    babbler = _record(tmp_path / "a", "tests.agents_for_tests:Babbler")
    assert babbler.episodes[0].stop_reason == "unparsable_output" and babbler.episodes[0].n_steps == 3
    errors = _one(tmp_path / "a" / "store", "select action, action_error from steps")
    assert errors and all(a is None and "unknown action" in e for a, e in errors)
    capped = _record(tmp_path / "b", "tests.agents_for_tests:Repeater", max_steps=2)
    assert capped.episodes[0].stop_reason == "max_steps" and capped.episodes[0].n_steps == 2


def test_secrets_in_urls_are_redacted(tmp_path: Path) -> None:
    _record(tmp_path, "tests.agents_for_tests:SecretVisitor")
    urls = [r[0] for r in _one(tmp_path / "store", "select url from requests")]
    assert any("api_key=%5BREDACTED%5D" in u for u in urls)
    assert not any("sk-test-123" in u for u in urls)
    steps = _one(tmp_path / "store", "select url, action, model_output, tree_text from steps")
    assert steps and not any("sk-test-123" in (v or "") for row in steps for v in row)
    assert "api_key=%5BREDACTED%5D" in steps[1][0]


def test_agent_exception_marks_the_episode_errored(tmp_path: Path) -> None:
    summary = _record(tmp_path, "tests.agents_for_tests:Crasher")
    episode = summary.episodes[0]
    assert (episode.status, episode.stop_reason) == ("error", "error")
    assert episode.error == "agent failed: ValueError: model endpoint exploded"
    rows = _one(tmp_path / "store", "select status, error, n_requests > 0 from episodes")
    assert rows == [("error", episode.error, True)]


def test_ctrl_c_leaves_no_partial_episode(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        _record(tmp_path, "tests.agents_for_tests:Interrupter")
    store = Store.open(tmp_path / "store")
    assert store.read("episodes").num_rows == 0 and store.read("runs").num_rows == 1
    report = verify_store(store)
    assert report.ok and not report.in_progress, report.problems


def test_two_workers_give_the_same_results_as_one(recorded: tuple[Path, RunSummary], tmp_path: Path) -> None:
    """Four copies of normal/1 on two workers end as normal/1 did on one (the session's recording)."""
    suite = _suite_of_copies(tmp_path / "suite", 4)
    summary = record_run(
        Store.open(tmp_path / "store", create=True), RecordConfig(tasks=str(suite), layout=Layout(workers=2))
    )
    parallel = [
        (e.task_id, e.status, e.stop_reason, e.n_steps, e.live_hops, e.final_answer) for e in summary.episodes
    ]
    one = recorded[1].episodes[0]
    assert parallel == [
        (f"normal/{n}", one.status, one.stop_reason, one.n_steps, one.live_hops, one.final_answer)
        for n in range(1, 5)
    ]
    workers = _one(tmp_path / "store", "select count(distinct worker) from episodes")[0][0]
    assert workers == 2


def test_replay_agent_repeats_a_stored_run(recorded: tuple[Path, RunSummary], recorded_copy: Path) -> None:
    source = recorded[1].run_id
    replayed = record_run(
        Store.open(recorded_copy, create=True),
        RecordConfig(agent="replay", task_ids=("normal/1",), agent_settings=AgentSettings(from_run=source)),
    )
    original = recorded[1].episodes[0]
    episode = replayed.episodes[0]
    assert (episode.stop_reason, episode.n_steps, episode.live_hops, episode.final_answer) == (
        original.stop_reason,
        original.n_steps,
        original.live_hops,
        original.final_answer,
    )
    actions = _one(
        recorded_copy, "select run_id, list(action order by step_index) from steps group by run_id"
    )
    assert len(actions) == 2 and actions[0][1] == actions[1][1]
    one = record_run(
        Store.open(recorded_copy, create=True),
        RecordConfig(
            agent="replay",
            task_ids=("normal/1",),
            agent_settings=AgentSettings(from_episode=original.episode_id),
        ),
    )
    assert one.episodes[0].final_answer == original.final_answer


def test_replay_agent_needs_a_source(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="--from-episode"):
        record_run(Store.open(tmp_path / "s", create=True), RecordConfig(agent="replay"))
    assert not (tmp_path / "s").exists()


def test_run_summary_counts(recorded: tuple[Path, RunSummary]) -> None:
    summary = recorded[1]
    assert (summary.hop_sr, summary.task_sr, summary.errors, summary.tokens) == (1.0, 1.0, 0, 0)
    assert summary.episodes[0].answer_ok is True and summary.episodes[0].success


def _suite_of_copies(folder: Path, copies: int) -> Path:
    """A suite of ``copies`` tasks that are all the built-in normal/1."""
    (folder / "normal").mkdir(parents=True)
    original = (Path(load_suite().path) / "normal" / "1.json").read_text()
    for number in range(1, copies + 1):
        (folder / "normal" / f"{number}.json").write_text(original)
    return folder


def test_browser_crash_errors_one_episode_and_the_next_gets_a_new_browser(tmp_path: Path) -> None:
    suite = _suite_of_copies(tmp_path / "suite", 2)
    summary = record_run(
        Store.open(tmp_path / "store", create=True),
        RecordConfig(tasks=str(suite), agent="tests.agents_for_tests:BrowserKiller"),
    )
    first, second = summary.episodes
    assert (first.status, first.stop_reason) == ("error", "error") and "closed" in first.error
    assert (second.status, second.final_answer) == ("completed", "alive")


def test_sigkilled_run_resumes_with_every_task_exactly_once(tmp_path: Path) -> None:
    suite = _suite_of_copies(tmp_path / "suite", 4)
    store = tmp_path / "store"
    command = [
        sys.executable,
        "-m",
        "mmina",
        "record",
        "--tasks",
        str(suite),
        "--store",
        str(store),
        "--run-id",
        "killed",
        "--no-screenshots",
    ]
    proc = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        for line in proc.stderr:
            if line.startswith("[1] "):
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    done = _one(store, "select count(*) from episodes")[0][0]
    assert 1 <= done < 4
    resumed = record_run(
        Store.open(store, create=True),
        RecordConfig(
            tasks=str(suite), run_id="killed", resume=True, browser=BrowserConfig(screenshots=False)
        ),
    )
    assert len(resumed.skipped) == done and len(resumed.episodes) == 4 - done
    counts = _one(store, "select task_id, count(*) from episodes group by task_id order by task_id")
    assert counts == [(f"normal/{n}", 1) for n in range(1, 5)]
    assert {p.kind for p in verify_store(Store.open(store)).problems} <= {"partial"}


def test_every_observation_part_is_present_on_every_step(recorded: tuple[Path, RunSummary]) -> None:
    """The oracle is not shown the set-of-marks image: it is neither painted nor stored, its marks are."""
    rows = _one(
        recorded[0],
        """
        select count(*),
               count(*) filter (where url is not null and title is not null and len(tabs) >= 1
                                and tree_text is not null and screenshot is not null and screenshot_som is null
                                and marks is not null
                                and images is not null and tree_ms > 0 and screenshot_ms > 0 and som_ms is null
                                and images_ms >= 0 and observe_ms >= greatest(tree_ms, screenshot_ms, images_ms)
                                and agent_ms >= 0 and action_ms >= 0 and live_hops is not null),
               count(*) filter (where len(images) > 0 and images[1].blob is not null),
               count(*) filter (where len(marks) > 0 and marks[1].id is not null and marks[1].width > 0)
        from steps""",
    )
    total, complete, with_images, with_marks = rows[0]
    assert total == complete == with_marks > 0
    assert with_images > 0, "in-view images are linked to their stored bodies"


def test_terminal_observation_is_the_page_after_the_last_action(
    recorded: tuple[Path, RunSummary], tmp_path: Path
) -> None:
    store, _ = recorded
    # a stop: the terminal observation is the page the stop was given on
    [(final_url, last_url, tree, shot, tabs)] = _one(
        store,
        """
        select e.final_url, s.url, e.final_tree_text, e.final_screenshot, e.final_tabs from episodes e
        join steps s on s.episode_id = e.episode_id and s.step_index = e.n_steps - 1""",
    )
    assert final_url == last_url and "[" in tree and len(shot) == 64 and tabs[0]["url"] == final_url
    # a budget: the page the last action reached, which no step shows
    capped = _record(tmp_path, "oracle", max_steps=3)
    assert capped.episodes[0].stop_reason == "max_steps"
    [(final_url, last_url, observed)] = _one(
        tmp_path / "store",
        """
        select e.final_url, s.url, e.final_observed_at > s.started_at from episodes e
        join steps s on s.episode_id = e.episode_id and s.step_index = 2""",
    )
    assert final_url == "http://shop.mmina.test/" != last_url and observed
    scores = _one(tmp_path / "store", "select hops_passed from episode_scores where evaluator = 'hops'")
    assert capped.episodes[0].hops_passed == scores[0][0] == capped.episodes[0].hops_credited
