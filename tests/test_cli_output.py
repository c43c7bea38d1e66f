"""Output never changes the data: every table cell is the stored text (no Rich markup, no emoji
codes, control characters shown as escapes, never sent raw to the terminal), nothing wraps when
stdout is not a terminal, csv and json keep the values as stored, an empty table is one line."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.cli.render import plain_text, print_table, render_rows, visible, visible_cell
from mmina.store import Store
from tests.store_helpers import episode_row, judged_task_row, run_row, step_row

TRICKY = [
    "[active]",
    "[down]",
    "[/x]",
    "goto [http://shop.mmina.test/]",
    "type [1] [abc] [press_enter_after=1]",
    "[bold red]loud[/bold red]",
    ":smile:",
    "a\x1b[31mred\x1b[0m b",
    "x\x07\x08y",
    "back\rward",
    "tab\there",
    "rtl\u202eevil",
    "end\x9bc1",
]
"""Cell texts that a Rich table would change or a terminal would act on."""
SHOWN = [
    "[active]",
    "[down]",
    "[/x]",
    "goto [http://shop.mmina.test/]",
    "type [1] [abc] [press_enter_after=1]",
    "[bold red]loud[/bold red]",
    ":smile:",
    "a\\x1b[31mred\\x1b[0m b",
    "x\\x07\\x08y",
    "back\\rward",
    "tab\\there",
    "rtl\\u202eevil",
    "end\\x9bc1",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run whose steps' actions and answers are the tricky texts."""
    root = tmp_path_factory.mktemp("output") / "store"
    opened = Store.open(root, create=True)
    opened.begin_run("run-a", run_row(), [judged_task_row(answers={"must_include": ["zzz"]})])
    writer = opened.episode_writer("run-a", "ep-1")
    for index, text in enumerate(TRICKY):
        writer.add_step(step_row(index, action=text, model_output=text))
    writer.commit(episode_row(n_steps=len(TRICKY), final_answer="[/x] \x1b[2J"))
    return root


def sql(store: Path, query: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["sql", query, "--store", str(store), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def cells(table: str) -> list[str]:
    """The cells of a one-column terminal table, one per line (the rules and borders dropped)."""
    return [line.strip("│┃ ") for line in table.splitlines()[3:-1]]


def test_visible_escapes_only_control_characters() -> None:
    assert [visible_cell(t) for t in TRICKY] == SHOWN
    assert (
        visible("line 1\n\tline 2 — ünïcødé 🙂 [x]") == "line 1\n\tline 2 — ünïcødé 🙂 [x]"
    )  # lines stay lines


def test_stored_actions_are_shown_as_stored(store: Path) -> None:
    table = sql(store, "select action from steps order by step_index")
    assert cells(table) == SHOWN
    assert "\x1b" not in table and "\r" not in table and "\x07" not in table


def test_markup_in_a_query_is_text_not_an_error(store: Path) -> None:
    out = sql(store, "select '[/x]' as a, '[active]' as b, ':smile:' as \"[c]\"")
    assert "[/x]" in out and "[active]" in out and "[c]" in out and ":smile:" in out


def test_csv_and_json_keep_the_raw_values(store: Path) -> None:
    rows = list(
        csv.reader(io.StringIO(sql(store, "select action from steps order by step_index", "--format", "csv")))
    )
    assert [r[0] for r in rows[1:]] == TRICKY
    data = json.loads(sql(store, "select action from steps order by step_index", "--format", "json"))
    assert [r["action"] for r in data] == TRICKY


def test_nothing_wraps_when_stdout_is_not_a_terminal(store: Path) -> None:
    long = "x" * 150 + " " + "y" * 150
    out = sql(store, f"select '{long}' as a, '{long}' as b")
    assert sum(long in line for line in out.splitlines()) == 1
    assert all(line == line.rstrip() for line in out.splitlines())


def test_an_empty_table_is_one_line(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sql(store, "select action from steps where false").splitlines() == ["no rows (columns: action)"]
    print_table(["a"], [], title="flips")
    assert capsys.readouterr().out == "flips: no rows\n"


def test_every_renderer_shares_the_literal_table(capsys: pytest.CaptureFixture[str]) -> None:
    """record's summary, replay, rescore, eval-steps, tasks list, store info: all print through
    render_rows (a title and header may be tricky too)."""
    render_rows(["answer [x]"], [[t] for t in TRICKY], title="run [/x]")
    out = capsys.readouterr().out
    assert out.startswith("run [/x]") and "answer [x]" in out and cells(out)[1:] == SHOWN


def test_report_tables_show_rates_and_text_literally(store: Path) -> None:
    result = CliRunner().invoke(cli, ["rescore", "--evaluator", "must_include", "--store", str(store)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "must_include v1 — batch " + lines[0].rsplit(" ", 1)[1]
    assert any("0.0% [0%–79%]" in line for line in lines), result.stdout  # one failed task: a rate and its CI


def test_help_text_has_no_raw_markup() -> None:
    listed = CliRunner().invoke(cli, ["rescore", "--list"]).stdout
    assert "``" not in listed and ":class:" not in listed and "exact_match" in listed
    assert (
        plain_text("``x`` and `y` and :class:`mmina.tasks.task.Task` and **z**") == "x and y and Task and z"
    )
