"""Deadlines on the model, kept on the caller's side, and replies checked before they are stored.

An endpoint that never answers or drips a byte every few seconds costs one call's deadline,
retries included, and no more; absurd usage numbers are counted as 0 with the reason on the
step; a lone surrogate or bytes that are no UTF-8 in a reply are stored escaped. Against the
local fake endpoint (real HTTP), with real recordings where a run is involved."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmina.agents.protocol import AgentReply, checked_reply
from mmina.agents.settings import AgentSettings
from mmina.evaluators.judge import JudgeSettings, resolve
from mmina.models.model_client import MAX_TOKENS, Deadlines, ModelClient, ModelError, token_count
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.budget import Limits
from tests.fake_openai import FakeOpenAI

SLACK_S = 8.0
"""What a loaded machine may add to a deadline before the test calls it late."""


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _timed_failure(server: FakeOpenAI, deadlines: Deadlines) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(ModelError) as failed:
        ModelClient(server.url, deadlines).complete(model="m", messages=[{"role": "user", "content": "hi"}])
    return str(failed.value), time.monotonic() - started


@pytest.mark.parametrize("misbehaviour", [{"hang": True}, {"drip_s": 1.0}], ids=["never answers", "drips"])
def test_a_call_ends_at_its_deadline_whatever_the_endpoint_does(misbehaviour: dict) -> None:
    with FakeOpenAI(**misbehaviour) as server:
        message, elapsed = _timed_failure(server, Deadlines(call_s=3, max_retries=3))
    assert (
        message
        == "model endpoint gave no complete answer within 3 s (the deadline of a model call, retries included)"
    )
    assert 3 <= elapsed < 3 + SLACK_S


def test_retries_happen_within_the_deadline() -> None:
    with FakeOpenAI(fail_first=2, fail_status=503) as server:
        reply = ModelClient(server.url, Deadlines(call_s=60, max_retries=2)).complete(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert reply.text and len(server.requests) == 3
    with FakeOpenAI(always_fail=True, fail_status=503) as server:
        message, _ = _timed_failure(server, Deadlines(call_s=60, max_retries=2))
    assert (
        message.startswith("model endpoint failed after 2 retries: Error code: 503")
        and len(server.requests) == 3
    )


def test_an_agent_whose_model_hangs_errors_its_episode_in_one_deadline(tmp_path: Path) -> None:
    with FakeOpenAI(hang=True) as server:
        started = time.monotonic()
        summary = record_run(
            Store.open(tmp_path / "store", create=True),
            RecordConfig(
                task_ids=("normal/1",),
                agent="openai",
                browser=BrowserConfig(screenshots=False),
                agent_settings=AgentSettings(
                    model="fake", base_url=server.url, model_deadline_s=2, max_retries=4
                ),
            ),
        )
        elapsed = time.monotonic() - started
    [episode] = summary.episodes
    assert episode.status == "error" and "no complete answer within 2 s" in episode.error
    assert elapsed < 60, "a hanging model costs one deadline, not retries × timeouts"


def test_a_hanging_judge_fails_its_prompts_and_rescore_goes_on(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    with FakeOpenAI(drip_s=1.0) as server:
        outcome = resolve(store, ["a", "b"], JudgeSettings(model="j", base_url=server.url, deadline_s=2))
    assert set(outcome.failures) == {"a", "b"} and all("within 2 s" in f for f in outcome.failures.values())


def _record_with(tmp_path: Path, server: FakeOpenAI) -> list[tuple]:
    summary = record_run(
        Store.open(tmp_path / "store", create=True),
        RecordConfig(
            task_ids=("normal/1",),
            agent="openai",
            limits=Limits(max_steps=2),
            browser=BrowserConfig(screenshots=False),
            agent_settings=AgentSettings(model="fake", base_url=server.url, max_retries=0),
        ),
    )
    assert len(summary.episodes) == 1
    return run_query(
        Store.open(tmp_path / "store"),
        "select model_output, prompt_tokens, completion_tokens, action_error from steps order by step_index",
    ).rows


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 10**30, "completion_tokens": 5},
        {"prompt_tokens": -3, "completion_tokens": 2.5},
        {"prompt_tokens": "many", "completion_tokens": None},
    ],
)
def test_absurd_usage_is_counted_as_0_with_the_reason_on_the_step(tmp_path: Path, usage: dict) -> None:
    with FakeOpenAI(usage=usage) as server:
        steps = _record_with(tmp_path, server)
    for _output, prompt_tokens, completion_tokens, error in steps:
        assert prompt_tokens == 0 and "usage.prompt_tokens" in error and "counted as 0" in error
        assert completion_tokens == (5 if usage["completion_tokens"] == 5 else 0)
    totals = run_query(
        Store.open(tmp_path / "store"), "select count(*), sum(prompt_tokens) from episodes"
    ).rows
    assert totals == [(1, 0)]


@pytest.mark.parametrize(
    "raw, stored",
    [
        (b"hi \\ud83d there", "hi \\ud83d there"),
        (b"bad \xff\xfe bytes", "bad \\xff\\xfe bytes"),
        (b"\\udcff\\ud800", "\\udcff\\ud800"),
    ],
    ids=["lone surrogate escape", "not UTF-8", "two lone surrogates"],
)
def test_a_reply_no_utf8_can_hold_is_stored_escaped(tmp_path: Path, raw: bytes, stored: str) -> None:
    with FakeOpenAI(raw_content=raw) as server:
        steps = _record_with(tmp_path, server)
    assert steps and all(output == stored for output, *_ in steps)


@given(
    value=st.one_of(
        st.integers(min_value=-(10**40), max_value=10**40),
        st.floats(),
        st.text(max_size=5),
        st.none(),
        st.booleans(),
        st.lists(st.integers(), max_size=2),
    )
)
def test_any_usage_value_is_a_count_or_zero_with_a_reason(value: object) -> None:
    count, note = token_count(value, "prompt_tokens")
    believable = value is None or type(value) is int and 0 <= value <= MAX_TOKENS
    assert (
        0 <= count <= MAX_TOKENS
        and (note is None) == believable
        and count == (value if value and believable else 0)
    )
    checked = checked_reply(
        AgentReply(output="x", prompt_tokens=value, completion_tokens=value, cost_usd=value)
    )  # type: ignore[arg-type]
    assert 0 <= checked.prompt_tokens <= MAX_TOKENS and 0 <= checked.cost_usd
    json.dumps([checked.output, checked.note]).encode("utf-8")


@given(text=st.text())
def test_any_reply_text_is_storable(text: str) -> None:
    checked_reply(text).output.encode("utf-8")
    checked_reply(AgentReply(output=text)).output.encode("utf-8")


def test_deadlines_are_bounded() -> None:
    for call_s, retries in ((0, 1), (-1, 1), (float("nan"), 1), (10**9, 1), (10, -1), (10, 1000)):
        with pytest.raises(ModelError):
            Deadlines(call_s, retries)
