"""`mmina sql --schema` (views' columns, a filter, json and csv), a query from a file or
standard input, and one line of error for a path that cannot be used (sql -f, tasks list and
validate, report and view -o)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mmina.cli import cli
from mmina.recorder.recording import RunSummary
from mmina.store.convenience import CONVENIENCE_VIEWS
from mmina.store.describe import describe
from mmina.store.schema import SCORES, TABLES

QUERY = "select task_id, n_hops from episodes"


def invoke(*args: str, stdin: bytes | str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin)


def one_line_error(result: Result, *parts: str) -> None:
    """Exit 1 with one ``Error:`` line (no usage, no traceback) holding every part."""
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (
        result.output,
        result.exception,
    )
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert all(part in lines[0] for part in parts), lines[0]


def test_schema_in_json_lists_a_views_columns_with_types_and_meanings() -> None:
    result = invoke("sql", "--schema", "episode_scores", "--format", "json")
    assert result.exit_code == 0, result.output
    [view] = json.loads(result.output)
    assert (view["name"], view["kind"]) == ("episode_scores", "view") and "mmina report" in view["doc"]
    columns = {c["name"]: c for c in view["columns"]}
    assert (columns["passed"]["type"], columns["passed"]["from"]) == ("BOOLEAN", None)
    assert columns["hops_passed"]["type"] == "BIGINT" and "pass" in columns["hops_passed"]["meaning"]
    assert columns["evaluator"]["from"] == "scores"
    assert columns["evaluator"]["meaning"] == SCORES.column_docs["evaluator"]
    assert all(c["meaning"] and c["type"] for c in view["columns"])


def test_schema_names_filter_in_the_order_given_in_any_case() -> None:
    result = invoke("sql", "--schema", "Steps", "episode_hops")
    assert result.exit_code == 0, result.output
    titles = [line for line in result.output.splitlines() if line.startswith(("steps (", "episode_hops ("))]
    assert [t.split(" ")[0] for t in titles] == ["steps", "episode_hops"]
    assert titles[0].startswith("steps (table): One row per step")
    for column in ("tree_text", "live_reached_step", "keyword"):
        assert column in result.output
    assert "episodes (table)" not in result.output and "final_tree_text" not in result.output


def test_schema_unknown_name_is_one_line_naming_what_there_is() -> None:
    one_line_error(
        invoke("sql", "--schema", "steps", "stepz"),
        "no table or view named 'stepz'",
        "episode_scores",
        "judge_cache",
    )


def test_schema_in_csv_is_one_row_per_column_of_every_table_and_view() -> None:
    result = invoke("sql", "--schema", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert result.exit_code == 0 and len(rows) == sum(len(r.columns) for r in describe())
    assert {r["name"] for r in rows} == {*TABLES, *CONVENIENCE_VIEWS}
    hop = next(r for r in rows if (r["name"], r["column"]) == ("episode_hops", "hop"))
    assert (hop["kind"], hop["type"], hop["from"]) == ("view", "BIGINT", "") and "1-based" in hop["meaning"]


def test_every_view_column_has_a_meaning_and_every_meaning_a_column() -> None:
    """A column added to a view's SQL without a meaning, or a meaning left for a column the SQL
    no longer has, fails here (the docs and --schema would show an empty or a stale line)."""
    for relation in describe(list(CONVENIENCE_VIEWS)):
        shown = {c.name for c in relation.columns}
        assert [c.name for c in relation.columns if not c.meaning] == [], relation.name
        assert set(CONVENIENCE_VIEWS[relation.name].columns) <= shown, relation.name


def test_query_from_a_file_or_standard_input_is_the_same_query(
    recorded: tuple[Path, RunSummary], tmp_path: Path
) -> None:
    store = str(recorded[0])
    expected = invoke("sql", QUERY, "--store", store, "--format", "csv")
    assert expected.exit_code == 0 and expected.output.splitlines() == ["task_id,n_hops", "normal/1,2"]
    query_file = tmp_path / "q.sql"
    query_file.write_bytes(b"\xef\xbb\xbf-- Table 2's input\n" + QUERY.encode() + b";\n")  # a BOM, a comment
    for args, stdin in [(["-f", str(query_file)], None), (["--file", "-"], QUERY), (["-"], QUERY.encode())]:
        result = invoke("sql", *args, "--store", store, "--format", "csv", stdin=stdin)
        assert (result.exit_code, result.output) == (0, expected.output), args


def test_query_piped_to_a_real_process(recorded: tuple[Path, RunSummary]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mmina", "sql", "-", "--store", str(recorded[0]), "--format", "json"],
        input=f"{QUERY}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [{"task_id": "normal/1", "n_hops": 2}]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.sql", "no such file or directory"),
        (lambda d: d, "is a directory"),
        (
            lambda d: (d / "latin1.sql", (d / "latin1.sql").write_bytes(b"select 'caf\xe9'"))[0],
            "not valid UTF-8: byte 0xe9",
        ),
        (lambda d: (d / "empty.sql", (d / "empty.sql").write_bytes(b""))[0], "empty query"),
    ],
)
def test_a_bad_query_file_is_one_line(
    recorded: tuple[Path, RunSummary], tmp_path: Path, make, message: str
) -> None:
    one_line_error(invoke("sql", "-f", str(make(tmp_path)), "--store", str(recorded[0])), message)


@pytest.mark.parametrize(
    "args, message",
    [
        (["select 1", "-f", "q.sql"], "not both"),
        (["select", "1"], "one argument"),
        (["--schema", "-f", "q.sql"], "not a query file"),
        ([], "standard input"),
    ],
)
def test_query_sources_that_do_not_fit_are_usage_errors(args: list[str], message: str) -> None:
    result = invoke("sql", *args, "--store", "/nonexistent-store")
    assert result.exit_code == 2 and message in result.output, result.output


def test_tasks_list_of_a_path_that_is_not_there_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: the repository's relative path, given outside the repository."""
    monkeypatch.chdir(tmp_path)
    one_line_error(
        invoke("tasks", "list", "--tasks", "fixtures/tasks/multi567"),
        "fixtures/tasks/multi567 does not exist",
        f"(relative to {tmp_path})",
        "give just multi567",
    )
    assert invoke("tasks", "list", "--tasks", "multi567", "--format", "json").exit_code == 0
    (tmp_path / "empty").mkdir()
    for command in ("list", "validate"):
        one_line_error(invoke("tasks", command, "--tasks", "empty"), "empty holds no task files (*.json)")
        one_line_error(
            invoke("tasks", command, "--tasks", str(tmp_path / "gone")), f"{tmp_path / 'gone'} does not exist"
        )


def test_an_output_path_that_cannot_be_written_is_one_line_before_any_work(
    recorded: tuple[Path, RunSummary], tmp_path: Path
) -> None:
    """``-o`` naming a folder where a file goes, a file where a folder goes, or a file in a
    folder that is not there: one line (it was an "unexpected IsADirectoryError"), nothing written."""
    store = str(recorded[0])
    (tmp_path / "a-file").write_text("mine")
    episode = invoke(
        "sql", "select episode_id from episodes", "--store", store, "--format", "csv"
    ).output.split()[1]
    cases = [
        (["view", "--episode", episode, "-o", str(tmp_path)], f"cannot write {tmp_path}: it is a folder"),
        (["report", "--format", "json", "-o", str(tmp_path)], "it is a folder"),
        (
            ["report", "--format", "html", "-o", str(tmp_path / "no" / "r.html")],
            f"no folder {tmp_path / 'no'}",
        ),
        (["report", "--format", "csv", "-o", str(tmp_path / "a-file")], "it is a file, not a folder"),
    ]
    for args, message in cases:
        one_line_error(invoke(*args, "--store", store), message)
    assert (
        sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
        and (tmp_path / "a-file").read_text() == "mine"
    )
