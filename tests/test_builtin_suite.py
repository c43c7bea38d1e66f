"""The built-in suites: generated from the sites, complete, and solved by the oracle in a real browser.

Also shows why archive replay matters: at drift 3 the same scripts meet different pages.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from mmina.executors.interface import Layout
from mmina.fixtures import generate_tasks
from mmina.fixtures.web.server import SITE_CLASSES
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.task import SUITE_FOLDERS, builtin_suite_path
from mmina.tasks.taskcheck import check_path, load_suite
from tests.heavy import sized

SAMPLE = ("multipro/5", "multipro/6", "compare/1", "multi567/1", "normal/1", "shopping/6", "wikipedia/1")
"""What the default run records (79 of the suite's 762 oracle steps): every site (the two 10-hop
tasks visit all thirteen between them), every suite folder, 1, 2, 5 and 10 hops (the tasks in
kiwix-serve's viewer: test_kiwix.py). With MMINA_HEAVY=1, every task of the suite."""
DRIFT_SAMPLE = ("compare/1", "multi567/1", "normal/1", "shopping/6", "wikipedia/1")
"""At drift 3 the default run re-records the short tasks of the sample (every folder but multipro)."""
WAIT_S = 1800
"""The first test to use a recording waits for it: the whole suite takes minutes (more on a busy machine)."""


def selected(tasks: tuple[str, ...]) -> tuple[str, ...]:
    """``tasks``, or with MMINA_HEAVY=1 every task of the suite (``()`` selects them all)."""
    return sized(tasks, ())


def _record(
    tmp_path_factory: pytest.TempPathFactory, tasks: tuple[str, ...], drift: int
) -> tuple[Path, RunSummary]:
    """The oracle over ``tasks`` (all of them with MMINA_HEAVY=1), without screenshots."""
    store = tmp_path_factory.mktemp(f"drift{drift}") / "store"
    config = RecordConfig(
        task_ids=selected(tasks),
        drift=drift,
        layout=sized(Layout(), Layout(workers=2)),
        browser=BrowserConfig(screenshots=False),
    )
    return store, record_run(Store.open(store, create=True), config)


@pytest.fixture(scope="module")
def drift0(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunSummary]:
    return _record(tmp_path_factory, SAMPLE, 0)


@pytest.fixture(scope="module")
def drift3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunSummary]:
    return _record(tmp_path_factory, DRIFT_SAMPLE, 3)


def test_task_files_are_what_the_generator_makes() -> None:
    stale = generate_tasks.stale_files(generate_tasks.build_suites(), generate_tasks.TASKS_DIR)
    assert stale == [], "run: python -m mmina.fixtures.generate_tasks"


def test_suite_shape() -> None:
    assert check_path(builtin_suite_path()) == []
    tasks = load_suite().tasks
    hops = Counter(t.n_hops for t in tasks)
    assert len(tasks) >= 80
    assert set(range(1, 11)) <= set(hops), hops
    assert sum(n for h, n in hops.items() if h >= 5) >= 5 and sum(n for h, n in hops.items() if h >= 8) >= 3
    assert {t.suite for t in tasks} == set(SUITE_FOLDERS)
    assert sum(bool(t.original.get("multimodal")) for t in tasks) >= 10
    assert all(t.reference_script for t in tasks)
    assert len(SITE_CLASSES) >= 13


def test_the_default_sample_has_every_site_and_folder() -> None:
    """What the default run's recordings stand for: the oracle solves tasks of every site and every
    folder in a browser; every task of the suite is solved with MMINA_HEAVY=1."""
    sample = load_suite(None, list(SAMPLE)).tasks
    assert {hop.keyword for t in sample for hop in t.hops} == {cls.keyword for cls in SITE_CLASSES}
    assert {t.suite for t in sample} == set(SUITE_FOLDERS) and {1, 2, 5, 10} <= {t.n_hops for t in sample}
    assert set(DRIFT_SAMPLE) < set(SAMPLE)


def test_keywords_only_match_their_own_site() -> None:
    """The official URL rule must not complete a hop on the wrong site."""
    keywords = {cls.keyword for cls in SITE_CLASSES}
    for keyword, fragments in generate_tasks.fragments_by_site().items():
        for fragment in fragments:
            urls = [fragment.reference_url] + [s["url"] for s in fragment.script if s["action"] == "goto"]
            for url in urls:
                assert keyword in url.lower(), (keyword, url)
                assert not [k for k in keywords - {keyword} if k in url.lower() and k not in keyword], (
                    keyword,
                    url,
                )
            assert fragment.script[0]["action"] == "goto"
            if fragment.city:
                assert (
                    fragment.city.lower().replace(" ", "-") in fragment.reference_url.lower()
                    or fragment.city.lower() in fragment.reference_url.lower()
                ), fragment
            if fragment.flight:
                assert fragment.flight.lower() in fragment.reference_url.lower(), fragment


@pytest.mark.timeout(WAIT_S)
def test_oracle_solves_every_task_at_drift_0(drift0: tuple[Path, RunSummary]) -> None:
    store, summary = drift0
    tasks = {t.task_id: t for t in load_suite(None, list(selected(SAMPLE)) or None).tasks}
    assert sorted(e.task_id for e in summary.episodes) == sorted(tasks)
    failed = [
        (e.task_id, e.status, e.stop_reason, e.live_hops, e.n_hops, e.error)
        for e in summary.episodes
        if (e.status, e.stop_reason, e.live_hops) != ("completed", "stop", e.n_hops)
    ]
    assert failed == []
    for episode in summary.episodes:
        answers = tasks[episode.task_id].reference_answers.get("must_include", [])
        assert all(a.lower() in (episode.final_answer or "").lower() for a in answers), episode
    errors = run_query(Store.open(store), "select count(*) from steps where action_error is not null").rows
    assert errors == [(0,)]


def test_text_answers_are_on_the_pages_the_oracle_saw(drift0: tuple[Path, RunSummary]) -> None:
    rows = run_query(
        Store.open(drift0[0]),
        """
        select t.task_id, t.original_json, list(s.tree_text) from tasks t
        join episodes e using (task_id) join steps s using (episode_id) group by all""",
    ).rows
    for task_id, original, trees in rows:
        seen = "\n".join(trees).lower()
        for hop in json.loads(original).get("mmina_hops", []):
            if not hop["multimodal"]:
                assert hop["answer"].lower() in seen, (task_id, hop["answer"])


@pytest.mark.timeout(WAIT_S)
def test_drift_3_changes_the_pages_of_most_tasks(
    drift0: tuple[Path, RunSummary], drift3: tuple[Path, RunSummary]
) -> None:
    def pages(store: Path) -> dict[str, list[str]]:
        rows = run_query(
            Store.open(store),
            """
            select e.task_id, list(s.tree_text order by s.step_index) from episodes e
            join steps s using (episode_id) group by all""",
        ).rows
        return dict(rows)

    before, after = pages(drift0[0]), pages(drift3[0])
    assert set(after) == set(selected(DRIFT_SAMPLE) or before)
    changed = [t for t in after if before[t] != after[t]]
    assert len(changed) * 3 >= len(after), f"only {len(changed)} of {len(after)} tasks met different pages"
