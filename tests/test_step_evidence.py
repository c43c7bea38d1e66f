"""The whole evidence of a step (model input, target box), verdicts stored by the recorder, and
the heuristic baseline — real recordings in Chromium against the fixture web and a local
OpenAI-compatible server."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.agents.heuristic import best_line, query, questions, words
from mmina.agents.settings import AgentSettings
from mmina.cli import cli
from mmina.models.model_client import Deadlines, ModelClient
from mmina.models.model_input import INPUT_TYPE, MESSAGE_TYPE, load_request, store_request, with_image_blobs
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.redaction.redact import Redactor
from mmina.store import Store
from mmina.store.marks import marked_screenshot, repaint
from mmina.store.sql import run_query
from tests.fake_openai import FakeOpenAI
from tests.heavy import sized

API_KEY = "sk-local-test-key"


def rows(store: Store, sql: str) -> list[tuple]:
    return run_query(store, sql).rows


def blob_getter(store: Store):
    def get(digest: str) -> bytes:
        return store.read_blobs([digest])[digest]

    return get


# -- the model input, stored by content ---------------------------------------------------------------


def test_store_request_round_trips_shares_blobs_and_cleans_text() -> None:
    blobs: dict[str, tuple[bytes, str]] = {}

    def put(data: bytes, media: str) -> str:
        digest = f"h{len(blobs)}-{hash(data) & 0xFFFF}"
        for key, (stored, _) in blobs.items():
            if stored == data:
                return key
        blobs[digest] = (data, media)
        return digest

    image = base64.b64encode(b"\xff\xd8jpeg bytes").decode()
    system = {"role": "system", "content": "You are an agent."}
    request = {
        "model": "m",
        "temperature": 0.0,
        "max_tokens": 9,
        "messages": [
            system,
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "typed hunter2 here"},
                    {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{image}"}},
                ],
            },
        ],
    }
    redactor = Redactor()
    redactor.learn_secret("hunter2")
    first = store_request(request, put, redactor)
    second = store_request({**request, "messages": [system, {"role": "user", "content": "next step"}]}, put)
    document = json.loads(blobs[first][0])
    assert blobs[first][1] == INPUT_TYPE and document["parameters"] == {"max_tokens": 9, "temperature": 0.0}
    assert json.loads(blobs[second][0])["messages"][0] == document["messages"][0], (
        "the shared system message is one blob"
    )
    assert blobs[document["messages"][0]][1] == MESSAGE_TYPE
    assert not any(b"hunter2" in data for data, _ in blobs.values())
    assert b"\xff\xd8jpeg bytes" in [data for data, media in blobs.values() if media == "image/jpeg"]
    restored = load_request(first, lambda digest: blobs[digest][0])
    assert restored["messages"][1]["content"][1] == request["messages"][1]["content"][1]
    assert restored["messages"][1]["content"][0]["text"] == "typed [REDACTED] here"
    assert {k: v for k, v in restored.items() if k != "messages"} == {
        "model": "m",
        "temperature": 0.0,
        "max_tokens": 9,
    }

    held = with_image_blobs(request, put)  # what the recorder holds until the episode ends
    assert "base64" not in json.dumps(held) and held["messages"][0] == system
    assert store_request(held, put, redactor) == first, "stored as the request itself would be, to the byte"
    assert with_image_blobs({"model": "m"}, put) == {"model": "m"}


@pytest.fixture(scope="module")
def openai_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, list[dict]]:
    """normal/1 recorded by the openai agent in the multimodal mode; the bodies the server received."""
    patch = pytest.MonkeyPatch()
    patch.setenv("OPENAI_API_KEY", API_KEY)
    patch.delenv("OPENAI_BASE_URL", raising=False)
    store = Store.open(tmp_path_factory.mktemp("openai") / "store", create=True)
    with FakeOpenAI() as server:
        settings = AgentSettings(
            model="fake-model", base_url=server.url, input_mode="multimodal", max_retries=1
        )
        summary = record_run(
            store, RecordConfig(agent="openai", task_ids=("normal/1",), agent_settings=settings)
        )
        received = list(server.chat_requests)
    patch.undo()
    assert summary.episodes[0].success
    return store, received


def test_every_openai_step_stores_the_exact_request(openai_store: tuple[Store, list[dict]]) -> None:
    store, received = openai_store
    steps = rows(
        store, "select step_index, model_input, screenshot_som, model_output from steps order by step_index"
    )
    assert len(steps) == len(received) == 6 and all(s[1] for s in steps)
    for (index, digest, marks, _output), body in zip(steps, received):
        stored = load_request(digest, blob_getter(store))
        assert stored == {k: v for k, v in body.items() if not k.startswith("_")}, f"step {index}"
        shown = json.loads(store.read_blobs([digest])[digest])["messages"][-1]
        last = json.loads(store.read_blobs([shown])[shown])
        assert last["content"][1]["image_url"]["blob"] == marks, "the image is the step's set-of-marks blob"


def test_the_set_of_marks_image_paints_again_from_the_screenshot_and_its_marks(
    openai_store: tuple[Store, list[dict]],
) -> None:
    """Stored for an agent shown it, the image is also what ``repaint`` makes of the stored
    screenshot and marks, byte for byte: so agents not shown it need not store it."""
    store, _ = openai_store
    steps = rows(store, "select screenshot, screenshot_som, marks from steps order by step_index")
    blobs = store.read_blobs(sorted({d for shot, som, _ in steps for d in (shot, som)}))
    assert all(marks for _, _, marks in steps) and {m["role"] for _, _, marks in steps for m in marks} >= {
        "link"
    }
    for shot, som, marks in steps:
        assert repaint(blobs[shot], marks) == blobs[som] != blobs[shot]
    assert marked_screenshot(None, blobs[steps[0][0]], steps[0][2]) == blobs[steps[0][1]]


def test_the_stored_request_sent_again_gives_the_same_output(
    openai_store: tuple[Store, list[dict]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = openai_store
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    steps = rows(store, "select model_input, model_output from steps order by step_index")
    with FakeOpenAI() as server:
        client = ModelClient(server.url, Deadlines(max_retries=0))
        for digest, output in steps:
            assert client.complete(**load_request(digest, blob_getter(store))).text == output


def test_shared_messages_are_stored_once_and_sql_shows_the_prompt(
    openai_store: tuple[Store, list[dict]],
) -> None:
    store, _ = openai_store
    messages = rows(
        store,
        "select step_index, position, role, text, images from step_messages order by step_index, position",
    )
    assert [m[2] for m in messages if m[0] == 0] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    system = {m[3] for m in messages if m[2] == "system"}
    assert len(system) == 1 and "autonomous intelligent agent" in system.pop()
    assert rows(store, f"select count(*) from blobs where media_type = '{MESSAGE_TYPE}'") == [(5 + 6,)], (
        "system and few-shot messages once, one new user message per step"
    )
    assert all("OBJECTIVE:" in m[3] and len(m[4]) == 1 for m in messages if m[1] == 5)


def test_oracle_steps_have_target_boxes_and_no_model_input(recorded: tuple[Path, object]) -> None:
    store = Store.open(recorded[0])
    steps = rows(
        store, "select action_kind, model_input, target_box, screenshot_width from steps order by step_index"
    )
    assert all(model_input is None for _, model_input, _, _ in steps)
    for kind, _, box, width in steps:
        if kind in ("click", "type"):
            assert box is not None and 0 <= box["x"] < width and box["width"] > 0 and box["height"] > 0
        else:
            assert box is None


# -- verdicts at the end of each episode, the report right after recording ----------------------------


def test_report_works_right_after_record(tmp_path: Path) -> None:
    store = tmp_path / "store"
    runner = CliRunner()
    recorded = runner.invoke(cli, ["record", "--store", str(store), "--limit", "3", "--no-screenshots"])
    assert recorded.exit_code == 0, recorded.output
    assert "Task SR and hop SR by hop count" in recorded.output and "mmina report --run" in recorded.output
    report = runner.invoke(
        cli, ["report", "--store", str(store), "--format", "json", "--table", "sr_by_bucket"]
    )
    assert report.exit_code == 0, report.output
    overall = json.loads(report.output)["tables"]["sr_by_bucket"][-1]
    assert overall["bucket"] == "overall" and overall["tasks"] == 3 and overall["task_sr"] == 1.0
    opened = Store.open(store)
    assert {
        (e, n) for e, n in rows(opened, "select evaluator, count(distinct episode_id) from scores group by 1")
    } == {("hops", 3), ("task", 3)}
    again = runner.invoke(cli, ["rescore", "--store", str(store), "--evaluator", "hops", "--format", "json"])
    assert again.exit_code == 0 and json.loads(again.output)["flips"] == [], (
        "rescoring agrees with the recorder"
    )


def test_a_task_judged_by_an_llm_gets_only_its_hop_verdicts(tmp_path: Path) -> None:
    source = json.loads(
        (Path(__file__).parent.parent / "fixtures" / "tasks" / "wikipedia" / "1.json").read_text()
    )
    source["eval"] = {
        "eval_types": ["string_match"],
        "reference_answers": {"fuzzy_match": ["Vell tea"]},
        "reference_url": "",
    }
    suite = tmp_path / "tasks" / "wikipedia"
    suite.mkdir(parents=True)
    (suite / "1.json").write_text(json.dumps(source))
    store = Store.open(tmp_path / "store", create=True)
    record_run(store, RecordConfig(tasks=str(suite)))
    assert rows(store, "select distinct evaluator from scores") == [("hops",)]


# -- the heuristic baseline -------------------------------------------------------------------------------


def test_heuristic_rules() -> None:
    assert questions("Do this. (1) Open A. (2) Find B. Answer both.", 2) == [
        "Open A.",
        "Find B. Answer both.",
    ]
    assert questions("One question only.", 2) == ["One question only."] * 2
    assert query("On the MMInA Wiki, look up the country Solaria. What is its national product?") == "Solaria"
    assert query("On the recipe site, search for granita and open the recipe.") == "granita"
    assert query("Which is the cheapest flight from Calder Bay to Port Meridian?") == "Calder Bay"
    assert words("The price of Vell tea") == ["price", "vell", "tea"]
    tree = '[1] heading "Vell tea"\n\tparagraph: Vell tea is grown on Mount Karos.\n\tparagraph: Vell tea costs $23.75'
    assert best_line(tree, "What does Vell tea cost?") == "Vell tea costs $23.75"
    assert best_line(tree, "Where is Vell tea grown?") == "Vell tea is grown on Mount Karos."
    assert best_line(tree, "Unrelated words only") == ""


BASELINE_TASKS = ("wikipedia/7", "wikipedia/1", "shopping/2", "normal/1", "compare/1", "multi567/1")
BASELINE_SAMPLE = ("wikipedia/7", "shopping/2", "normal/1", "multi567/1")
"""The default run's sample (35 of 47 steps): the one it answers right, and a failure in each bucket."""
REPEAT_SAMPLE = ("shopping/2", "normal/1")
"""Recorded a second time by default to check the episodes repeat (all of them with MMINA_HEAVY=1)."""


def test_heuristic_baseline_fails_in_every_bucket_and_repeats_itself(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    browser = BrowserConfig(screenshots=False)  # it reads the tree only
    first = record_run(
        store,
        RecordConfig(
            agent="heuristic", task_ids=sized(BASELINE_SAMPLE, BASELINE_TASKS), run_id="h1", browser=browser
        ),
    )
    again = sized(REPEAT_SAMPLE, BASELINE_TASKS)
    record_run(store, RecordConfig(agent="heuristic", task_ids=again, run_id="h2", browser=browser))
    assert all(e.status == "completed" for e in first.episodes)
    actions = (
        "select e.task_id, s.step_index, s.action from steps s join episodes e using (episode_id) "
        "where e.run_id = '{}' order by 1, 2"
    )
    assert [r for r in rows(store, actions.format("h1")) if r[0] in again] == rows(
        store, actions.format("h2")
    ), "deterministic"
    by_bucket = dict(
        rows(
            store,
            "select bucket, count(*) filter (where not passed) from episode_scores "
            "where run_id = 'h1' and evaluator = 'hops' group by 1",
        )
    )
    assert set(by_bucket) == {"1", "2-4", "5+"} and all(failed >= 1 for failed in by_bucket.values())
    assert rows(
        store, "select count(*) from episode_scores where run_id = 'h1' and evaluator = 'hops' and passed"
    ) == [(1,)], "wikipedia/7 is answered right: a floor, not zero"


def test_viewer_shows_each_steps_model_input_once(
    openai_store: tuple[Store, list[dict]], tmp_path: Path
) -> None:
    from tests.test_view_html import open_offline

    store, _ = openai_store
    episode = rows(store, "select episode_id from episodes")[0][0]
    out = tmp_path / "episode.html"
    result = CliRunner().invoke(
        cli, ["view", "--episode", episode, "--store", str(store.root), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    seen: list[str] = []

    def check(page) -> None:
        seen.append(page.text_content("#step-input"))
        page.click("#next-step")
        seen.append(page.text_content("#step-input"))

    assert open_offline(out, check) == []
    assert seen[0].startswith("model fake-model") and "--- system" in seen[0] and "[image " in seen[0]
    assert "(5 message(s) as in the step before)" in seen[1] and "--- system" not in seen[1]
