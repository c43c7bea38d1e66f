"""The ``openai``, ``human`` agents and ``--memory``: real recordings against a local OpenAI-compatible server.

The server (tests/fake_openai.py) answers with a small policy that reads element ids out of the
prompt, so these tests check prompt building, image attachment, parsing and recording, not
model quality. The human agent is driven through piped stdin of a real ``mmina record``.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from mmina.actions.grammar import SUMMARY_MARKER, ActionKind
from mmina.agents.captions import OpenAICaptioner
from mmina.agents.human import PROMPT, HumanAgent
from mmina.agents.llm import OpenAIAgent, client_for
from mmina.agents.memory import MemoryLimits, Trajectory, rank, render, similarity
from mmina.agents.prompts import truncate
from mmina.agents.registry import make_agent
from mmina.agents.settings import AgentSettings
from mmina.cli import cli
from mmina.errors import AgentError
from mmina.observations.observation import Observation, PageImage, Tab
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.budget import Limits
from mmina.tasks.taskcheck import load_suite
from tests.fake_openai import (
    CAPTION,
    COMPLETION_TOKENS,
    PROMPT_TOKENS,
    FakeOpenAI,
    image_urls,
    last_user_text,
    next_action,
)

API_KEY = "sk-local-test-key"
TASK = load_suite().select(["normal/1"]).tasks[0]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _settings(server: FakeOpenAI, **overrides) -> AgentSettings:
    return AgentSettings(**{"model": "fake-model", "base_url": server.url, "max_retries": 1, **overrides})


def _record(store: Path, settings: AgentSettings, max_steps: int = 30, **config) -> RunSummary:
    return record_run(
        Store.open(store, create=True),
        RecordConfig(
            agent="openai",
            task_ids=config.pop("task_ids", ("normal/1",)),
            agent_settings=settings,
            limits=Limits(max_steps=max_steps),
            **config,
        ),
    )


def _rows(store: Path, query: str) -> list[tuple]:
    return run_query(Store.open(store), query).rows


def _observation(**overrides) -> Observation:
    fields = dict(
        step_index=0,
        url="http://wiki.mmina.test/kiwix/",
        title="MMInA Wiki",
        tabs=[Tab("http://wiki.mmina.test/kiwix/", "MMInA Wiki")],
        active_tab=0,
        tree_text='[1] generic\n\t[10] searchbox "Search"',
        intent=TASK.intent,
    )
    return Observation(**{**fields, **overrides})


# -- the prompt, without a browser ---------------------------------------------------------------


def test_prompt_has_instructions_examples_websites_and_the_step() -> None:
    agent = OpenAIAgent(AgentSettings(model="m"), client=None)
    agent.reset(TASK)
    messages = agent.messages(_observation())
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    system = messages[0]["content"]
    assert "autonomous intelligent agent" in system and SUMMARY_MARKER in system
    assert all(f"`{kind.value}" in system for kind in ActionKind)
    assert "Sites you will need, in this order: kiwix, shop." in system
    assert "http://wiki.mmina.test/kiwix/" in system and "http://shop.mmina.test/" in system
    assert all(SUMMARY_MARKER in m["content"] for m in messages if m["role"] == "assistant")
    step = messages[-1]["content"]
    assert step.startswith(f"OBJECTIVE: {TASK.intent}\nURL: http://wiki.mmina.test/kiwix/\n")
    assert '[10] searchbox "Search"' in step and step.endswith("PREVIOUS ACTIONS:\nNone")


def test_observation_is_cut_at_a_line_within_the_budget() -> None:
    tree = "\n".join(f'[{i}] link "item {i}"' for i in range(1000))
    cut = truncate(tree, 500)
    assert cut == truncate(tree, 500) and cut.startswith('[0] link "item 0"\n')
    kept, note = cut.rsplit("\n", 1)
    assert len(kept) <= 500 and tree.startswith(kept + "\n")
    assert note == f"[... {len(tree) - len(kept)} more characters of the page not shown]"
    assert truncate("short", 500) == "short"


def test_caption_mode_lists_in_view_images() -> None:
    agent = OpenAIAgent(AgentSettings(model="m", input_mode="caption"), client=None)
    agent.reset(TASK)
    flag = PageImage(
        src="http://wiki.mmina.test/kiwix/I/Flag.png",
        alt="Flag of Solaria",
        x=870.0,
        y=198.8,
        width=240.0,
        height=180.0,
    )
    step = agent.messages(_observation(images=[flag]))[-1]["content"]
    assert "IMAGES:\nimage [Flag of Solaria] at (870,199): Flag of Solaria\n" in step


def test_openai_captioner_crops_the_screenshot_and_caches(tmp_path: Path) -> None:
    page = io.BytesIO()
    Image.new("RGB", (300, 200), "white").save(page, "JPEG")
    image = PageImage(src="http://x/i.png", alt="alt", x=10.0, y=20.0, width=50.0, height=40.0)
    with FakeOpenAI() as server:
        captioner = OpenAICaptioner(client_for(_settings(server)), "vision-model")
        assert captioner.caption(image, page.getvalue()) == CAPTION
        assert captioner.caption(image, page.getvalue()) == CAPTION
        assert captioner.caption(image, None) == "alt"
    assert len(server.requests) == 1 and server.requests[0]["model"] == "vision-model"
    crop = Image.open(io.BytesIO(base64.b64decode(image_urls(server.requests[0])[0].split(",", 1)[1])))
    assert crop.format == "JPEG" and crop.size == (50, 40)


def test_recorder_stores_captions_the_agent_then_sees(tmp_path: Path) -> None:
    """--captioner openai: every in-view image of every step gets the vision model's words."""
    with FakeOpenAI() as server:
        summary = _record(
            tmp_path / "store",
            _settings(server, captioner="openai", caption_model="vision-model", input_mode="caption"),
            task_ids=("shopping/1",),
        )
    assert summary.episodes[0].status == "completed"
    captions = _rows(tmp_path / "store", "select unnest(images).caption from steps")
    assert captions and all(c == (CAPTION,) for c in captions)
    assert any(r["model"] == "vision-model" for r in server.requests)
    prompts_with_images = [
        r
        for r in server.requests
        if r["model"] == "fake-model" and f": {CAPTION}" in str(r["messages"][-1]["content"])
    ]
    assert prompts_with_images, "the agent's caption mode shows the recorder's captions"


# -- settings errors: one line, nothing written --------------------------------------------------


def test_missing_model_or_key_is_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AgentError, match="needs --model NAME"):
        record_run(Store.open(tmp_path / "s", create=True), RecordConfig(agent="openai"))
    monkeypatch.setenv("OPENAI_API_KEY", "")
    with pytest.raises(AgentError, match="set OPENAI_API_KEY"):
        make_agent("openai", AgentSettings(model="m"))
    result = CliRunner().invoke(
        cli, ["record", "--agent", "openai", "--model", "m", "--store", str(tmp_path / "s")]
    )
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "OPENAI_API_KEY" in result.output
    assert not (tmp_path / "s").exists()


def test_errors_the_client_does_not_retry_fail_at_once() -> None:
    with FakeOpenAI(always_fail=True, fail_status=401) as server:
        agent = make_agent("openai", _settings(server, max_retries=3))
        agent.reset(TASK)
        with pytest.raises(AgentError, match=r"^model endpoint failed: Error code: 401"):
            agent.act(_observation())
    assert len(server.requests) == 1


# -- real recordings -----------------------------------------------------------------------------


def test_openai_agent_completes_the_task_and_records_outputs_tokens_and_cost(tmp_path: Path) -> None:
    with FakeOpenAI() as server:
        summary = _record(tmp_path / "store", _settings(server, price_input=2.5, price_output=10.0))
    episode = summary.episodes[0]
    assert (episode.status, episode.stop_reason, episode.live_hops) == ("completed", "stop", 2)
    assert episode.final_answer == "$23.75"
    steps = _rows(
        tmp_path / "store",
        """select model_output, action, prompt_tokens, completion_tokens, cost_usd
                                         from steps order by step_index""",
    )
    replies = [r["_reply"] for r in server.requests]
    assert [s[0] for s in steps] == replies and len(steps) == episode.n_steps == 6
    assert all(s[2:4] == (PROMPT_TOKENS, COMPLETION_TOKENS) and s[4] == pytest.approx(0.0033) for s in steps)
    assert steps[-1][1] == "stop [$23.75]"
    totals = _rows(tmp_path / "store", "select prompt_tokens, completion_tokens, cost_usd from episodes")[0]
    assert totals[:2] == (6 * PROMPT_TOKENS, 6 * COMPLETION_TOKENS) and totals[2] == pytest.approx(6 * 0.0033)
    first, last = server.requests[0], server.requests[-1]
    assert first["model"] == "fake-model" and first["temperature"] == 0.0 and first["max_tokens"] == 1024
    assert first["_authorization"] == f"Bearer {API_KEY}"
    assert "autonomous intelligent agent" in first["messages"][0]["content"]
    assert TASK.intent in last_user_text(first) and 'searchbox "Search"' in last_user_text(first)
    assert "PREVIOUS ACTIONS:\n1. type [" in last_user_text(server.requests[1])
    assert "5. click [" in last_user_text(last), "the last five actions are shown"


def test_cli_options_reach_the_request_and_multimodal_attaches_the_screenshot(tmp_path: Path) -> None:
    with FakeOpenAI() as server:
        result = CliRunner().invoke(
            cli,
            [
                "record",
                "--agent",
                "openai",
                "--model",
                "vision-model",
                "--base-url",
                server.url,
                "--input-mode",
                "multimodal",
                "--temperature",
                "0.5",
                "--task",
                "normal/1",
                "--max-steps",
                "1",
                "--store",
                str(tmp_path / "store"),
            ],
        )
    assert result.exit_code == 0, result.output
    probe, body = server.requests[:2]  # the endpoint check before the run, then the first step
    assert (probe["model"], probe["max_tokens"], len(probe["messages"])) == ("vision-model", 1, 1)
    assert body["model"] == "vision-model" and body["temperature"] == 0.5
    urls = image_urls(body)
    assert len(urls) == 1 and urls[0].startswith("data:image/jpeg;base64,")
    screenshot = Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1])))
    assert screenshot.format == "JPEG" and screenshot.size == (1280, 2048)
    assert "OBSERVATION:\n" in last_user_text(body)


def test_rate_limits_are_retried_and_caption_mode_lists_images(tmp_path: Path) -> None:
    with FakeOpenAI(fail_first=2, fail_status=429) as server:
        summary = _record(
            tmp_path / "store", _settings(server, input_mode="caption", max_retries=2), max_steps=3
        )
    assert summary.episodes[0].status == "completed" and summary.episodes[0].n_steps == 3
    assert len(server.requests) == 5 and len(server.chat_requests) == 3
    article = last_user_text(server.chat_requests[2])
    assert "URL: http://wiki.mmina.test/kiwix/A/Solaria" in article
    assert "IMAGES:\nimage [Flag of Solaria] at (" in article


def test_without_patience_an_endpoint_failure_errors_the_episode_and_the_run_goes_on(tmp_path: Path) -> None:
    suite = tmp_path / "suite" / "normal"
    suite.mkdir(parents=True)
    for number in (1, 2):
        shutil.copy(Path(load_suite().path) / "normal" / "1.json", suite / f"{number}.json")
    with FakeOpenAI(
        fail_first=2, fail_status=500
    ) as server:  # (with patience, tests/test_endpoint_faults.py)
        summary = _record(
            tmp_path / "store",
            replace(_settings(server), endpoint_patience_s=0),
            max_steps=1,
            tasks=str(tmp_path / "suite"),
            task_ids=(),
        )
    failed, next_one = summary.episodes
    assert (failed.task_id, failed.status, failed.n_steps) == ("normal/1", "error", 0)
    assert failed.error.startswith("model endpoint failed after 1 retry: ") and "500" in failed.error
    assert (next_one.task_id, next_one.status, next_one.stop_reason) == ("normal/2", "completed", "max_steps")
    assert len(server.requests) == 3
    assert _rows(tmp_path / "store", "select status from episodes order by task_id") == [
        ("error",),
        ("completed",),
    ]


def test_unparsable_replies_are_recorded_and_end_the_episode(tmp_path: Path) -> None:
    with FakeOpenAI(reply="I would rather not say.") as server:
        summary = _record(tmp_path / "store", _settings(server))
    assert summary.episodes[0].stop_reason == "unparsable_output" and summary.episodes[0].n_steps == 3
    rows = _rows(tmp_path / "store", "select model_output, action from steps")
    assert rows == [("I would rather not say.", None)] * 3
    assert (
        "PREVIOUS ACTIONS:\n1. (a reply without a valid action)\n2. (a reply without a valid action)"
        in last_user_text(server.requests[-1])
    )


def test_memory_puts_two_earlier_trajectories_into_the_prompt(
    recorded: tuple[Path, RunSummary], recorded_copy: Path
) -> None:
    with FakeOpenAI() as server:
        earlier = _record(recorded_copy, _settings(server), max_steps=2)
        server.requests.clear()
        _record(recorded_copy, _settings(server, memory=2), max_steps=1)
    system = server.requests[0]["messages"][0]["content"]
    memory = system[system.index("Earlier trajectories of similar tasks") :]
    assert "Trajectory 1 " in memory and "Trajectory 2 " in memory and "Trajectory 3 " not in memory
    assert f"run {recorded[1].run_id}, 6 steps" in memory and f"run {earlier.run_id}, 2 steps" in memory
    oracle_actions = [
        r[0]
        for r in _rows(
            recorded_copy,
            f"""select action from steps
        where run_id = '{recorded[1].run_id}' order by step_index""",
        )
    ]
    assert all(f". {action} (on " in memory for action in oracle_actions)
    assert 'answer "Vell Mountain Tea costs $23.75"' in memory and "ended by max_steps, 1/2 hops" in memory


# -- memory ranking and rendering, without a browser ---------------------------------------------


def _trajectory(episode: str, suite: str, intent: str, minutes: int) -> Trajectory:
    return Trajectory(
        run_id="run-a",
        episode_id=episode,
        task_id=f"{suite}/1",
        suite=suite,
        intent=intent,
        stop_reason="stop",
        final_answer="42",
        n_steps=3,
        n_hops=2,
        live_hops=2,
        ended_at=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes),
    )


def test_memory_ranks_the_family_first_by_similarity_or_recency() -> None:
    task = replace(TASK, intent="find the price of Vell tea in the shop")
    candidates = [
        _trajectory("old-same", "normal", "find the price of Vell tea in the shop", 0),
        _trajectory("new-other", "normal", "book a train to Ostrand", 10),
        _trajectory("shopping", "shopping", "find the price of Vell tea in the shop", 20),
    ]
    assert [t.episode_id for t in rank(candidates, task, 2, "similarity")] == ["old-same", "new-other"]
    assert [t.episode_id for t in rank(candidates, task, 2, "recency")] == ["new-other", "old-same"]
    assert [t.episode_id for t in rank(candidates, task, 3, "recency")][-1] == "shopping"
    assert similarity("a b", "b c") == pytest.approx(1 / 3) and similarity("", "") == 0.0


def test_memory_rendering_is_compact_and_capped() -> None:
    steps = [
        {
            "step_index": i,
            "url": "http://shop.mmina.test/search?q=tea",
            "action": f"click [{i}]",
            "action_error": None,
        }
        for i in range(50)
    ]
    steps[1] = {**steps[1], "action": None, "action_error": "unknown action"}
    limits = MemoryLimits(max_actions=5, max_chars=700)
    text = render(
        [_trajectory("e1", "normal", "x", 0), _trajectory("e2", "normal", "y", 1)], [steps, steps], limits
    )
    assert "1. click [0] (on shop.mmina.test/search?q=tea)" in text and "2. (unparsable output)" in text
    assert "... (45 more steps)" in text and "50. click [49]" in text
    assert "Trajectory 1 " in text and "Trajectory 2 " not in text and len(text) <= 700


# -- the human agent -----------------------------------------------------------------------------


def test_human_agent_reprompts_on_empty_lines_and_stops_at_end_of_input() -> None:
    out = io.StringIO()
    agent = HumanAgent(io.StringIO("\n  \nclick [10]\n"), out)
    agent.reset(TASK)
    assert agent.act(_observation()).output == "click [10]"
    assert out.getvalue().count(PROMPT) == 3 and "URL: http://wiki.mmina.test/kiwix/" in out.getvalue()
    with pytest.raises(AgentError, match="no more input"):
        agent.act(_observation())


def test_human_agent_records_typed_actions_through_piped_stdin(tmp_path: Path) -> None:
    """A real ``mmina record --agent human``: one empty line, one bad line, then the right actions."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmina",
            "record",
            "--agent",
            "human",
            "--task",
            "normal/1",
            "--store",
            str(tmp_path / "store"),
            "--format",
            "json",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).parent.parent,
    )
    terminal = _Terminal(process)
    scripted = ["", "jump to the shop"]
    while terminal.next_prompt():
        line = scripted.pop(0) if scripted else next_action(terminal.observation())
        process.stdin.write((line + "\n").encode())
        process.stdin.flush()
    assert process.wait(timeout=60) == 0, terminal.text()
    steps = _rows(
        tmp_path / "store", "select model_output, action, action_error from steps order by step_index"
    )
    assert steps[0][:2] == ("jump to the shop", None) and "unknown action" in steps[0][2]
    assert [s[1].split(" ")[0] for s in steps[1:]] == ["type", "click", "goto", "type", "click", "stop"]
    assert _rows(tmp_path / "store", "select final_answer, live_hops from episodes") == [("$23.75", 2)]


class _Terminal:
    """What the recorder printed on stderr, read on a thread so the pipe never fills up."""

    def __init__(self, process: subprocess.Popen, timeout: float = 240.0) -> None:
        self.process, self.deadline = process, time.monotonic() + timeout
        self._data, self._seen = b"", 0
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while chunk := os.read(self.process.stderr.fileno(), 65536):
            with self._changed:
                self._data += chunk
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def next_prompt(self) -> bool:
        """Wait for the next ``action>`` prompt; False once the process has ended."""
        with self._changed:
            while self._data.count(PROMPT.encode()) <= self._seen:
                if self.process.poll() is not None or time.monotonic() > self.deadline:
                    return False
                self._changed.wait(0.2)
            self._seen += 1
            return True

    def text(self) -> str:
        return self._data.decode(errors="replace")

    def observation(self) -> str:
        """The last observation shown (from its ``--- step`` header)."""
        text = self.text()
        return text[text.rindex("\n--- step") :]


def test_prompt_site_list_is_what_the_fixture_web_serves() -> None:
    """The agent's plain list of fixture sites (it does not import the fixture web) stays in step with it."""
    from mmina.agents.prompts import FIXTURE_WEBSITES
    from mmina.fixtures.web.kiwix import viewer_url
    from mmina.fixtures.web.sites import site_classes

    served = tuple((f"http://{s.label}.mmina.test{s.chrome.home}", s.chrome.brand) for s in site_classes())
    assert FIXTURE_WEBSITES == (*served, (viewer_url(), "MMInA Wiki in the Kiwix viewer"))
