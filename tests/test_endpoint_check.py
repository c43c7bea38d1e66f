"""A model agent's endpoint is checked before the first episode: one one-token request, and a
wrong URL or model name is one line naming both, before a browser starts or a store is made."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.agents.endpoint import check_endpoint, step_prompt_tokens, without_userinfo
from mmina.agents.settings import AgentSettings
from mmina.cli import cli
from mmina.errors import AgentError
from mmina.store import Store
from tests.fake_openai import FakeOpenAI
from tests.store_helpers import begin, write_episode

KEY = {"OPENAI_API_KEY": "sk-test"}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(models=("good-model",)) as running:
        yield running


def closed_url() -> str:
    """The URL of a port nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_working_endpoint_answers_one_token_and_says_the_cost_per_step(server: FakeOpenAI) -> None:
    before = len(server.requests)
    found = check_endpoint(
        AgentSettings(model="good-model", base_url=server.url, price_input=2.5, price_output=10)
    )
    (request,) = server.requests[before:]
    assert (request["model"], request["max_tokens"], len(request["messages"])) == ("good-model", 1, 1)
    assert (found.base_url, found.model, found.step_completion_tokens) == (server.url, "good-model", 1024)
    assert (
        found.step_prompt_tokens == step_prompt_tokens() > 4000
    )  # instructions, examples, a full observation
    assert found.step_cost_usd == pytest.approx((found.step_prompt_tokens * 2.5 + 1024 * 10) / 1e6)
    assert "a step costs at most $0.0" in found.line() and server.url in found.line()
    assert check_endpoint(AgentSettings(model="good-model", base_url=server.url)).step_cost_usd is None


def test_a_wrong_model_is_one_line_naming_url_and_model(server: FakeOpenAI) -> None:
    with pytest.raises(AgentError) as error:
        check_endpoint(AgentSettings(model="no-such-model", base_url=server.url))
    message = str(error.value)
    assert message.startswith(f"model no-such-model at {server.url} cannot be used: ") and "\n" not in message
    assert "does not exist" in message


def test_a_wrong_url_is_one_line_and_quick() -> None:
    url = closed_url()
    started = time.monotonic()
    with pytest.raises(AgentError, match=f"^model m at {url} cannot be used: "):
        check_endpoint(AgentSettings(model="m", base_url=url, max_retries=4))
    assert time.monotonic() - started < 30


def test_credentials_in_the_url_are_not_shown() -> None:
    assert without_userinfo("http://user:secret@host:8000/v1") == "http://host:8000/v1"
    assert without_userinfo("https://api.openai.com/v1") == "https://api.openai.com/v1"


@pytest.mark.parametrize("case", ["wrong model", "wrong url"])
def test_record_refuses_before_anything_starts(server: FakeOpenAI, tmp_path: Path, case: str) -> None:
    url, model = (server.url, "no-such-model") if case == "wrong model" else (closed_url(), "good-model")
    store = tmp_path / "store"
    result = CliRunner().invoke(
        cli,
        ["record", "--agent", "openai", "--model", model, "--base-url", url, "--store", str(store)],
        env=KEY,
    )
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"Error: model {model} at {url} cannot be used: ")
    assert not store.exists()


def test_replay_and_eval_steps_with_a_model_agent_check_it_too(server: FakeOpenAI, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    begin(store, "run-a")
    write_episode(store, "run-a", "ep-1")
    for command in (["replay", "--run", "run-a", "--agent", "openai"], ["eval-steps", "--run", "run-a"]):
        result = CliRunner().invoke(
            cli,
            [*command, "--model", "no-such-model", "--base-url", server.url, "--store", str(store.root)],
            env=KEY,
        )
        assert result.exit_code == 1 and "Error: model no-such-model at " in result.output, (
            command,
            result.output,
        )


def test_a_burst_of_429s_at_the_start_is_retried_as_a_call_is() -> None:
    with FakeOpenAI(fail_first=3, fail_status=429) as server:
        check = check_endpoint(AgentSettings(model="m", base_url=server.url, max_retries=4))
    assert check.model == "m" and len(server.requests) == 4


def test_an_html_page_is_not_an_answer() -> None:
    with FakeOpenAI(html=True) as server:
        with pytest.raises(AgentError) as error:
            check_endpoint(AgentSettings(model="m", base_url=server.url))
    assert "is not a chat completion" in str(error.value) and "Please sign in" in str(error.value)
