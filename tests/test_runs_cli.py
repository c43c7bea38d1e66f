"""Runs you can find: ``mmina runs`` lists them, and every command that takes a run takes its
id, an unambiguous prefix or ``latest``, through one resolver with one wording for a run it
cannot name."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.errors import UnknownRunError
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.store import Store
from mmina.store.run_refs import resolve_run_ref
from tests.store_helpers import T0, episode_row, judged_task_row, run_row, step_row

EMPTY, OLD, MIDDLE, LATEST = (
    "20250101-000000-human-dddddd",
    "20250102-030405-oracle-aaaaaa",
    "20250103-030405-heuristic-bbbbbb",
    "20250103-040405-openai-bbcccc",
)
TASKS = [
    judged_task_row("normal/1", {"must_include": ["x"]}),
    judged_task_row("normal/2", {"must_include": ["x"]}),
]


def _episode(store: Store, run_id: str, episode_id: str, task_id: str, urls: list[str]) -> None:
    writer = store.episode_writer(run_id, episode_id)
    for index, url in enumerate(urls):
        writer.add_step(step_row(index, url=url))
    writer.commit(episode_row(task_id, n_steps=len(urls), final_answer="x"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs") / "store"
    opened = Store.open(root, create=True)
    for day, (run_id, agent, model) in enumerate(
        (
            (EMPTY, "human", None),
            (OLD, "oracle", None),
            (MIDDLE, "heuristic", None),
            (LATEST, "openai", "gpt-x"),
        )
    ):
        opened.begin_run(
            run_id,
            run_row(created_at=T0 + timedelta(days=day), agent=agent, model=model, task_count=2),
            TASKS,
        )
    _episode(opened, OLD, "old-1", "normal/1", ["http://site0.test/", "http://site1.test/"])
    _episode(opened, OLD, "old-2", "normal/2", ["http://elsewhere.test/"])
    _episode(opened, MIDDLE, "mid-1", "normal/1", ["http://site0.test/"])
    _episode(opened, LATEST, "new-1", "normal/1", ["http://site0.test/", "http://site1.test/"])
    _episode(opened, LATEST, "new-2", "normal/2", ["http://site0.test/", "http://site1.test/"])
    assert rescore(opened, RescoreConfig(evaluator="hops", runs=(OLD, MIDDLE, LATEST))).ok
    return root


def mmina(store: Path, *args: str, exit_code: int = 0) -> str:
    result = CliRunner().invoke(cli, [*args, "--store", str(store)])
    assert result.exit_code == exit_code, result.output
    return result.output


def test_resolver_takes_ids_prefixes_and_latest() -> None:
    runs = [EMPTY, OLD, MIDDLE, LATEST]
    assert [resolve_run_ref(r, runs, "s") for r in (OLD, "20250102", "latest", "20250101")] == [
        OLD,
        OLD,
        LATEST,
        EMPTY,
    ]
    with pytest.raises(UnknownRunError, match=r"^run '20250103' is ambiguous in s: it starts 2 run ids "):
        resolve_run_ref("20250103", runs, "s")
    with pytest.raises(UnknownRunError, match=r"^no run 'nope' in s \(runs: 20250103-040405-openai-bbcccc, "):
        resolve_run_ref("nope", runs, "s")
    assert resolve_run_ref("latest", ["latest", "zzz"], "s") == "latest"  # an id that exists is itself
    with pytest.raises(UnknownRunError, match="it holds no run"):
        resolve_run_ref("latest", [], "s")


def test_runs_lists_every_run_the_latest_first(store: Path) -> None:
    rows = json.loads(mmina(store, "runs", "--format", "json"))
    assert [r["run_id"] for r in rows] == [LATEST, MIDDLE, OLD, EMPTY]
    by_id = {r["run_id"]: r for r in rows}
    assert {r: by_id[r]["status"] for r in by_id} == {
        LATEST: "complete",
        MIDDLE: "partial",
        OLD: "complete",
        EMPTY: "empty",
    }
    assert (
        by_id[LATEST]["agent"],
        by_id[LATEST]["model"],
        by_id[LATEST]["tasks"],
        by_id[LATEST]["episodes"],
    ) == ("openai", "gpt-x", 2, 2)
    report = json.loads(mmina(store, "report", "--run", OLD, "--format", "json"))["tables"]["sr_by_bucket"][
        -1
    ]
    assert (by_id[OLD]["task_sr"], by_id[OLD]["hop_sr"]) == (report["task_sr"], report["hop_sr"])
    assert by_id[OLD]["task_sr_lo"] == report["task_sr_lo"] and by_id[EMPTY]["task_sr"] is None


def test_the_runs_table_keeps_each_run_on_one_line(store: Path) -> None:
    table = mmina(store, "runs")
    for run_id in (LATEST, MIDDLE, OLD, EMPTY):
        (line,) = [line for line in table.splitlines() if run_id in line]
        assert "%" in line or run_id == EMPTY
    assert "2025-01-04 03:04 UTC" in table  # the start of the latest run, to the minute
    assert mmina(store, "runs", "--limit", "1", "--format", "csv").splitlines()[1].startswith(LATEST + ",")


def test_latest_and_prefixes_work_where_a_run_is_taken(store: Path) -> None:
    assert json.loads(mmina(store, "report", "--run", "latest", "--format", "json"))["runs"] == [LATEST]
    assert json.loads(mmina(store, "report", "--run", "20250102", "--format", "json"))["runs"] == [OLD]
    compared = json.loads(mmina(store, "compare", "--run", "20250102", "--run", "latest", "--format", "json"))
    assert (compared["a"]["run_id"], compared["b"]["run_id"]) == (OLD, LATEST)
    rescored = json.loads(
        mmina(store, "rescore", "--evaluator", "hops", "--run", "latest", "--format", "json")
    )
    assert {e["run_id"] for e in rescored["episodes"]} == {LATEST}


COMMANDS = {
    "report": ["report", "--run", "{ref}"],
    "compare": ["compare", "--run", "{ref}", "--run", "latest"],
    "rescore": ["rescore", "--evaluator", "hops", "--run", "{ref}"],
    "replay": ["replay", "--run", "{ref}"],
    "eval-steps": ["eval-steps", "--run", "{ref}", "--report-only"],
    "store compact": ["store", "compact", "--run", "{ref}"],
    "record --from-run": ["record", "--agent", "replay", "--from-run", "{ref}"],
    "record --prefix-run": ["record", "--agent", "heuristic", "--prefix-run", "{ref}", "--at-hop", "2"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_one_wording_for_a_run_that_cannot_be_named(store: Path, tmp_path: Path, command: str) -> None:
    for ref, message in (
        ("nope", f"Error: no run 'nope' in {store} (runs: {LATEST}, "),
        ("20250103", f"Error: run '20250103' is ambiguous in {store}: it starts 2 run ids"),
    ):
        args = [part.format(ref=ref) for part in COMMANDS[command]]
        output = mmina(store, *args, exit_code=1)
        assert output.startswith(message) and output.count("\n") == 1, (command, output)
