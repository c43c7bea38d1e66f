"""People's labels as ``human`` score batches, and ``mmina import labels``: what is stored, and
every bad file refused with one line naming the culprit, writing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.evaluators.labelling import Label, LabelError, default_labeller, write_labels
from mmina.store import Store
from tests.judge_helpers import synthetic_store

EPISODES = [("r1", "e1", "t1", 1), ("r1", "e2", "t2", 3), ("r2", "g1", "t1", 1)]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    synthetic_store(tmp_path / "store", EPISODES)
    return tmp_path / "store"


def import_file(store: Path, name: str, text: str, *args: str) -> tuple[int, str]:
    path = store.parent / name
    path.write_text(text)
    result = CliRunner().invoke(cli, ["import", "labels", str(path), "--store", str(store), *args])
    return result.exit_code, result.output


def human_rows(store: Path) -> list[dict]:
    rows = Store.open(store).read("scores").to_pylist()
    return sorted(
        (r for r in rows if r["evaluator"] == "human"),
        key=lambda r: (r["scored_at"], r["episode_id"], r["hop"] if r["hop"] is not None else -1),
    )


def test_labels_are_stored_as_human_verdicts(store: Path) -> None:
    code, output = import_file(
        store,
        "labels.csv",
        "episode_id,hop,label,note\ne2,2,unsure,too dark\ne2,,fail,\ng1,task,pass,\n",
        "--labeller",
        "alice",
    )
    assert code == 0 and output.startswith("alice: 3 label(s) of 2 episode(s) in run(s) r1, r2 — batch "), (
        output
    )
    rows = human_rows(store)
    assert [
        (r["run_id"], r["episode_id"], r["task_id"], r["level"], r["hop"], r["verdict"], r["value"])
        for r in rows
    ] == [
        ("r1", "e2", "t2", "task", None, "fail", 0.0),
        ("r1", "e2", "t2", "hop", 2, "unclear", 0.0),
        ("r2", "g1", "t1", "task", None, "pass", 1.0),
    ]
    assert {r["args_json"] for r in rows} == {'{"labeller": "alice"}'} and len(
        {r["batch_id"] for r in rows}
    ) == 1
    assert json.loads(rows[1]["detail_json"]) == {
        "label": "unsure",
        "note": "too dark",
        "source": "import:labels.csv",
    }
    assert len(Store.open(store).files("scores")) == 2, "one file per run"


def test_two_labellers_sit_side_by_side_and_a_file_names_its_labellers(store: Path) -> None:
    labels = [{"episode_id": "e1", "label": "pass", "labeller": "bob"}, {"episode_id": "e1", "label": "fail"}]
    code, output = import_file(store, "team.json", json.dumps({"labels": labels}), "--labeller", "carol")
    assert code == 0 and "bob: 1 label(s)" in output and "carol: 1 label(s)" in output
    rows = human_rows(store)
    assert sorted((json.loads(r["args_json"])["labeller"], r["verdict"]) for r in rows) == [
        ("bob", "pass"),
        ("carol", "fail"),
    ]
    assert len({r["batch_id"] for r in rows}) == 2


def test_the_os_user_labels_by_default(store: Path) -> None:
    code, output = import_file(store, "mine.csv", "episode_id,label\ne1,pass\n")
    assert code == 0 and output.startswith(f"{default_labeller()}: 1 label(s)")


@pytest.mark.parametrize(
    "name, text, message",
    [
        (
            "a.csv",
            "episode_id,hop,label\ne1,,pass\ne2,1,maybe\n",
            "a.csv line 3: a label is pass, fail, unsure or blocked, not 'maybe'",
        ),
        ("a.csv", "episode_id,hop,label\nnope,,pass\n", "a.csv line 2: no episode 'nope' in the store"),
        (
            "a.csv",
            "episode_id,hop,label\ne2,4,pass\n",
            "a.csv line 2: episode e2 (t2) has hops 1 to 3, not hop 4",
        ),
        (
            "a.csv",
            "episode_id,hop,label\ne2,0,pass\n",
            "a.csv line 2: hop must be a hop position (1, 2, ...) or empty",
        ),
        ("a.csv", "episode_id,hop,label\ne2,²,pass\n", "a.csv line 2: hop must be a hop position"),
        (
            "a.csv",
            "episode_id,hop,label\ne2,2,pass\ne2,2,fail\n",
            "a.csv: labeller alice: hop 2 of episode e2 is labelled twice",
        ),
        (
            "a.csv",
            "episode,label\ne2,pass\n",
            "a.csv: the header needs the columns episode_id, label (missing episode_id",
        ),
        (
            "a.csv",
            "episode_id,label,labeller\ne1,pass,\x07bell\n",
            "a.csv line 2: a labeller's name is 1 to 80 printable",
        ),
        ("a.csv", "", "a.csv: the header needs the columns"),
        ("a.csv", "episode_id,label\n", "a.csv: no labels in the file"),
        (
            "b.json",
            '[{"episode_id": "e1", "label": "pass"}, 3]',
            "b.json item 2: a label is a JSON object, not int",
        ),
        ("b.json", '{"episode_id": "e1"}', "b.json: expected a JSON list of labels"),
        ("b.json", '[{"episode_id": "e1", "label": true}]', "b.json item 1: label must be text, not true"),
        (
            "b.json",
            '[{"episode_id": "e1", "label": "pass", "hop": 1.5}]',
            "b.json item 1: hop must be a hop position",
        ),
        ("b.json", '[{"episode_id": "e1", "label": "pass"', "b.json: not valid JSON"),
        (
            "b.json",
            json.dumps([{"episode_id": "e1", "label": "pass", "note": "x" * 2001}]),
            "b.json item 1: a note is at most 2000",
        ),
    ],
)
def test_a_bad_file_is_one_line_and_writes_nothing(store: Path, name: str, text: str, message: str) -> None:
    before = Store.open(store).files("scores")
    code, output = import_file(store, name, text, "--labeller", "alice")
    assert code == 1 and message in output and output.count("\n") == 1 and "Traceback" not in output, output
    assert Store.open(store).files("scores") == before


def test_missing_and_undecodable_files(store: Path) -> None:
    result = CliRunner().invoke(
        cli, ["import", "labels", str(store.parent / "none.csv"), "--store", str(store)]
    )
    assert result.exit_code == 1 and "none.csv: no such file" in result.output
    (store.parent / "latin.csv").write_bytes("episode_id,label,note\ne1,pass,caf\xe9\n".encode("latin-1"))
    result = CliRunner().invoke(
        cli, ["import", "labels", str(store.parent / "latin.csv"), "--store", str(store)]
    )
    assert result.exit_code == 1 and "latin.csv: not UTF-8 text" in result.output


def test_write_labels_refuses_before_writing(store: Path) -> None:
    opened = Store.open(store)
    with pytest.raises(LabelError, match="no labels to save"):
        write_labels(opened, [], "alice", "serve")
    with pytest.raises(LabelError, match="a labeller's name is 1 to 80"):
        write_labels(opened, [Label("e1", "pass")], "   ", "serve")
    assert opened.files("scores") == []


def test_human_verdicts_are_not_computed(store: Path) -> None:
    result = CliRunner().invoke(cli, ["rescore", "--store", str(store), "--evaluator", "human"])
    assert result.exit_code == 1 and "human verdicts are people's labels, not computed" in result.output
