"""`mmina import mind2web`: small files in the Multimodal-Mind2Web schema (Parquet and JSON),
imported through the store's writer and evaluated end to end by `mmina eval-steps`."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from mmina.cli import cli
from mmina.importers.mind2web import reduce_html
from mmina.store import Store
from mmina.store.sql import run_query
from tests.test_eval_steps import KEY, ScriptedOpenAI, expected_key

DATA = Path(__file__).parent / "data" / "mind2web"
TASK = "Find a business class flight from Ostrand to Brask"
REPRS = [
    "[link]  Flights -> CLICK",
    "[textbox]  From -> TYPE: Ostrand",
    "[combobox]  Cabin -> SELECT: Business",
]
PAGE = """<html backend_node_id="1"><body backend_node_id="2"><div backend_node_id="3">\
<text backend_node_id="4">Welcome</text>
<a backend_node_id="101" href="/flights"><text backend_node_id="102">Flights</text></a>
<input backend_node_id="205" type="text" placeholder="From"/>
<select backend_node_id="310" aria_label="Cabin"><option backend_node_id="311">Economy</option>
<option backend_node_id="312">Business</option></select>
<div backend_node_id="400" class="card">Deals of the "day"</div>
<button backend_node_id="7">Search</button></div></body></html>"""


def jpeg(color: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(buffer, "JPEG")
    return buffer.getvalue()


def sample(
    uid: str,
    index: int,
    op: str,
    value: str,
    target: str | None,
    annotation: str = "t-1",
    website: str = "united",
    task: str = TASK,
    reprs: list[str] = REPRS,
) -> dict[str, Any]:
    candidates = (
        [
            json.dumps(
                {
                    "tag": "a",
                    "attributes": json.dumps({"backend_node_id": target, "class": "x"}),
                    "is_original_target": True,
                }
            )
        ]
        if target
        else []
    )
    return {
        "action_uid": uid,
        "raw_html": PAGE,
        "cleaned_html": PAGE,
        "operation": json.dumps({"op": op, "original_op": op, "value": value}),
        "pos_candidates": candidates,
        "neg_candidates": [],
        "website": website,
        "domain": "Travel",
        "subdomain": "Airlines",
        "annotation_id": annotation,
        "confirmed_task": task,
        "screenshot": {"bytes": jpeg("white"), "path": None},
        "action_reprs": reprs,
        "target_action_index": str(index),
        "target_action_reprs": reprs[index] if index < len(reprs) else "",
    }


def write_files(folder: Path) -> Path:
    """A Parquet shard with three steps of one task and a target-less row; a JSON file with one
    step of another task, without a screenshot."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        sample("a1", 0, "CLICK", "", "101"),
        sample("a2", 1, "TYPE", "Ostrand", "205"),
        sample("a3", 2, "SELECT", "Business", "310"),
        sample("a5", 0, "CLICK", "", None),
    ]
    pq.write_table(pa.Table.from_pylist(rows), folder / "test_task-00000-of-00001.parquet")
    other = {
        **sample(
            "a4",
            0,
            "CLICK",
            "",
            "7",
            annotation="t-2",
            website="amazon",
            task="Search the shop",
            reprs=["[button]  Search -> CLICK"],
        ),
        "screenshot": None,
    }
    (folder / "extra.json").write_text(json.dumps([other]))
    return folder


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env=KEY)


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    result = invoke(
        "import",
        "mind2web",
        str(write_files(tmp_path / "m2w")),
        "--store",
        str(store),
        "--run-id",
        "m2w",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["imported"], out["tasks"], out["without_screenshot"]) == (4, 2, 1)
    assert out["skipped"] == [
        {"action_uid": "a5", "reason": "no positive candidate (the target is not in the HTML)"}
    ]
    return store


def test_the_html_is_reduced_to_interactive_elements() -> None:
    tree = reduce_html(PAGE, {"400"})
    assert tree.splitlines() == [
        '[101] link "Flights"',
        '[205] textbox "From"',
        '[310] combobox "Cabin"',
        '\t[311] option "Economy"',
        '\t[312] option "Business"',
        '[400] div "Deals of the \\"day\\""',
        '[7] button "Search"',
    ]
    assert "Welcome" not in reduce_html(PAGE, set())


def test_samples_become_single_step_episodes(imported: Path) -> None:
    store = Store.open(imported)
    steps = {r["episode_id"]: r for r in store.read("steps", run_id="m2w").to_pylist()}
    assert sorted(steps) == ["m2w-a1", "m2w-a2", "m2w-a3", "m2w-a4"]
    assert [steps[e]["step_index"] for e in ("m2w-a1", "m2w-a2", "m2w-a3")] == [0, 1, 2]
    assert steps["m2w-a2"]["action"] == "type [205] [Ostrand] [press_enter_after=0]"
    assert (
        steps["m2w-a3"]["model_output"] == REPRS[2]
        and '[310] combobox "Cabin"' in steps["m2w-a3"]["tree_text"]
    )
    assert store.read_blobs([steps["m2w-a1"]["screenshot"]])[steps["m2w-a1"]["screenshot"]] == jpeg("white")
    assert steps["m2w-a4"]["screenshot"] is None and steps["m2w-a1"]["screenshot_width"] == 64
    tasks = {
        r["task_id"]: json.loads(r["original_json"]) for r in store.read("tasks", run_id="m2w").to_pylist()
    }
    assert tasks["mind2web/t-1"]["recorded_actions"] == REPRS and tasks["mind2web/t-1"]["intent"] == TASK
    again = invoke(
        "import",
        "mind2web",
        str(imported.parent / "m2w"),
        "--store",
        str(imported),
        "--run-id",
        "m2w",
        "--format",
        "json",
    )
    assert json.loads(again.output)["already"] == 4 and store.read("episodes").num_rows == 4


def test_imported_steps_evaluate_end_to_end(imported: Path) -> None:
    answers = {
        expected_key(TASK, "", []): "click [101]",
        expected_key(TASK, "", REPRS[:1]): "type [205] [Brask] [press_enter_after=0]",
        expected_key(TASK, "", REPRS[:2]): "type [310] [business] [press_enter_after=0]",
        expected_key("Search the shop", "", []): "click [7]",
    }
    with ScriptedOpenAI(answers=answers) as server:
        result = CliRunner().invoke(
            cli,
            [
                "eval-steps",
                "--run",
                "m2w",
                "--store",
                str(imported),
                "--model",
                "m",
                "--base-url",
                server.url,
                "--input-mode",
                "multimodal",
                "--format",
                "json",
            ],
            env=KEY,
        )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["skipped"] == [
        {"episode_id": "m2w-a4", "step_index": 0, "reason": "no screenshot recorded (the agent needs one)"}
    ]
    asked = [r for r in server.chat_requests if r["max_tokens"] > 1]  # not the endpoint check
    assert asked and all(any(p["type"] == "image_url" for p in r["messages"][-1]["content"]) for r in asked)
    ops = {g["key"]: g for g in out["groups"]["operation"]}
    assert set(ops) == {"click", "type", "select"} and ops["select"]["accuracy"] == 1.0
    assert ops["type"]["accuracy"] == 0.0 and ops["type"]["target_accuracy"] == 1.0
    assert {g["key"] for g in out["groups"]["website"]} == {"united"}
    assert [g["key"] for g in out["groups"]["history"]] == ["0", "1", "2"]
    rows = run_query(Store.open(imported), "select episode_id, verdict from scores order by episode_id")
    assert rows.rows == [("m2w-a1", "pass"), ("m2w-a2", "fail"), ("m2w-a3", "pass")]


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda rows: [{k: v for k, v in r.items() if k != "operation"} for r in rows],
            "no column(s) operation",
        ),
        (lambda rows: [{**rows[0], "operation": "{not json"}], "row 1 (a1): operation is not JSON"),
        (
            lambda rows: [{**rows[0], "operation": json.dumps({"op": "DRAG"})}],
            "op must be one of CLICK, TYPE, SELECT",
        ),
        (lambda rows: [{**rows[0], "screenshot": {"bytes": b"not an image", "path": None}}], "not an image"),
    ],
)
def test_bad_files_are_one_line_errors_and_write_nothing(tmp_path: Path, damage, message: str) -> None:
    rows = [sample("a1", 0, "CLICK", "", "101")]
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(damage(rows)), path)
    result = invoke("import", "mind2web", str(path), "--store", str(tmp_path / "store"))
    assert result.exit_code == 1 and result.output.startswith("Error: ") and message in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "store").exists()
    missing = invoke("import", "mind2web", str(tmp_path / "nothing"), "--store", str(tmp_path / "store"))
    assert missing.exit_code == 1 and "does not exist" in missing.output


def test_the_shipped_json_sample_imports(tmp_path: Path) -> None:
    result = invoke(
        "import", "mind2web", str(DATA / "sample.json"), "--store", str(tmp_path / "s"), "--format", "json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["imported"] == 2


def test_json_lines_with_base64_screenshots_import(tmp_path: Path) -> None:
    row = {
        **sample("b1", 0, "CLICK", "", "101"),
        "screenshot": {"bytes": base64.b64encode(jpeg("red")).decode()},
    }
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    result = invoke("import", "mind2web", str(tmp_path / "rows.jsonl"), "--store", str(tmp_path / "s"))
    assert result.exit_code == 0, result.output
    steps = Store.open(tmp_path / "s").read("steps").to_pylist()
    assert Store.open(tmp_path / "s").read_blobs([steps[0]["screenshot"]])[steps[0]["screenshot"]] == jpeg(
        "red"
    )
