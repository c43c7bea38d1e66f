"""The store contract under stress: real Parquet, real DuckDB, real processes (killed, racing).

Covers the round trip and blob dedup, append-only writes, schema versions (newer refused,
older upgraded), a frozen golden store of version 1, crash safety, concurrent writers and
corrupt files.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.errors import SchemaVersionError, StoreError, StoreWarning
from mmina.store import Store
from mmina.store.blobs import ROW_GROUP_BYTES, sha256
from mmina.store.files import META_TABLE, META_VERSION
from mmina.store.inspect import store_info, verify_store
from mmina.store.layout import LOCK, MARKER
from mmina.store.migrations import Migration
from mmina.store.schema import PREFIX_COLUMNS, SCHEMA_VERSION
from mmina.store.sql import run_query
from tests.store_helpers import REPO_ROOT, begin, episode_row, write_episode

GOLDEN = Path(__file__).parent / "golden" / "store-v1"
V = f".v{SCHEMA_VERSION}.parquet"  # the suffix of files this mmina writes
HEADER = f"import sys, os, time\nsys.path.insert(0, {str(REPO_ROOT)!r})\n"


def new_store(tmp_path: Path, run_id: str = "r1") -> Store:
    store = Store.open(tmp_path / "store", create=True)
    begin(store, run_id)
    return store


def sql(store: Store, query: str) -> list[tuple]:
    return run_query(store, query).rows


def steps_dir(store: Store, run_id: str = "r1") -> Path:
    return store.root / "steps" / f"run_id={run_id}"


def write_versioned(path: Path, data: pa.Table, version: int, table: str) -> Path:
    """A Parquet file as another mmina version would have written it."""
    pq.write_table(
        data.replace_schema_metadata({META_VERSION: str(version).encode(), META_TABLE: table.encode()}), path
    )
    return path


def spawn(script: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HEADER + script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for_line(proc: subprocess.Popen[str], expected: str, timeout: float = 60) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            line = proc.stdout.readline()
            if line.strip() == expected:
                return
            if not line:
                break
    proc.kill()
    raise AssertionError(f"child never printed {expected}: {proc.communicate()[1]}")


# -- 1. round trip ---------------------------------------------------------------------------


def test_round_trip_and_blob_dedup(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    shared, own = b"shared page asset " * 100, b"only in ep2"
    first, again = write_episode(store, "r1", "ep1", [shared, shared], n_steps=2, n_requests=3)
    digests = write_episode(store, "r1", "ep2", [shared, own], n_steps=3)
    assert first == again == sha256(shared) and digests == [first, sha256(own)]

    store = Store.open(store.root)
    steps = store.read("steps").sort_by([("episode_id", "ascending"), ("step_index", "ascending")])
    assert list(zip(steps["episode_id"].to_pylist(), steps["step_index"].to_pylist())) == [
        ("ep1", 0),
        ("ep1", 1),
        ("ep2", 0),
        ("ep2", 1),
        ("ep2", 2),
    ]
    assert steps["screenshot"].to_pylist() == [first, first, first, sha256(own), first]
    assert steps["tabs"][0].as_py() == [{"url": "http://wiki.mmina.test/p0", "title": "Page 0"}]
    assert set(steps["run_id"].to_pylist()) == {"r1"}
    assert store.read("requests", columns=["episode_id", "seq"]).num_rows == 3

    assert sql(store, "select sha256, size from blobs order by size") == [
        (sha256(own), len(own)),
        (first, len(shared)),
    ]
    packs = dict(sql(store, "select episode_id, blob_packs from episodes"))
    assert packs == {"ep1": [f"blobs/ep1{V}"], "ep2": [f"blobs/ep1{V}", f"blobs/ep2{V}"]}
    assert store.read_blobs([first], packs["ep2"]) == {first: shared}
    assert store.read_blobs(digests) == {first: shared, sha256(own): own}
    assert sql(
        store,
        """select e.episode_id, count(*) from steps s join episodes e using (episode_id)
                         join blobs b on b.sha256 = s.screenshot group by all order by 1""",
    ) == [("ep1", 2), ("ep2", 3)]
    assert sql(store, "select count(*), sum(n_requests) from episodes") == [(2, 3)]


# -- 2. append-only --------------------------------------------------------------------------


def test_append_only(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    (digest,) = write_episode(store, "r1", "ep1", [b"first"], n_steps=2)
    with pytest.raises(StoreError, match="append-only"):
        write_episode(store, "r1", "ep1", [b"first"], n_steps=5)
    assert store.read("steps", columns=["screenshot"])["screenshot"].to_pylist() == [digest, digest]
    assert sql(store, "select episode_id, n_steps from episodes") == [("ep1", 2)]
    assert verify_store(store).ok

    assert begin(store, "r1") is False
    with pytest.raises(StoreError, match="different task suite"):
        begin(store, "r1", sha="f" * 64)
    assert len(store.files("runs")) == len(store.files("tasks")) == 1


def test_duplicate_commit_adds_nothing_to_the_committed_episode(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_episode(store, "r1", "ep1", [], n_steps=0)
    write_episode(store, "r1", "ep2", [b"a"], n_steps=1)
    for episode_id in ("ep1", "ep2"):
        with pytest.raises(StoreError):
            write_episode(store, "r1", episode_id, [b"new for " + episode_id.encode()], n_steps=3)
    assert store.read("steps")["episode_id"].to_pylist() == ["ep2"]  # ep1 has gained 3 steps
    assert not list(store.root.rglob("*.tmp"))  # ep2's refused pack is left as a hidden .tmp
    assert [p.name for p in store.files("blobs")] == [f"ep2{V}"]


# -- 3. versioning ---------------------------------------------------------------------------


def test_newer_file_version_is_refused(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_episode(store, "r1", "ep1", n_steps=1)
    newer = SCHEMA_VERSION + 1
    future = write_versioned(
        steps_dir(store) / f"ep1.v{newer}.parquet",
        pa.table({"episode_id": ["ep1"], "step_index": pa.array([7], pa.int32())}),
        newer,
        "steps",
    )
    with pytest.raises(SchemaVersionError, match=f"version {newer}"):
        store.read("steps")
    assert [(p.kind, p.path) for p in verify_store(store).problems] == [("newer_version", str(future))]


def test_sql_refuses_newer_file_version(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_episode(store, "r1", "ep1", n_steps=1)
    newer = SCHEMA_VERSION + 1
    write_versioned(
        steps_dir(store) / f"ep1.v{newer}.parquet",
        pa.table({"episode_id": ["ep1"], "step_index": pa.array([7], pa.int32())}),
        newer,
        "steps",
    )
    with pytest.raises(SchemaVersionError):
        run_query(store, "select count(*) from steps")


def test_newer_store_marker_is_refused(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    marker = store.root / MARKER
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(SchemaVersionError, match=f"version {SCHEMA_VERSION + 1}"):
        run_query(Store.open(store.root), "select count(*) from episodes")
    result = CliRunner().invoke(cli, ["sql", "select 1", "--store", str(store.root)])
    assert result.exit_code == 1 and f"version {SCHEMA_VERSION + 1}" in result.output
    with pytest.raises(SchemaVersionError):
        begin(Store(store.root), "r2")


RENAME_TITLE = Migration(
    table="steps",
    from_version=0,
    description="test: version 0 called the title `page_title`",
    upgrade=lambda t: t.rename_columns(["title" if n == "page_title" else n for n in t.column_names]),
    view_sql="SELECT * RENAME (page_title AS title) FROM ({inner})",
)


def _store_with_v0_steps(tmp_path: Path) -> Store:
    store = new_store(tmp_path)
    write_episode(store, "r1", "ep-new", n_steps=1)
    store.episode_writer("r1", "ep-old").commit(episode_row(n_steps=2))  # no steps: they come as v0
    v0 = pa.table(
        {
            "episode_id": ["ep-old"] * 2,
            "step_index": pa.array([0, 1], pa.int32()),
            "url": ["http://old/0", "http://old/1"],
            "page_title": ["Old 0", "Old 1"],
        }
    )
    write_versioned(steps_dir(store) / "ep-old.v0.parquet", v0, 0, "steps")
    return store


def test_older_version_is_upgraded_on_read(tmp_path: Path) -> None:
    root = _store_with_v0_steps(tmp_path).root
    expected = [
        ("ep-new", 0, "http://wiki.mmina.test/p0", "Page 0", "click [0]", "r1"),
        ("ep-old", 0, "http://old/0", "Old 0", None, "r1"),
        ("ep-old", 1, "http://old/1", "Old 1", None, "r1"),
    ]
    store = Store.open(root, migrations=[RENAME_TITLE])
    columns = ["episode_id", "step_index", "url", "title", "action", "run_id"]
    data = store.read("steps").sort_by([("episode_id", "ascending"), ("step_index", "ascending")])
    assert list(zip(*(data[c].to_pylist() for c in columns))) == expected
    assert data.schema.field("tabs").type == store.read("steps", run_id="r1").schema.field("tabs").type
    assert sql(store, f"select {', '.join(columns)} from steps order by 1, 2") == expected
    assert sql(store, "select count(*) from steps where screenshot is null and images is null") == [(2,)]
    # without the migration the renamed column is lost, proving the migration did the work
    assert Store.open(root).read("steps", columns=["title"])["title"].to_pylist().count(None) == 2


def test_verify_accepts_older_files_without_ref_columns(tmp_path: Path) -> None:
    assert verify_store(Store.open(_store_with_v0_steps(tmp_path).root, migrations=[RENAME_TITLE])).ok


def test_sql_returns_timestamps(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_episode(store, "r1", "ep1", n_steps=1)
    assert sql(store, "select started_at from episodes") == [(datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),)]


# -- 4. golden store of version 1 (never regenerate: see tests/golden/README.md) ------------------

JPEG = "816e9ba8e4eb9039a896dd356abbce3a0aad48e3f9f7c5ba3719d7226736838f"
HTML = "8b963f7bffa57cd91f97881779d71ffb437f8bc9977b7b0448377d65e8eddd9e"


def us(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_golden_v1_store_reads_exactly(tmp_path: Path) -> None:
    root = shutil.copytree(GOLDEN, tmp_path / "golden")
    before = _snapshot(root)
    store = Store.open(root)
    t = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    (episode,) = store.read("episodes").to_pylist()
    assert episode == {
        "episode_id": "golden-ep",
        "task_id": "normal/1",
        "attempt": 1,
        "status": "completed",
        "stop_reason": "stop",
        "final_answer": "Paris",
        "n_steps": 2,
        "n_hops": 2,
        "live_hops": 2,
        "hop_steps": [0, 1],
        "started_at": t,
        "ended_at": t.replace(second=15),
        "duration_ms": 10000.0,
        "prompt_tokens": 201,
        "completion_tokens": 21,
        "cost_usd": 0.5,
        "error": None,
        "n_requests": 3,
        "blob_packs": ["blobs/golden-ep.v1.parquet"],
        "worker": "golden-host:1",
        "run_id": "golden-run",
        **dict.fromkeys(
            (
                "final_url",
                "final_title",
                "final_tabs",
                "final_tree_text",
                "final_screenshot",
                "final_observed_at",
            )
        ),
        **dict.fromkeys(PREFIX_COLUMNS),
        **dict.fromkeys(("endpoint_retries", "endpoint_wait_s", "error_kind", "blocked", "supersedes")),
        "random_seeding": None,
    }
    # version 5 renamed hops_completed to live_hops and added the terminal observation (unknown: NULL), in SQL too;
    # version 6 added the prefix of hop-conditioned episodes (NULL: the episode started from the start page);
    # version 7 renamed start_hop hops_given, steps.hop_index live_hops and scores.hop_index hop (1-based)
    assert sql(
        store, "select live_hops, final_url, final_tabs, hops_given, prefix_hop_steps from episodes"
    ) == [(2, None, None, None, None)]
    steps = store.read("steps").sort_by("step_index").to_pylist()
    assert [(s["url"], s["action"], s["live_hops"], s["screenshot"], s["started_at"]) for s in steps] == [
        ("http://wiki.mmina.test/kiwix", "click [1]", 1, JPEG, t.replace(second=6)),
        ("http://wiki.mmina.test/event", "stop [Paris]", 2, JPEG, t.replace(second=7)),
    ]
    # columns added after version 1 read as NULL, in Arrow and in SQL
    # (version 7's steps.acted_at too: a replay of such a store keeps no recorded pace)
    assert all(
        s["som_ms"] is None and s["images_ms"] is None and s["marks"] is None and s["acted_at"] is None
        for s in steps
    )
    assert sql(
        store, "select count(*), count(som_ms), count(images_ms), count(marks), count(acted_at) from steps"
    ) == [(2, 0, 0, 0, 0)]
    assert steps[0]["images"][0] == {
        "blob": JPEG,
        "src": "http://wiki.mmina.test/a.jpg",
        "alt": "red",
        "x": 1.0,
        "y": 2.0,
        "width": 1.0,
        "height": 1.0,
        "caption": "a red pixel",
    }
    (task,) = store.read("tasks").to_pylist()
    assert (task["task_id"], task["n_hops"], task["cnt_hop"], task["procedure"]) == (
        "normal/1",
        2,
        3,
        ["kiwix", "event", "end"],
    )
    assert store.read("runs", columns=["run_id", "created_at", "task_suite_sha256"]).to_pylist() == [
        {"run_id": "golden-run", "created_at": t, "task_suite_sha256": "a" * 64}
    ]
    blobs = store.read_blobs([JPEG, HTML], episode["blob_packs"])
    assert {sha256(v) for v in blobs.values()} == {JPEG, HTML}
    assert blobs[HTML] == b"<html><body><h1>Golden</h1></body></html>" and blobs[JPEG][:2] == b"\xff\xd8"

    assert sql(
        store, "select seq, method, status, response_body, redirect_url from requests order by seq"
    ) == [
        (0, "GET", 200, HTML, ""),
        (1, "POST", 302, None, "http://wiki.mmina.test/event"),
        (2, "GET", 200, HTML, ""),
    ]
    assert sql(
        store,
        "select count(*) from requests where replay_match is null and replay_source_episode is null "
        "and replay_source_seq is null",
    ) == [(3,)]  # schema 8's columns: unknown in version-1 files
    assert sql(store, "select endpoint_retries, endpoint_wait_s from episodes") == [(None, None)]
    assert sql(store, "select evaluator, verdict, value, epoch_us(scored_at), run_id from scores") == [
        ("must_include", "pass", 1.0, us(t.replace(minute=30)), "golden-run")
    ]
    assert sql(store, "select model, response, epoch_us(created_at) from judge_cache") == [
        ("judge-1", "Yes", us(t.replace(minute=31)))
    ]
    assert sql(store, "select media_type, size from blobs order by size") == [
        ("text/html", 41),
        ("image/jpeg", 634),
    ]
    assert sql(
        store, "select hop, keyword, live_reached, live_reached_step from episode_hops order by 1"
    ) == [(1, "kiwix", True, 0), (2, "event", True, 1)]
    assert sql(store, "select live_hops, live_hop_completed from steps order by step_index") == [
        (1, True),
        (2, True),
    ]
    assert sql(store, "select level, hop from scores") == [("task", None)]
    info = store_info(store)
    assert (info.schema_version, info.runs, info.episodes, info.steps) == (1, 1, 1, 2)
    assert {t.name: (t.files, t.rows) for t in info.tables} == {
        "runs": (1, 1),
        "tasks": (1, 1),
        "episodes": (1, 1),
        "steps": (1, 2),
        "requests": (1, 3),
        "scores": (1, 1),
        "judge_cache": (1, 1),
        "blobs": (1, 2),
    }
    report = verify_store(store)
    assert report.ok and report.files_checked == 8 and report.in_progress == []
    assert _snapshot(root) == before and not (root / LOCK).exists(), "reading must not write"


# -- 5. crash safety -------------------------------------------------------------------------


def test_killed_writer_loses_only_the_episode_in_flight(tmp_path: Path) -> None:
    root = tmp_path / "store"
    blob_size = ROW_GROUP_BYTES // 3 + 1
    proc = spawn(f"""
from mmina.store import Store
from tests.store_helpers import begin, step_row, write_episode
store = Store.open({str(root)!r}, create=True)
begin(store, "r1")
write_episode(store, "r1", "ep-done", [b"first episode"], n_steps=2)
writer = store.episode_writer("r1", "ep-killed")
for i in range(4):
    writer.add_step(step_row(i, writer.put_blob(os.urandom({blob_size}), "image/jpeg")))
print("READY", flush=True)
time.sleep(120)
""")
    try:
        wait_for_line(proc, "READY")
    finally:
        proc.kill()
        proc.wait()
    partial = sorted(str(p) for p in root.rglob(".*.tmp"))
    assert partial and all(f"/blobs/.ep-killed{V}." in p for p in partial)
    assert Path(partial[0]).stat().st_size > ROW_GROUP_BYTES, "row groups of the killed episode reached disk"

    store = Store.open(root)
    assert store.read("episodes", columns=["episode_id"])["episode_id"].to_pylist() == ["ep-done"]
    assert set(store.read("steps")["episode_id"].to_pylist()) == {"ep-done"}
    assert sql(store, "select count(*) from episodes") == [(1,)]
    assert sql(store, "select episode_id, count(*) from steps group by 1") == [("ep-done", 2)]
    report = verify_store(store)
    assert sorted((p.kind, p.path) for p in report.problems) == [("partial", p) for p in partial]
    result = CliRunner().invoke(cli, ["store", "verify", "--store", str(root), "--format", "json"])
    assert result.exit_code == 1 and json.loads(result.output)["problems"][0]["path"] == partial[0]
    result = CliRunner().invoke(cli, ["store", "verify", "--store", str(root)])
    assert result.exit_code == 1 and f"partial: {partial[0]}: " in result.output
    assert f"{len(partial)} problem(s)" in result.output


def test_orphan_files_are_hidden_and_reported(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_episode(store, "r1", "ep1", [b"x"], n_steps=2)
    committed = pq.read_table(steps_dir(store) / f"ep1{V}")
    orphan = steps_dir(store) / f"ep-orphan{V}"  # a writer killed after this rename
    pq.write_table(
        committed.set_column(0, "episode_id", pa.array(["ep-orphan"] * committed.num_rows)), orphan
    )
    assert set(store.read("steps")["episode_id"].to_pylist()) == {"ep1"}
    assert sql(store, "select distinct episode_id from steps") == [("ep1",)]
    assert store_info(store).steps == 2
    assert [(p.kind, p.path) for p in verify_store(store).problems] == [("orphan", str(orphan))]


def test_packs_of_uncommitted_episodes_are_never_referenced(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_episode(store, "r1", "ep1", [b"seen before"], n_steps=1)
    pack = store.root / "blobs" / f"ep1{V}"
    shutil.copy(pack, store.root / "blobs" / f"ep-crashed{V}")  # killed before its episode row
    pack.rename(store.root / "blobs" / f"ep-moved{V}")  # the only committed copy is gone
    fresh = Store.open(store.root)
    write_episode(fresh, "r1", "ep2", [b"seen before"], n_steps=1)
    packs = sql(fresh, "select blob_packs from episodes where episode_id = 'ep2'")[0][0]
    assert packs == [f"blobs/ep2{V}"], "a pack without a committed episode must not be deduplicated against"


# -- 6. concurrent writers -------------------------------------------------------------------


def test_concurrent_writers_share_a_store(tmp_path: Path) -> None:
    root, go, workers = tmp_path / "store", tmp_path / "go", 3
    Store.open(root, create=True).ensure_writable()
    procs = [
        spawn(f"""
from mmina.store import Store
from tests.store_helpers import begin, write_episode
store = Store.open({str(root)!r})
print("READY", flush=True)
while not os.path.exists({str(go)!r}):
    time.sleep(0.005)
created = begin(store, "shared-run")
for i in range(10):
    write_episode(store, "shared-run", f"w{k}-ep{{i}}",
                  [b"common asset" * 500, b"page %d" % i * 300, b"own {k} %d" % i], n_steps=3, n_requests=1)
print(created, flush=True)
""")
        for k in range(workers)
    ]
    for proc in procs:
        wait_for_line(proc, "READY")
    go.touch()
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * workers, [err for _, err in outputs]
    assert sorted(out.strip() for out, _ in outputs) == ["False"] * (workers - 1) + ["True"]

    store = Store.open(root)
    assert len(store.files("runs")) == len(store.files("tasks")) == 1
    assert sql(store, "select count(*), count(distinct episode_id) from episodes") == [(10 * workers,) * 2]
    assert sql(store, "select count(*) from steps") == [(30 * workers,)]
    assert sql(store, "select count(distinct sha256) from blobs") == [(1 + 10 + 10 * workers,)]
    report = verify_store(store)
    assert report.ok and report.in_progress == [], report.problems
    steps = store.read("steps", columns=["episode_id", "screenshot"])
    wanted: dict[str, set[str]] = {}
    for episode_id, digest in zip(steps["episode_id"].to_pylist(), steps["screenshot"].to_pylist()):
        wanted.setdefault(episode_id, set()).add(digest)
    for episode_id, packs in sql(store, "select episode_id, blob_packs from episodes"):
        assert set(store.read_blobs(sorted(wanted[episode_id]), packs)) == wanted[episode_id], episode_id


def test_store_creation_tolerates_a_concurrent_creator(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / LOCK).touch()  # another process is inside Store._init_marker, holding the lock
    Store.open(root, create=True).ensure_writable()
    assert Store.open(root).exists


# -- 7. corrupt file -------------------------------------------------------------------------


def test_corrupt_file_is_reported_and_skipped(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_episode(store, "r1", "ep1", [b"a"], n_steps=2)
    write_episode(store, "r1", "ep2", [b"b"], n_steps=2)
    path = steps_dir(store) / f"ep1{V}"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    report = verify_store(store)
    assert [(p.kind, p.path) for p in report.problems] == [("corrupt", str(path))]
    with pytest.warns(StoreWarning, match=f"skipped {path}: it is not a readable Parquet file"):
        assert Store.open(store.root).read("steps")["episode_id"].to_pylist() == ["ep2", "ep2"]
    with pytest.warns(StoreWarning, match=str(path)):
        assert sql(Store.open(store.root), "select episode_id, count(*) from steps group by 1") == [
            ("ep2", 2)
        ]

    result = CliRunner().invoke(
        cli, ["sql", "select count(*) from steps", "--store", str(store.root), "--format", "csv"]
    )
    assert result.exit_code == 0 and result.stdout.splitlines() == ["count_star()", "2"], result.output
    assert result.stderr.startswith(f"Warning: skipped {path}: ") and result.stderr.count("\n") == 1
    result = CliRunner().invoke(cli, ["store", "verify", "--store", str(store.root), "--format", "json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["problems"][0]["kind"] == "corrupt"
    # tables that do not touch the damaged file answer as before, without a word about it
    assert sql(store, "select count(*) from episodes") == [(2,)]
