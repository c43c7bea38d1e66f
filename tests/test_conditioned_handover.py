"""Hop-conditioned episodes in a real browser: the prefix from the archive, the state handed over.

A two-hop task over tests/state_site.py is recorded with the oracle (the reference), then a
scripted agent takes over at hop 2: the reference's three steps (a link opened in a new tab,
back to the first tab, hop 1's page) are replayed from the archive, and the agent goes on on the
live site. What the prefix left must be there: cookies set by the pages' scripts, local and
session storage, both tabs, the first tab's history; the clock must read the real time; and
nothing of the prefix may have reached the live server.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.analysis.report import build_report
from mmina.cli import cli
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.replayer.conditioned import ConditionedSummary, record_conditioned
from mmina.replayer.prefixes import PrefixSpec
from mmina.store import Store
from mmina.store.sql import run_query
from tests.agents_for_tests import StateProbe
from tests.serve_helpers import served_read_only
from tests.state_site import URL, StateSite, write_task
from tests.test_report import assert_matches_sql, documented_sql

AGENT = "tests.agents_for_tests:StateProbe"


@pytest.fixture(scope="module")
def conditioned(tmp_path_factory: pytest.TempPathFactory):
    """The reference (oracle), the live hits of the conditioned run, and the conditioned run."""
    root = tmp_path_factory.mktemp("handover")
    suite = write_task(root / "tasks")
    store = Store.open(root / "store", create=True)
    with StateSite() as site:
        browser = BrowserConfig(extra_args=tuple(site.chromium_args()))
        reference = record_run(store, RecordConfig(tasks=str(suite), browser=browser, run_id="reference"))
        site.take_hits()
        StateProbe.handovers.clear()
        summary = record_conditioned(
            store,
            RecordConfig(agent=AGENT, browser=browser, run_id="probe"),
            PrefixSpec("reference", hops=(2,)),
        )
        hits = site.take_hits()
    return store, reference, summary, hits


def _steps(store: Store, run_id: str) -> list[dict]:
    return sorted(store.read("steps", run_id=run_id).to_pylist(), key=lambda r: r["step_index"])


def _episode(store: Store, run_id: str) -> dict:
    (row,) = store.read("episodes", run_id=run_id).to_pylist()
    return row


def test_the_reference_passes_and_hop_1_ends_at_step_3(conditioned) -> None:
    store, reference, _summary, _hits = conditioned
    (result,) = reference.episodes
    assert (result.verdict, result.hops_passed, result.final_answer) == ("pass", 2, "oolong")
    assert [s["url"] for s in _steps(store, "reference")] == [
        URL,
        f"{URL}other",
        URL,
        f"{URL}two",
        f"{URL}state",
    ]


def test_the_prefix_replays_from_the_archive_and_is_stored_with_the_episode(conditioned) -> None:
    store, _reference, summary, hits = conditioned
    (episode,) = summary.episodes
    row = _episode(store, "probe")
    assert (row["prefix_run"], row["prefix_steps"], row["hops_given"], row["prefix_hop_steps"]) == (
        "reference",
        3,
        1,
        [3],
    )
    assert row["prefix_episode"] == episode.prefix.source.episode_id
    assert (row["prefix_faithful"], row["prefix_mismatch"]) == (True, None), row["prefix_mismatch"]
    assert (
        summary.prefix_fidelity == 1.0 and episode.check.compared == 4
    )  # three steps and the page handed over
    steps = _steps(store, "probe")
    reference_steps = _steps(store, "reference")
    assert [s["action"] for s in steps[:3]] == [s["action"] for s in reference_steps[:3]]
    assert [s["url"] for s in steps] == [
        URL,
        f"{URL}other",
        URL,
        f"{URL}two",
        f"{URL}state",
        f"{URL}two",
        URL,
    ]
    # the prefix never reached the live site: its first page request is the agent's click on State
    # (a tab's icon may be asked for whenever the browser likes)
    pages = [path for path, _ in hits if path != "/favicon.ico"]
    assert pages[0] == "/state", hits
    assert episode.requests.total > 0 and episode.requests.unmatched == 0


def test_the_agent_is_told_what_was_done_for_it(conditioned) -> None:
    store, _reference, _summary, _hits = conditioned
    (handover,) = StateProbe.handovers
    assert handover.start_hop == 1 and handover.show_actions
    assert list(handover.actions) == [s["action"] for s in _steps(store, "reference")[:3]]
    assert list(handover.urls) == [URL, f"{URL}other", URL]


def test_cookies_storage_tabs_and_history_are_handed_over(conditioned) -> None:
    store, _reference, _summary, hits = conditioned
    steps = _steps(store, "probe")
    state = steps[4]["tree_text"]
    assert "theme=dark" in state and "local: basket=oolong" in state and "session: note=first-tab" in state
    server_saw = dict(hits)["/state"]
    assert "theme=dark" in server_saw
    # the server's own cookie is held redacted in the archive: never handed to the live site forged
    assert "visit=" not in server_saw
    assert [len(s["tabs"]) for s in steps[3:]] == [2, 2, 2, 2]
    # go_back twice from /two walks the history the prefix made (State, then back through Two to Home)
    assert (steps[5]["action"], steps[6]["url"]) == ("go_back", URL)
    handed = json.loads(_episode(store, "probe")["handover_json"])
    assert [t["url"] for t in handed["tabs"]] == [f"{URL}two", f"{URL}other"]
    assert handed["tabs"][0]["history"] >= 2 and "theme" in handed["cookie_names"]
    # the replay set the server's cookie with the redacted value the archive holds; it was dropped
    assert "visit" not in handed["cookie_names"] and handed["dropped_cookie_names"] == ["visit"]
    assert handed["local_storage"] == {URL.rstrip("/"): ["basket"]}


def test_after_the_hand_over_the_page_clock_is_the_real_clock_and_runs(conditioned) -> None:
    store, _reference, _summary, _hits = conditioned
    steps = _steps(store, "probe")
    handed_at = datetime.fromisoformat(
        json.loads(_episode(store, "probe")["handover_json"])["handed_over_at"]
    )
    first, later = (int(v) for v in re.search(r"clock: (\d+) then (\d+)", steps[4]["tree_text"]).groups())
    read_at = datetime.fromtimestamp(first / 1000, UTC)
    # the replay's clock started at the reference's start, seconds before: the live page reads the wall clock
    assert handed_at.timestamp() - 0.25 <= read_at.timestamp() <= steps[4]["started_at"].timestamp() + 0.25
    assert later - first >= 50


def test_the_hop_queue_starts_at_hop_2_with_hop_1_given(conditioned) -> None:
    store, _reference, summary, _hits = conditioned
    (episode,) = summary.episodes
    assert (episode.result.start_hop, episode.result.hops_passed, episode.result.verdict) == (1, 1, "pass")
    row = _episode(store, "probe")
    assert (row["live_hops"], row["hop_steps"]) == (2, [3, 4])
    hops = run_query(
        store,
        "select hop, verdict, detail_json from scores where run_id = 'probe' "
        "and evaluator = 'hops' and level = 'hop'",
    ).rows
    assert [(h[0], h[1], json.loads(h[2])["completed_step"]) for h in hops] == [(2, "pass", 4)]
    (task,) = run_query(
        store,
        "select detail_json from scores where run_id = 'probe' and evaluator = 'hops' and level = 'task'",
    ).rows
    assert json.loads(task[0])["hops_given"] == 1 and json.loads(task[0])["given_hop_steps"] == [3]
    given = run_query(
        store,
        "select hop, live_reached, live_reached_step, given from episode_hops "
        "where run_id = 'probe' order by hop",
    ).rows
    assert given == [(1, True, 3, True), (2, True, 4, False)]
    scored = run_query(
        store,
        "select hops_passed, hops_total, passed from episode_scores where run_id = 'probe' "
        "and evaluator = 'hops'",
    ).rows
    assert scored == [(1, 1, True)]


def test_a_summary_says_it_in_json(conditioned) -> None:
    _store, _reference, summary, _hits = conditioned
    data = summary.as_json()
    assert isinstance(summary, ConditionedSummary) and data["prefix_fidelity"] == 1.0
    (episode,) = data["episodes"]
    assert (episode["hops_given"], episode["prefix_steps"], episode["prefix"]["faithful"]) == (1, 3, True)
    assert data["skipped_prefixes"] == []


def test_hop_1_hands_over_the_start_page_and_hops_beyond_the_task_are_skipped(
    tmp_path: Path, conditioned
) -> None:
    store, _reference, _summary, _hits = conditioned
    with StateSite() as site:
        browser = BrowserConfig(extra_args=tuple(site.chromium_args()))
        summary = record_conditioned(
            store,
            RecordConfig(agent="oracle", browser=browser, run_id="oracle-at-1"),
            PrefixSpec("reference", hops=(1, 3)),
        )
    (episode,) = summary.episodes
    assert (episode.prefix.steps, episode.prefix.start_hop, episode.result.verdict) == (0, 0, "pass")
    assert [(s.task_id, s.hop) for s in summary.skipped] == [("state/1", 3)]
    assert "has 2 hop(s)" in summary.skipped[0].reason


def test_the_served_analysis_and_the_html_report_show_the_conditioned_table(
    conditioned, tmp_path: Path
) -> None:
    store, _reference, _summary, _hits = conditioned
    with served_read_only(store.root) as app:
        data = app.json("/api/analysis?run=probe&evaluator=hops")
    assert {
        "id": "conditioned-hops",
        "title": "Hop success given a correct prefix",
        "table": "conditioned_hops",
    } in data["sections"]
    table = data["tables"]["conditioned_hops"]
    row = dict(zip(table["columns"], table["rows"][0]))
    assert (row["agent"], row["n_hops"], row["hop"], row["episodes"], row["passed"]) == (
        AGENT,
        "2",
        "2",
        "1",
        "1",
    )
    out = tmp_path / "report.html"
    result = CliRunner().invoke(
        cli, ["report", "--store", str(store.root), "--run", "probe", "--format", "html", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert 'id="conditioned-hops"' in out.read_text() and 'data-table="conditioned_hops"' in out.read_text()


def test_the_documented_sql_gives_the_conditioned_table(conditioned) -> None:
    store, _reference, _summary, _hits = conditioned
    report = build_report(store).table("conditioned_hops").records()
    result = run_query(store, documented_sql()["conditioned_hops"])
    sql = [dict(zip(result.columns, row)) for row in result.rows]
    assert {r["agent"] for r in report} >= {AGENT}
    assert_matches_sql(report, sql)


def test_rescoring_gives_the_live_verdicts_and_the_official_rules_see_the_whole_trajectory(
    conditioned, tmp_path: Path
) -> None:
    store = Store.open(shutil.copytree(conditioned[0].root, tmp_path / "store"))
    live = run_query(
        store,
        "select level, hop, verdict, detail_json from scores where run_id = 'probe' "
        "and evaluator = 'hops' order by level, hop",
    ).rows
    rescore(store, RescoreConfig(evaluator="hops", runs=("probe",)))
    again = run_query(
        store,
        "select level, hop, verdict, detail_json from latest_scores "
        "where run_id = 'probe' and evaluator = 'hops' order by level, hop",
    ).rows
    assert again == live
    rescore(store, RescoreConfig(evaluator="mmina_official", args={"domain": "multi567"}, runs=("probe",)))
    hops = run_query(
        store,
        "select hop, verdict from latest_scores where run_id = 'probe' and "
        "evaluator = 'mmina_official' and level = 'hop' order by hop",
    ).rows
    assert [h[0] for h in hops][:1] == [1]  # the runner credits the prefix's hops: it cannot tell them apart
    scored = run_query(
        store, "select hops_total from episode_scores where run_id = 'probe' and evaluator = 'mmina_official'"
    ).rows
    assert scored == [(sum(h[0] >= 2 for h in hops),)]  # analysis leaves the given hop's rows out
    log = build_report(store, ["probe"], "mmina_official").table("runner_log").records()
    assert log[-1]["tasks"] == 0  # the runner's log has no place for a conditioned episode
