"""`mmina sql` and the CLI: views over a really recorded store, read-only, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.recorder.recording import RunSummary
from mmina.store import Store
from mmina.store import docs as store_docs
from mmina.store.describe import describe
from mmina.store.schema import TABLES
from mmina.store.sql import run_query
from tests.docs_pages import all_pages

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


def test_sql_counts_steps(recorded: tuple[Path, RunSummary]) -> None:
    result = invoke("sql", "select count(*) as n from steps", "--store", str(recorded[0]), "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["n"] == recorded[1].episodes[0].n_steps > 0


def test_sql_formats(recorded: tuple[Path, RunSummary]) -> None:
    store = str(recorded[0])
    csv_out = invoke(
        "sql", "select task_id, n_hops from episodes", "--store", store, "--format", "csv"
    ).output
    assert csv_out.splitlines() == ["task_id,n_hops", "normal/1,2"]
    table = invoke("sql", "select task_id from episodes", "--store", store).output
    assert "normal/1" in table


def test_store_location_from_environment(recorded: tuple[Path, RunSummary], tmp_path: Path) -> None:
    result = invoke(
        "sql", "select count(*) from runs", "--format", "csv", env={"MMINA_STORE": str(recorded[0])}
    )
    assert result.output.splitlines()[1] == "1"


@pytest.mark.parametrize(
    "query",
    [
        "drop view steps",
        "copy (select 1) to 'x.csv'",
        "copy steps to 'steps.parquet'",
        "insert into steps select * from steps",
        "create table t as select 1",
        "attach 'x.db'",
        "set threads = 1",
        "select 1; drop view steps",
        "install httpfs",
        "export database 'out'",
    ],
)
def test_sql_refuses_anything_but_reads(recorded_copy: Path, query: str) -> None:
    before = sorted(p.relative_to(recorded_copy) for p in recorded_copy.rglob("*"))
    result = invoke("sql", query, "--store", str(recorded_copy))
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and len(result.output.strip().splitlines()) == 1
    assert sorted(p.relative_to(recorded_copy) for p in recorded_copy.rglob("*")) == before
    assert run_query(Store.open(recorded_copy), "select count(*) from steps").rows[0][0] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["sql", "select 1", "--store", "{missing}"], "no store at"),
        (["sql", "selec 1", "--store", "{store}"], "invalid SQL"),
        (["sql", "select * from nosuchtable", "--store", "{store}"], "nosuchtable"),
        (["sql", "select 1", "--store", "{notstore}"], "not an mmina store"),
        (["store", "info", "--store", "{notstore}"], "not an mmina store"),
        (["store", "verify", "--store", "{missing}"], "no store at"),
        (["record", "--task", "normal/999", "--store", "{fresh}"], "no task 'normal/999'"),
        (["record", "--agent", "nosuch", "--store", "{fresh}"], "no agent 'nosuch'"),
        (["record", "--tasks", "{missing}", "--store", "{fresh}"], "does not exist"),
        (["record", "--browser", "/nonexistent/chromium", "--store", "{fresh}"], "does not exist"),
        (["record", "--run-id", "bad/id", "--store", "{fresh}"], "invalid run id"),
    ],
)
def test_user_errors_are_one_line(
    recorded: tuple[Path, RunSummary], tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "notstore").mkdir()
    (tmp_path / "notstore" / "data.txt").write_text("mine")
    paths = {
        "missing": tmp_path / "missing",
        "store": recorded[0],
        "notstore": tmp_path / "notstore",
        "fresh": tmp_path / "fresh",
    }
    result = invoke(*(a.format(**paths) for a in args))
    assert result.exit_code != 0
    assert result.output.startswith("Error: ") and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert isinstance(result.exception, SystemExit)
    assert not (tmp_path / "fresh").exists(), "a failed record must not create a store"
    assert (tmp_path / "notstore" / "data.txt").read_text() == "mine"


def test_missing_browser_from_environment(tmp_path: Path) -> None:
    result = invoke("record", "--store", str(tmp_path / "s"), env={"MMINA_CHROMIUM": "/nope/chromium"})
    assert (
        result.exit_code == 1 and "Error: browser executable /nope/chromium does not exist" in result.output
    )
    assert not (tmp_path / "s").exists()


def test_real_subprocess_error_has_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mmina", "sql", "select 1", "--store", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip()
        == f"Error: no store at {tmp_path / 'none'} (record one with `mmina record`, or pass --store)"
    )


def test_store_info_and_verify(recorded: tuple[Path, RunSummary]) -> None:
    info = json.loads(invoke("store", "info", "--store", str(recorded[0]), "--format", "json").output)
    assert (info["runs"], info["episodes"], info["steps"]) == (1, 1, recorded[1].episodes[0].n_steps)
    assert {t["name"] for t in info["tables"]} == set(TABLES) and info["total_bytes"] > 0
    verify = invoke("store", "verify", "--store", str(recorded[0]))
    assert verify.exit_code == 0 and "OK" in verify.output


def test_every_command_has_help_with_an_example() -> None:
    commands = [
        [],
        ["record"],
        ["sql"],
        ["store"],
        ["store", "info"],
        ["store", "verify"],
        ["tasks"],
        ["tasks", "validate"],
        ["tasks", "list"],
        ["fixtures"],
        ["fixtures", "serve"],
        ["rescore"],
        ["replay"],
    ]
    pages = all_pages()
    for command in commands:
        result = invoke(*command, "--help")
        assert result.exit_code == 0 and "Example" in result.output, command
        if command:
            assert f"mmina {' '.join(command)}" in pages, (
                f"no page of docs/ documents mmina {' '.join(command)}"
            )


def test_schema_document_matches_code() -> None:
    text = (ROOT / "docs" / "store.md").read_text()
    generated = text.split(store_docs.BEGIN, 1)[1].split(store_docs.END, 1)[0]
    assert generated.strip() == store_docs.render().strip(), "run: python -m mmina.store.docs docs/store.md"


def test_written_files_match_the_schema(recorded: tuple[Path, RunSummary]) -> None:
    store = Store.open(recorded[0])
    for table in TABLES.values():
        for path in store.files(table.name):
            schema = pq.read_schema(path)
            assert schema.remove_metadata() == table.schema, path
            assert schema.metadata[b"mmina.table"] == table.name.encode()


def test_views_show_documented_columns(recorded: tuple[Path, RunSummary]) -> None:
    """What ``--schema`` and docs/store.md say of every table and view (from views over empty
    tables) is what ``describe`` shows over a real store, column for column, types included."""
    store = Store.open(recorded[0])
    for relation in describe():
        described = run_query(store, f"describe {relation.name}").rows
        assert [(r[0], r[1]) for r in described] == [(c.name, c.type) for c in relation.columns], (
            relation.name
        )


def test_record_from_a_real_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "MMINA_STORE": str(tmp_path / "store")}
    proc = subprocess.run(
        [sys.executable, "-m", "mmina", "record", "--format", "json", "--task", "normal/1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["finished"] >= 1 and all(e["status"] == "completed" for e in summary["episodes"])
    count = subprocess.run(
        [sys.executable, "-m", "mmina", "sql", "select count(*) from steps", "--format", "csv"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert int(count.stdout.splitlines()[1]) > 0


def test_two_recording_processes_into_one_store(tmp_path: Path) -> None:
    env = {**os.environ, "MMINA_STORE": str(tmp_path / "store")}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mmina",
                "record",
                "--format",
                "json",
                "--run-id",
                f"w{i}",
                "--task",
                "normal/1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outputs]
    store = Store.open(tmp_path / "store")
    rows = run_query(
        store, "select run_id, count(*), sum(n_steps) from episodes group by run_id order by run_id"
    ).rows
    assert [r[0] for r in rows] == ["w0", "w1"] and rows[0][1:] == rows[1][1:]
    shared = run_query(store, "select count(*) - count(distinct sha256) from blobs").rows[0][0]
    assert shared <= run_query(store, "select count(*) from blobs").rows[0][0] // 2
    verify = invoke("store", "verify", "--store", str(tmp_path / "store"))
    assert verify.exit_code == 0, verify.output
