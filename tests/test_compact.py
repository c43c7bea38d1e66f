"""Batch writes and compaction: many episodes in one file per table, with nothing a reader sees changing.

Real Parquet written through the store's writers, a really recorded episode, real DuckDB
views; the crash and concurrency cases use real locks and a swap that really fails half-way.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.errors import StoreError
from mmina.store import Store
from mmina.store import compact as compaction
from mmina.store.compact import compact_store
from mmina.store.inspect import store_info, verify_store
from mmina.store.layout import file_version
from mmina.store.schema import SCHEMA_VERSION
from mmina.store.sql import run_query
from tests.store_helpers import begin, episode_row, request_row, step_row, write_episode

V = f".v{SCHEMA_VERSION}.parquet"
GOLDEN = Path(__file__).parent / "golden" / "store-v1"
SNAPSHOT_QUERIES = {
    "episodes": "select * exclude (blob_packs), list_sort(blob_packs) from episodes order by episode_id",
    "steps": "select * from steps order by episode_id, step_index",
    "requests": "select * from requests order by episode_id, seq",
    "hops": "select * from episode_hops order by episode_id, hop",
}


def snapshot(store: Store) -> dict[str, list[tuple]]:
    """Everything a reader sees through SQL and through the Arrow API."""
    seen: dict[str, list] = {name: run_query(store, query).rows for name, query in SNAPSHOT_QUERIES.items()}
    for table in ("episodes", "steps", "requests"):
        data = store.read(table)
        seen[f"arrow:{table}"] = sorted(map(repr, data.to_pylist()))
    return seen


def data_files(store: Store, table: str, run_id: str) -> list[str]:
    return sorted(p.name for p in (store.root / table / f"run_id={run_id}").iterdir())


def grow(store: Store, run_id: str, count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        write_episode(store, run_id, f"ep{index}", [f"shot {index % 3}".encode()], n_steps=3, n_requests=2)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.open(tmp_path / "store", create=True)
    begin(opened, "r1")
    grow(opened, "r1", 6)
    return opened


def test_a_recorded_run_compacts_to_one_file_per_table_and_reads_the_same(recorded_copy: Path) -> None:
    store = Store.open(recorded_copy)
    run_id = store.run_ids()[0]
    grow(store, run_id, 3)
    before, info_before = snapshot(store), store_info(store)
    [result] = compact_store(store)
    assert (result.run_id, result.episodes, result.files_after) == (run_id, 4, 4)
    assert result.files_before == 4 + 4 + 4 + 1 and result.bytes_after < result.bytes_before, (
        "episodes, steps and requests of 4 episodes, and the recorded episode's verdicts (one file: left as it is)"
    )
    for table in ("episodes", "steps", "requests"):
        [name] = data_files(store, table, run_id)
        assert name.startswith("batch-") and name.endswith(V)
    assert snapshot(store) == before
    assert (store_info(store).episodes, store_info(store).steps) == (info_before.episodes, info_before.steps)
    [problem] = verify_store(store).problems  # the synthetic episodes lack the verdicts a recorded run stores
    assert problem.kind == "unscored" and "and 2 more committed without a hops verdict" in problem.message
    assert not (store.root / ".compact").exists()
    episode = next(
        e
        for e in store.read("episodes", run_id=run_id).to_pylist()
        if e["task_id"] != "normal/1" or not e["episode_id"].startswith("ep")
    )
    shots = [s for s in store.read("steps").to_pylist() if s["episode_id"] == episode["episode_id"]]
    blobs = store.read_blobs([s["screenshot"] for s in shots], episode["blob_packs"])
    assert len(blobs) == len({s["screenshot"] for s in shots}) and all(
        b[:2] == b"\xff\xd8" for b in blobs.values()
    )


def test_compacting_again_is_a_no_op_until_new_episodes_arrive(store: Store) -> None:
    assert len(compact_store(store)) == 1
    assert compact_store(store) == []
    grow(store, "r1", 2, start=10)
    assert len(data_files(store, "steps", "r1")) == 3
    before = snapshot(store)
    [result] = compact_store(store)
    assert (result.episodes, result.files_before, result.files_after) == (8, 9, 3)
    assert snapshot(store) == before and len(data_files(store, "steps", "r1")) == 1


def test_compacted_episodes_keep_their_ids_reserved(store: Store) -> None:
    compact_store(store)
    assert store.episode_exists("ep1") and not store.episode_exists("ep99")
    with pytest.raises(StoreError, match="already exists"):
        store.episode_writer("r1", "ep1")
    with pytest.raises(StoreError, match="reserved"):
        store.episode_writer("r1", "batch-0123")


def test_blobs_are_still_deduplicated_after_compaction(store: Store) -> None:
    compact_store(store)
    packs = sorted(p.name for p in (store.root / "blobs").iterdir())
    write_episode(store, "r1", "ep-new", [b"shot 1"], n_steps=1)
    assert sorted(p.name for p in (store.root / "blobs").iterdir()) == packs, "a known blob made a new pack"
    assert verify_store(store).ok


def test_orphans_are_kept_as_they_are_and_still_reported(store: Store) -> None:
    steps = store.root / "steps" / "run_id=r1"
    committed = pq.read_table(steps / f"ep0{V}")
    orphan = steps / f"ep-orphan{V}"  # a writer killed between its renames
    pq.write_table(
        committed.set_column(0, "episode_id", pa.array(["ep-orphan"] * committed.num_rows)), orphan
    )
    content = orphan.read_bytes()
    before = snapshot(store)
    compact_store(store)
    assert orphan.read_bytes() == content and snapshot(store) == before
    assert [(p.kind, p.path) for p in verify_store(store).problems] == [("orphan", str(orphan))]


def test_a_compaction_that_dies_between_swaps_reads_the_same_and_finishes_next_time(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(store)
    swap = compaction._exchange
    calls: list[Path] = []

    def dies_after_the_first_swap(new: Path, live: Path) -> None:
        calls.append(live)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process is killed here
        swap(new, live)

    monkeypatch.setattr(compaction, "_exchange", dies_after_the_first_swap)
    with pytest.raises(KeyboardInterrupt):
        compact_store(store)
    assert len(data_files(store, "episodes", "r1")) == 1 and len(data_files(store, "steps", "r1")) == 6
    assert (store.root / ".compact").exists(), "the half-done work is left aside, invisible"
    assert snapshot(store) == before and verify_store(store).ok
    monkeypatch.setattr(compaction, "_exchange", swap)
    [result] = compact_store(store)
    assert result.files_after == 3 and snapshot(store) == before and not (store.root / ".compact").exists()


def test_a_writer_waits_for_the_swap_and_then_commits(store: Store) -> None:
    writer = store.episode_writer("r1", "ep-late")
    writer.add_step(step_row(0))
    committed = threading.Event()

    def commit() -> None:
        writer.commit(episode_row(n_steps=1))
        committed.set()

    with store.commit_lock(exclusive=True):
        thread = threading.Thread(target=commit)
        thread.start()
        time.sleep(0.5)
        assert not committed.is_set(), "the commit went ahead while compaction held the lock"
    thread.join(10)
    assert committed.is_set() and store.episode_exists("ep-late")


def test_the_golden_v1_store_compacts_to_the_current_version(tmp_path: Path) -> None:
    store = Store.open(shutil.copytree(GOLDEN, tmp_path / "golden"))
    run_id = store.run_ids()[0]
    write_episode(store, run_id, "ep-v2", [b"new"], n_steps=2, n_requests=1)
    before = snapshot(store)
    compact_store(store)
    for table in ("episodes", "steps", "requests"):
        [name] = data_files(store, table, run_id)
        assert file_version(Path(name)) == SCHEMA_VERSION
    assert snapshot(store) == before
    assert run_query(store, "select count(*) from steps where som_ms is null").rows[0][0] > 0


def test_a_batch_writer_commits_many_episodes_as_one_file(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    begin(store, "r1")
    batch = store.batch_writer("r1")
    for index in range(50):
        shot = batch.put_blob(f"screen {index % 5}".encode(), "image/jpeg")
        batch.add_episode(
            {"episode_id": f"b{index}", **episode_row(n_steps=2)},
            [step_row(0, shot), step_row(1, shot)],
            [request_row(1, shot)],
        )
    assert run_query(store, "select count(*) from episodes").rows == [(0,)], "visible before the commit"
    batch.commit()
    assert run_query(store, "select count(*), count(distinct episode_id) from steps").rows == [(100, 50)]
    assert len(data_files(store, "steps", "r1")) == 1 and len(list((store.root / "blobs").iterdir())) == 1
    episode = store.read("episodes").to_pylist()[7]
    assert store.read_blobs([_shot(store, episode["episode_id"])], episode["blob_packs"])
    assert verify_store(store).ok and store.episode_exists("b49")
    again = store.batch_writer("r1")
    again.add_episode({"episode_id": "b3", **episode_row(n_steps=0)})
    with pytest.raises(StoreError, match="b3 already exists"):
        again.commit()
    twice = store.batch_writer("r1")
    twice.add_episode({"episode_id": "c1", **episode_row(n_steps=0)})
    with pytest.raises(StoreError, match="twice"):
        twice.add_episode({"episode_id": "c1", **episode_row(n_steps=0)})
    assert run_query(store, "select count(*) from episodes").rows == [(50,)]


def _shot(store: Store, episode_id: str) -> str:
    return next(s["screenshot"] for s in store.read("steps").to_pylist() if s["episode_id"] == episode_id)


def test_compact_command(store: Store) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["store", "compact", "--store", str(store.root), "--format", "json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert (row["run_id"], row["episodes"], row["files_before"], row["files_after"]) == ("r1", 6, 18, 3)
    result = runner.invoke(cli, ["store", "compact", "--store", str(store.root)])
    assert result.exit_code == 0 and "nothing to compact" in result.output
    result = runner.invoke(cli, ["store", "compact", "--store", str(store.root), "--run", "nope"])
    assert result.exit_code == 1 and result.output.startswith("Error: no run 'nope'")


def _score_rows(batch: str, verdict: str, minute: int) -> list[dict]:
    return [
        {
            "episode_id": f"ep{i}",
            "task_id": "normal/1",
            "evaluator": "hops",
            "evaluator_version": "1",
            "args_json": "{}",
            "level": "task",
            "hop": None,
            "step_index": None,
            "verdict": verdict,
            "value": float(verdict == "pass"),
            "detail_json": "{}",
            "batch_id": batch,
            "scored_at": datetime(2026, 1, 1, 0, minute, tzinfo=UTC),
        }
        for i in range(6)
    ]


def test_score_batches_are_merged_and_the_latest_verdicts_stay_the_latest(store: Store) -> None:
    store.append("scores", _score_rows("b1", "fail", 1), stem="b1", run_id="r1")
    store.append("scores", _score_rows("b2", "pass", 2), stem="b2", run_id="r1")
    latest = "select episode_id, verdict, batch_id from latest_scores order by episode_id"
    before = (
        run_query(store, latest).rows,
        run_query(store, "select * from scores order by batch_id, episode_id").rows,
    )
    [result] = compact_store(store)
    assert result.files_before == 6 * 3 + 2 and result.files_after == 4
    assert len(data_files(store, "scores", "r1")) == 1
    assert (
        run_query(store, latest).rows,
        run_query(store, "select * from scores order by batch_id, episode_id").rows,
    ) == before
    assert {row[1] for row in before[0]} == {"pass"}
