"""``--evaluator keypoints``: the multimodal key-point judge, against the local OpenAI-compatible
server with scripted replies (tests/keypoint_judge.py) — on a really recorded episode: what it
asks in which order, which screenshots it shows, the verdicts, reasons and costs it stores, a
cached rescore that sends nothing, malformed and refused replies read as unclear, a judge that
is down; and end to end on a sample of the built-in suite."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mmina.cli import cli
from mmina.evaluators import keypoint_prompts as ask
from mmina.evaluators.keypoint_prompts import Malformed
from mmina.store import Store
from tests.fake_openai import COMPLETION_TOKENS, NULL_CONTENT, PROMPT_TOKENS, FakeOpenAI, last_user_text
from tests.keypoint_judge import KeypointJudge
from tests.test_report import recorded_store

KEY = {"OPENAI_API_KEY": "sk-test-judge"}
CALL_USD = (PROMPT_TOKENS * 2.5 + COMPLETION_TOKENS * 10) / 1e6


def invoke(store: Path, server: FakeOpenAI, *extra: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(
        cli,
        [
            "rescore",
            "--store",
            str(store),
            "--evaluator",
            "keypoints",
            "--judge-model",
            "fake-judge",
            "--judge-base-url",
            server.url,
            "--format",
            "json",
            *extra,
        ],
        env=env or KEY,
    )


def keypoints(
    store: Path, server: FakeOpenAI, *extra: str, env: dict[str, str | None] | None = None
) -> dict[str, Any]:
    result = invoke(store, server, *extra, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rows(store: Path, batch_id: str) -> list[dict[str, Any]]:
    """The batch's rows, hops in order then the task, details parsed."""
    found = [
        {**r, "detail": json.loads(r["detail_json"])}
        for r in Store.open(store).read("scores").to_pylist()
        if r["batch_id"] == batch_id
    ]
    return sorted(found, key=lambda r: (r["episode_id"], r["level"] == "task", r["hop"] or 0))


def pages(store: Path) -> dict[int, tuple[str, str | None]]:
    """step_index → (URL, screenshot) of the recorded episode's steps and final page."""
    opened = Store.open(store)
    steps = {s["step_index"]: (s["url"], s["screenshot"]) for s in opened.read("steps").to_pylist()}
    episode = opened.read("episodes").to_pylist()[0]
    return {**steps, max(steps) + 1: (episode["final_url"], episode["final_screenshot"])}


def evidence(store: Path, site: str) -> list[int]:
    """What the scripted judge's relevance makes the evaluator show for a hop: the three latest
    steps on the site (all scored 5)."""
    return sorted(i for i, (url, _) in pages(store).items() if site in url)[-3:]


# -- one recorded episode (normal/1: the wiki, then the shop) -------------------------------------


def test_each_hop_is_judged_from_its_relevant_screenshots_with_reasons_and_cost(recorded_copy: Path) -> None:
    judge = KeypointJudge()
    with FakeOpenAI(script=judge) as server:
        report = keypoints(recorded_copy, server, "--judge-price-in", "2.5", "--judge-price-out", "10")
    asked = [(kind, hop) for kind, hop, _ in judge.asked]
    # each stage once the one before is answered; a stage's questions (the hops' verdicts) go
    # out together, so they reach the server in any order
    assert asked[:2] == [("key_points", None), ("relevance", None)]
    assert sorted(asked[2:]) == [("verdict", 1), ("verdict", 2)]
    (episode,) = report["episodes"]
    assert (episode["verdict"], episode["hops_passed"], episode["hops_total"]) == ("pass", 2, 2)
    assert episode["cost_usd"] == pytest.approx(4 * CALL_USD)
    assert report["judge_usage"] == {
        "prompt_tokens": 4 * PROMPT_TOKENS,
        "completion_tokens": 4 * COMPLETION_TOKENS,
        "cost_usd": pytest.approx(4 * CALL_USD),
        "new_prompt_tokens": 4 * PROMPT_TOKENS,
        "new_completion_tokens": 4 * COMPLETION_TOKENS,
        "spent_usd": pytest.approx(4 * CALL_USD),
    }
    wiki, shop, task = rows(recorded_copy, report["batch_id"])
    shown = {1: evidence(recorded_copy, "kiwix"), 2: evidence(recorded_copy, "shop")}
    for row, hop, site in ((wiki, 1, "kiwix"), (shop, 2, "shop")):
        assert (row["level"], row["hop"], row["verdict"], row["value"]) == ("hop", hop, "pass", 1.0)
        assert row["detail"]["key_points"] == [f"reach the {site} site"]
        assert row["detail"]["evidence"] == shown[hop] and row["detail"]["cited_steps"] == [shown[hop][-1]]
        assert row["detail"]["reasons"] == f"step {shown[hop][-1] + 1} shows the {site} site", (
            "steps shown from 1"
        )
        assert row["detail"]["cost_usd"] == pytest.approx(CALL_USD)
        assert row["detail"]["prompt_tokens"] == PROMPT_TOKENS
    assert (task["verdict"], task["value"], task["detail"]["calls"]) == ("pass", 1.0, 4)
    assert task["detail"]["cost_usd"] == pytest.approx(4 * CALL_USD)
    assert json.loads(task["args_json"]) == {
        "images": True,
        "judge_model": "fake-judge",
        "min_relevance": 3,
        "per_hop": 3,
        "price_in": 2.5,
        "price_out": 10.0,
    }
    blobs = Store.open(recorded_copy).read_blobs([pages(recorded_copy)[i][1] for i in shown[1] + shown[2]])
    sent_by_hop = judge.verdict_images()
    assert sorted(sent_by_hop) == [1, 2]
    for hop, urls in sent_by_hop.items():
        sent = [base64.b64decode(u.split(",", 1)[1]) for u in urls]
        assert sent == [blobs[pages(recorded_copy)[i][1]] for i in shown[hop]], (
            "the evidence steps' own screenshots"
        )
        assert all(u.startswith("data:image/jpeg;base64,") for u in urls)
    assert judge.images("relevance") == [[]] and judge.images("key_points") == [[]], (
        "text questions carry no image"
    )
    relevance = last_user_text(judge.asked[1][2])
    assert "Step 1: http://wiki.mmina.test/" in relevance and "model" not in relevance.lower()


def test_a_cached_rescore_sends_nothing_and_gives_the_same_verdicts(recorded_copy: Path) -> None:
    with FakeOpenAI(script=KeypointJudge()) as server:
        first = keypoints(recorded_copy, server, "--judge-price-in", "2.5", "--judge-price-out", "10")
        sent = len(server.requests)
        second = keypoints(
            recorded_copy,
            server,
            "--judge-price-in",
            "2.5",
            "--judge-price-out",
            "10",
            env={"OPENAI_API_KEY": None},
        )
        assert len(server.requests) == sent == 4
    assert second["judge"] == {"cached": 4, "requested": 0, "failed": 0}
    assert second["judge_usage"]["spent_usd"] == 0 and second["judge_usage"]["cost_usd"] == pytest.approx(
        4 * CALL_USD
    )
    strip = [(r["hop"], r["verdict"], r["detail_json"]) for r in rows(recorded_copy, first["batch_id"])]
    assert strip == [
        (r["hop"], r["verdict"], r["detail_json"]) for r in rows(recorded_copy, second["batch_id"])
    ]
    assert len(Store.open(recorded_copy).files("judge_cache")) == 3, (
        "one file per round: key points, relevance, verdicts"
    )


def fenced(verdict: str) -> str:
    return "```json\n" + json.dumps({"verdict": verdict, "reasons": "step 2 shows it", "steps": []}) + "\n```"


@pytest.mark.parametrize(
    "kind, hop, reply, verdicts, reason, asked",
    [
        ("verdict", 2, "The agent clearly completed it.", ["pass", "unclear"], "not the JSON asked for", 4),
        (
            "verdict",
            2,
            "I'm sorry, but I can't help with that.",
            ["pass", "unclear"],
            "not the JSON asked for",
            4,
        ),
        ("verdict", 2, NULL_CONTENT, ["pass", "unclear"], "the judge gave an empty reply (a refusal?)", 4),
        (
            "verdict",
            1,
            '{"verdict": "Pass", "reasons": "ok", "steps": []}',
            ["unclear", "pass"],
            'verdict is "Pass"',
            4,
        ),
        (
            "verdict",
            1,
            '{"verdict": "pass", "reasons": "ok", "steps": [99]}',
            ["unclear", "pass"],
            "cited steps [99]",
            4,
        ),
        ("verdict", 1, '{"verdict": "pass", "steps": []}', ["unclear", "pass"], "gave no reasons", 4),
        ("verdict", 1, fenced("fail"), ["fail", "pass"], None, 4),
        (
            "key_points",
            None,
            '{"hops": [{"hop": 1, "key_points": ["x"]}]}',
            ["unclear", "unclear"],
            "key points: the judge listed key points for 1 hop(s), not 2",
            1,
        ),
        (
            "relevance",
            None,
            '{"relevance": [{"hop": 3, "step": 1, "score": 4}]}',
            ["unclear", "unclear"],
            "relevance: the judge's relevance entry",
            2,
        ),
    ],
)
def test_malformed_and_refused_replies_are_unclear_never_guessed(
    recorded_copy: Path,
    kind: str,
    hop: int | None,
    reply: str,
    verdicts: list[str],
    reason: str | None,
    asked: int,
) -> None:
    judge = KeypointJudge(lambda k, h: reply if (k, h) == (kind, hop) else None)
    with FakeOpenAI(script=judge) as server:
        report = keypoints(recorded_copy, server)
    *hops, task = rows(recorded_copy, report["batch_id"])
    assert [h["verdict"] for h in hops] == verdicts and len(judge.asked) == asked
    assert task["verdict"] == ("fail" if "fail" in verdicts else "unclear")
    if reason:
        assert any(reason in h["detail"]["reason"] for h in hops if h["verdict"] == "unclear"), hops
    if kind == "verdict" and reason:
        assert hops[hop - 1]["detail"]["reply"] == ("" if reply == NULL_CONTENT else reply)


def test_without_images_the_judge_reads_the_pages_text(recorded_copy: Path) -> None:
    judge = KeypointJudge()
    with FakeOpenAI(script=judge) as server:
        report = keypoints(recorded_copy, server, "--arg", "images=false")
    assert report["episodes"][0]["verdict"] == "pass"
    assert judge.images() == [[], []]
    assert all(
        "Its page as text:" in last_user_text(body) for kind, _, body in judge.asked if kind == "verdict"
    )


def test_a_judge_that_is_down_leaves_the_episode_unscored(recorded_copy: Path) -> None:
    before = Store.open(recorded_copy).files("scores")
    with FakeOpenAI(always_fail=True, fail_status=500) as down:
        result = invoke(recorded_copy, down, "--model-retries", "0")
    assert (
        result.exit_code == 1
        and "could not be scored" in result.stderr
        and "judge endpoint failed" in result.stderr
    )
    assert Store.open(recorded_copy).files("scores") == before


def test_prices_are_for_evaluators_that_record_a_cost(recorded_copy: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "rescore",
            "--store",
            str(recorded_copy),
            "--evaluator",
            "fuzzy",
            "--judge-model",
            "m",
            "--judge-price-in",
            "1",
        ],
    )
    assert result.exit_code == 1 and "evaluator fuzzy records no cost" in result.output
    result = CliRunner().invoke(cli, ["rescore", "--store", str(recorded_copy), "--evaluator", "keypoints"])
    assert result.exit_code == 1 and "asks an LLM judge: pass --judge-model NAME" in result.output
    result = CliRunner().invoke(
        cli,
        [
            "rescore",
            "--store",
            str(recorded_copy),
            "--evaluator",
            "keypoints",
            "--judge-model",
            "m",
            "--arg",
            "per_hop=0",
        ],
    )
    assert result.exit_code == 1 and "per_hop must be one of 1, 2" in result.output


# -- strict reading of replies -----------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, problem",
    [
        ("", "empty reply"),
        ("   ", "empty reply"),
        ("yes", "not the JSON asked for"),
        ("[1, 2]", "not a JSON object"),
        ('Sure! {"verdict": "pass"}', "not the JSON asked for"),
        ('```json\n{"verdict": "pass"}\n``` and more', "not the JSON asked for"),
    ],
)
def test_only_the_json_asked_for_is_read(reply: str, problem: str) -> None:
    with pytest.raises(Malformed, match=problem):
        ask.json_reply(reply)


def test_the_strict_readers() -> None:
    assert ask.json_reply('```\n{"a": 1}\n```') == {"a": 1}
    assert ask.key_points('{"hops": [{"hop": 1, "key_points": [" a ", "b"]}]}', 1) == [["a", "b"]]
    for bad in (
        '{"hops": [{"hop": 2, "key_points": ["a"]}]}',
        '{"hops": [{"hop": 1, "key_points": []}]}',
        '{"hops": [{"hop": 1, "key_points": [3]}]}',
        '{"hops": [{"hop": 1, "key_points": ["a"]}] , "x": 1}'[:-8],
    ):
        with pytest.raises(Malformed):
            ask.key_points(bad, 1)
    assert ask.relevance('{"relevance": [{"hop": 1, "step": 2, "score": 5}]}', 1, [1, 2]) == {0: {2: 5}}
    for bad in (
        '{"relevance": [{"hop": 1, "step": 3, "score": 5}]}',
        '{"relevance": [{"hop": 1, "step": 2, "score": 6}]}',
        '{"relevance": [{"hop": 1, "step": 2, "score": true}]}',
        '{"relevance": {}}',
        '{"relevance": [{"hop": 1, "step": 2, "score": 1}, {"hop": 1, "step": 2, "score": 2}]}',
    ):
        with pytest.raises(Malformed):
            ask.relevance(bad, 1, [1, 2])
    assert ask.verdict('{"verdict": "fail", "reasons": " no ", "steps": [2]}', [2]) == ("fail", "no", [2])
    assert ask.chosen({1: 5, 2: 3, 3: 5, 4: 2, 5: 5}, 2, 3) == [3, 5] and ask.chosen({1: 2}, 3, 3) == []


# -- end to end on the built-in suite ------------------------------------------------------------


def judged_twice(store: Path, episodes: int) -> tuple[list[dict[str, Any]], KeypointJudge]:
    """Every episode of the store judged hop by hop (each hop gets its row), then again from the
    cache without a request; the hop rows and the judge."""
    judge = KeypointJudge()
    with FakeOpenAI(script=judge) as server:
        report = keypoints(store, server, "--judge-concurrency", "4")
        again = keypoints(store, server, env={"OPENAI_API_KEY": None})
    assert len(report["episodes"]) == episodes and report["ok"] and again["judge"]["requested"] == 0
    hop_rows = [r for r in rows(store, report["batch_id"]) if r["level"] == "hop"]
    assert len(hop_rows) == sum(e["n_hops"] for e in report["episodes"])
    return hop_rows, judge


def against_hops(store: Path, fmt: str) -> str:
    result = CliRunner().invoke(
        cli,
        [
            "agreement",
            "--store",
            str(store),
            "--evaluator",
            "keypoints",
            "--reference",
            "hops",
            "--format",
            fmt,
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def test_end_to_end_on_the_built_in_suite(tmp_path: Path) -> None:
    """Every episode of a sample of the built-in suite (13 tasks of 1 to 6 hops, an agent with
    known mistakes) judged hop by hop; agreement with the hops evaluator then reads it."""
    store = tmp_path / "store"
    shutil.copytree(recorded_store(), store)
    hop_rows, judge = judged_twice(store, 13)
    assert {r["verdict"] for r in hop_rows} == {"pass", "fail"}
    assert sum(len(urls) for urls in judge.images()) > 0
    groups = json.loads(against_hops(store, "json"))["groups"]
    assert next(g for g in groups if (g["level"], g["by"]) == ("hop", "all"))["pairs"] == len(hop_rows)


@pytest.mark.heavy
@pytest.mark.timeout(3600)
def test_the_whole_built_in_suite(tmp_path: Path) -> None:
    """The oracle over all 100 built-in tasks, then every hop judged; a second rescore is free."""
    from mmina.executors.interface import Layout
    from mmina.recorder.recording import RecordConfig, record_run

    store = tmp_path / "store"
    record_run(Store.open(store, create=True), RecordConfig(run_id="oracle", layout=Layout(concurrency=4)))
    hop_rows, judge = judged_twice(store, 100)
    print(against_hops(store, "table"))
    print(
        f"hop rows: {len(hop_rows)}, questions: {len(judge.asked)}, images shown: "
        f"{sum(len(u) for u in judge.images())}"
    )


KEYPOINT_QUESTIONS_SHA256 = {
    "keypoints-1": "53070a558237ea386131e70c06cc17277160b2a4948f98c795547bf205b17c5c"
}
"""The code of ``keypoint_prompts`` (its questions and the reading of the replies) each prompt
version stands for: its syntax tree, so neither layout nor docstrings nor imports count."""


def _questions_tree() -> str:
    """``keypoint_prompts`` as a syntax tree without its imports, docstrings and ``PROMPT_VERSION``
    (where a name comes from, and how the text is laid out, is no question)."""
    import ast
    import inspect

    def kept(node: ast.stmt) -> bool:
        if isinstance(node, ast.Import | ast.ImportFrom):
            return False
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return False  # a docstring
        targets = node.targets if isinstance(node, ast.Assign) else []
        return not any(isinstance(t, ast.Name) and t.id == "PROMPT_VERSION" for t in targets)

    tree = ast.parse(inspect.getsource(ask))
    for node in ast.walk(tree):
        if hasattr(node, "body") and isinstance(node.body, list):
            node.body = [n for n in node.body if kept(n)] or [ast.Pass()]
    return ast.dump(tree)


def test_the_prompt_version_is_pinned_to_the_questions() -> None:
    """A changed question or parser with the same prompt version would mix verdicts and cached
    replies of two judges under one name: change ``PROMPT_VERSION`` with the code, and add its
    hash here."""
    import hashlib

    assert (
        KEYPOINT_QUESTIONS_SHA256.get(ask.PROMPT_VERSION)
        == hashlib.sha256(_questions_tree().encode()).hexdigest()
    ), "keypoint_prompts changed: give it a new PROMPT_VERSION and pin its code's hash in this test"
