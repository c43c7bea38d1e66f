"""Damaged and unusual stores (issue 25): an unreadable file is skipped with a warning naming
it and the rest of its table reads, for every command; ``store verify`` finds missing,
changed, duplicated and unreadable files through the manifests written at commit; a store
whose folder became a file, or that is read-only, gives one-line errors. Real Parquet, real
DuckDB, the real command line (in its own process where a process matters).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.errors import StoreWarning
from mmina.recorder.recording import RunSummary
from mmina.store import Store
from mmina.store.compact import compact_store
from mmina.store.inspect import verify_store
from mmina.store.manifest import read_manifest
from mmina.store.schema import SCHEMA_VERSION
from mmina.store.sql import run_query
from tests.store_helpers import REPO_ROOT, begin, write_episode
from tests.test_sql_sandbox import files_of

V = f".v{SCHEMA_VERSION}.parquet"
GOLDEN = Path(__file__).parent / "golden" / "store-v1"
DAMAGE = {
    "truncated": lambda data: data[: len(data) // 2],
    "random bytes": lambda data: os.urandom(len(data)),
    "empty": lambda data: b"",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Seven committed episodes of three steps and two requests each."""
    store = Store.open(tmp_path / "store", create=True)
    begin(store, "r1")
    for index in range(7):
        write_episode(store, "r1", f"ep{index}", [b"shot %d" % index], n_steps=3, n_requests=2)
    return tmp_path / "store"


def file_of(root: Path, table: str, stem: str) -> Path:
    folder = root / table if table == "blobs" else root / table / "run_id=r1"
    return folder / f"{stem}{V}"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def count(root: Path, table: str) -> int:
    return run_query(Store.open(root), f"select count(*) from {table}").rows[0][0]


# -- unreadable files -------------------------------------------------------------------------


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("table", ["steps", "requests", "blobs", "episodes"])
def test_an_unreadable_file_is_skipped_with_a_warning(root: Path, table: str, damage: str) -> None:
    path = file_of(root, table, "ep3")
    path.write_bytes(DAMAGE[damage](path.read_bytes()))
    info = invoke("store", "info", "--store", str(root), "--format", "json")
    assert info.exit_code == 0, info.output
    assert {t["name"]: t["unreadable"] for t in json.loads(info.stdout)["tables"]}[table] == 1
    assert info.stderr.startswith(f"Warning: skipped {path}: ") and "Traceback" not in info.output
    episodes = 6 if table == "episodes" else 7  # an episode whose row cannot be read is not committed
    expected = {
        "episodes": episodes,
        "steps": 3 * (6 if table in ("steps", "episodes") else 7),
        "requests": 2 * (6 if table in ("requests", "episodes") else 7),
        "blobs": 6 if table == "blobs" else 7,
    }
    result = invoke(
        "sql",
        "select (select count(*) from episodes), (select count(*) from steps), "
        "(select count(*) from requests), (select count(*) from blobs)",
        "--store",
        str(root),
        "--format",
        "json",
    )
    assert result.exit_code == 0 and result.stderr.count("\n") == 1 and str(path) in result.stderr, (
        result.output
    )
    assert list(json.loads(result.stdout)[0].values()) == list(expected.values())
    with pytest.warns(StoreWarning, match=str(path)):
        assert Store.open(root).read(table).num_rows == expected[table]
    problems = verify_store(Store.open(root)).problems
    assert [(p.kind, p.path) for p in problems if p.kind == "corrupt"] == [("corrupt", str(path))]


@pytest.mark.parametrize("damaged", ["episodes", "steps", "requests", "blobs"])
def test_each_view_alone_skips_an_unreadable_file_of_any_table(root: Path, damaged: str) -> None:
    """A query on one view (a view may read another: ``steps`` keeps the committed episodes')
    skips the unreadable file with the warning, whichever table it is in (issue 35, item 3)."""
    path = file_of(root, damaged, "ep3")
    path.write_bytes(DAMAGE["truncated"](path.read_bytes()))
    lost = {
        "episodes": ("episodes", "steps", "requests"),
        "steps": ("steps",),
        "requests": ("requests",),
        "blobs": ("blobs",),
    }[damaged]
    per_episode = {"episodes": 1, "steps": 3, "requests": 2, "blobs": 1}
    for view, rows in per_episode.items():
        result = invoke("sql", f"select count(*) as n from {view}", "--store", str(root), "--format", "json")
        assert result.exit_code == 0, (view, result.output)
        assert json.loads(result.stdout) == [{"n": rows * (6 if view in lost else 7)}], view
        if view in lost:
            assert result.stderr.startswith(f"Warning: skipped {path}: "), (view, result.stderr)


def test_an_unreadable_pack_leaves_the_other_blobs_readable(root: Path) -> None:
    store = Store.open(root)
    digests = store.read("steps", columns=["screenshot"])["screenshot"].to_pylist()
    file_of(root, "blobs", "ep3").write_bytes(b"not parquet")
    with pytest.warns(StoreWarning, match="ep3"):
        found = Store.open(root).read_blobs(sorted(set(digests)))
    assert len(found) == 6
    with pytest.warns(StoreWarning):  # a writer still works: the blob index skips the pack
        write_episode(Store.open(root), "r1", "ep-after", [b"shot 3"], n_steps=1)
    assert count(root, "episodes") == 8  # a query that does not read the packs does not check them
    with pytest.warns(StoreWarning, match="ep3"):
        assert count(root, "blobs") == 7


def test_an_episodes_file_replaced_by_a_steps_file(root: Path) -> None:
    episodes = file_of(root, "episodes", "ep3")
    shutil.copy(file_of(root, "steps", "ep3"), episodes)
    result = invoke(
        "sql",
        "select count(*), count(distinct episode_id) from episodes",
        "--store",
        str(root),
        "--format",
        "csv",
    )
    assert result.exit_code == 0 and result.stdout.splitlines()[1] == "6,6", result.output  # not 12 for 7
    assert (
        result.stderr
        == f"Warning: skipped {episodes}: it holds steps rows, not episodes rows; the rest is read "
        f"(see `mmina store verify`)\n"
    )
    with pytest.warns(StoreWarning, match="holds steps rows"):
        assert sorted(Store.open(root).read("episodes")["episode_id"].to_pylist()) == [
            f"ep{i}" for i in (0, 1, 2, 4, 5, 6)
        ]
    [problem] = [p for p in verify_store(Store.open(root)).problems]
    assert (problem.kind, problem.path) == (
        "corrupt",
        str(episodes),
    ) and "holds steps rows" in problem.message


def test_rescore_and_resume_read_past_a_replaced_episodes_file(recorded_copy: Path) -> None:
    """On a really recorded store: rescore and ``record --resume`` skip the bad file (no KeyError)."""
    [episodes] = list(recorded_copy.glob("episodes/run_id=*/*.parquet"))
    shutil.copy(next(recorded_copy.glob(f"steps/run_id=*/{episodes.name}")), episodes)
    run_id = episodes.parent.name.removeprefix("run_id=")
    rescore = invoke("rescore", "--evaluator", "hops", "--store", str(recorded_copy), "--format", "json")
    assert "Traceback" not in rescore.output and "KeyError" not in rescore.output, rescore.output
    assert rescore.stderr.startswith(f"Warning: skipped {episodes}: it holds steps rows"), rescore.output
    resume = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmina",
            "record",
            "--task",
            "normal/1",
            "--run-id",
            run_id,
            "--resume",
            "--store",
            str(recorded_copy),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert resume.returncode == 0 and "Traceback" not in resume.stderr, resume.stderr
    assert [e["status"] for e in json.loads(resume.stdout)["episodes"]] == ["completed"]  # recorded again
    assert resume.stderr.startswith(f"Warning: skipped {episodes}")


def test_resuming_a_run_whose_runs_file_is_damaged_names_the_file_and_the_way_out(root: Path) -> None:
    """Not "being created by another process" (issue 35, item 4): the file, why, and what to do."""
    [runs] = list(root.glob("runs/run_id=r1/*.parquet"))
    runs.write_bytes(DAMAGE["truncated"](runs.read_bytes()))
    named = invoke("record", "--task", "normal/1", "--run-id", "r1", "--resume", "--store", str(root))
    assert named.exit_code == 1 and "Traceback" not in named.output
    assert f"Error: run r1 cannot be reopened: its runs file {runs} cannot be read (" in named.output, (
        named.output
    )
    assert (
        "another process" not in named.output
        and "--run-id" in named.output
        and "store verify" in named.output
    )
    latest = invoke("record", "--task", "normal/1", "--resume", "--store", str(root))
    assert (
        latest.exit_code == 1 and f"nothing to resume: the runs file {runs} cannot be read (" in latest.output
    )
    assert len(list(root.glob("episodes/run_id=*/*.parquet"))) == 7  # nothing written


def test_a_duplicated_episodes_file_is_counted_once_and_reported(root: Path) -> None:
    copy = file_of(root, "episodes", "ep3-copy")
    shutil.copy(file_of(root, "episodes", "ep3"), copy)
    result = invoke(
        "sql",
        "select count(*), count(distinct episode_id) from episodes",
        "--store",
        str(root),
        "--format",
        "csv",
    )
    assert result.stdout.splitlines()[1] == "7,7", result.output  # not 8 rows for 7 ids
    assert Store.open(root).read("episodes").num_rows == 7 and count(root, "steps") == 21
    verify = invoke("store", "verify", "--store", str(root))
    assert verify.exit_code == 1
    assert (
        f"duplicate: {copy}: episode ep3 also committed in {file_of(root, 'episodes', 'ep3')}"
        in verify.stdout
    )


def test_a_deleted_steps_file_is_missing(root: Path) -> None:
    steps = file_of(root, "steps", "ep2")
    steps.unlink()  # steps 21 -> 18, which readers cannot know
    assert count(root, "steps") == 18
    verify = invoke("store", "verify", "--store", str(root), "--format", "json")
    assert verify.exit_code == 1
    [problem] = json.loads(verify.stdout)["problems"]
    assert (problem["kind"], problem["path"]) == ("missing", str(steps))
    assert str(file_of(root, "episodes", "ep2")) in problem["message"] and "3 rows" in problem["message"]


def test_a_rewritten_file_is_changed_and_a_copied_one_unlisted(root: Path) -> None:
    steps = file_of(root, "steps", "ep2")
    data = pq.read_table(steps)
    pq.write_table(data.slice(0, 1), steps)  # one step instead of three, metadata kept
    write_episode(Store.open(root), "r1", "ep-quiet", [b"q"], n_steps=1, n_requests=0)
    extra = file_of(root, "requests", "ep-quiet")
    shutil.copy(file_of(root, "requests", "ep1"), extra)
    kinds = {(p.kind, p.path) for p in verify_store(Store.open(root)).problems}
    assert kinds == {("changed", str(steps)), ("unlisted", str(extra))}


def test_every_commit_lists_its_files(root: Path) -> None:
    metadata = pq.read_schema(file_of(root, "episodes", "ep4")).metadata
    listed = {entry.path: (entry.rows, entry.bytes) for entry in read_manifest(metadata)}
    files = {f"{t}/run_id=r1/ep4{V}": r for t, r in (("steps", 3), ("requests", 2))} | {f"blobs/ep4{V}": 1}
    assert listed == {path: (rows, (root / path).stat().st_size) for path, rows in files.items()}


def test_compaction_writes_the_manifest_of_what_it_merged(root: Path) -> None:
    compact_store(Store.open(root))
    report = verify_store(Store.open(root))
    assert report.ok and report.unchecked == [], report
    [merged] = list((root / "steps" / "run_id=r1").iterdir())
    merged.unlink()
    assert [(p.kind, p.path) for p in verify_store(Store.open(root)).problems] == [("missing", str(merged))]


def test_a_store_from_before_manifests_says_what_it_cannot_check(tmp_path: Path) -> None:
    root = shutil.copytree(GOLDEN, tmp_path / "golden")
    verify = invoke("store", "verify", "--store", str(root))
    assert verify.exit_code == 0, verify.output
    assert "not checked: 1 episodes file(s) written before manifests" in verify.stdout


# -- a damaged layout, a read-only store -------------------------------------------------------


def test_the_episodes_folder_replaced_by_a_file(root: Path) -> None:
    shutil.rmtree(root / "episodes")
    (root / "episodes").write_text("not a folder")
    before = files_of(root)
    for args in (
        ["sql", "select count(*) from episodes"],
        ["store", "info"],
        ["rescore", "--evaluator", "hops"],
        ["import", "mind2web", str(REPO_ROOT / "tests" / "data" / "mind2web" / "sample.json")],
    ):
        result = invoke(*args, "--store", str(root))
        assert result.exit_code == 1, (args, result.output)
        assert (
            result.stderr
            == f"Error: {root / 'episodes'} is a file where the store keeps a folder: the store is "
            f"damaged (move the file away; see `mmina store verify`)\n"
        ), (args, result.output)
    verify = invoke("store", "verify", "--store", str(root))
    assert verify.exit_code == 1 and f"not_a_folder: {root / 'episodes'}: " in verify.stdout
    assert files_of(root) == before


def without_file_rights() -> None:
    """In the child: no capability to pass over file permissions (even as root), so a store
    whose files are not writable is read-only for it, as for any other user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, capability, 0, 0, 0) and os.geteuid() == 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "cannot drop the capability")


def test_a_read_only_store_reads_and_refuses_writes_in_one_line(
    recorded: tuple[Path, RunSummary], tmp_path: Path
) -> None:
    root = shutil.copytree(recorded[0], tmp_path / "store")
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode & 0o555)
    before = files_of(root)
    reads = [
        ["sql", "select count(*) from steps"],
        ["store", "info"],
        ["store", "verify"],
        ["report", "--format", "json"],
    ]
    writes = [
        ["rescore", "--evaluator", "hops"],
        ["store", "compact"],
        ["store", "verify", "--repair"],
        ["import", "mind2web", str(REPO_ROOT / "tests" / "data" / "mind2web" / "sample.json")],
        ["record", "--task", "normal/1", "--run-id", "more"],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", COMMANDS_IN_ONE_PROCESS, str(root), json.dumps(reads + writes)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
        preexec_fn=without_file_rights,
    )
    assert proc.returncode == 0, proc.stderr
    results = dict(zip(map(tuple, reads + writes), json.loads(proc.stdout)))
    for args in reads:
        assert results[tuple(args)] == [0, ""], args
    for args in writes:
        code, stderr = results[tuple(args)]
        assert code == 1 and stderr.count("\n") == 1, (args, stderr)
        assert stderr.startswith(
            f"Error: cannot write to the store {root}: Permission denied"
        ) and stderr.endswith(": the store can be read but not written\n"), (args, stderr)
    assert files_of(root) == before


COMMANDS_IN_ONE_PROCESS = """
import json, sys
from click.testing import CliRunner
from mmina.cli import cli
store, commands = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps([[r.exit_code, r.stderr] \
for r in (CliRunner().invoke(cli, [*c, "--store", store]) for c in commands)]))
"""
"""The commands one after another in one process (the process lacks the rights; one start-up, not nine)."""
