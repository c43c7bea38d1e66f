"""An endpoint's faults are not the agent's (issue 53, item 1): calls held through an outage
(connections refused, a 503 storm), rate limits adapting how many calls are in flight, a run that
stops cleanly when the endpoint stays down past its patience and then resumes to every task
exactly once. Against the local OpenAI-compatible server (real HTTP), taken down and brought
back while real episodes run."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mmina.models.endpoint_gate import gate_for
from mmina.models.model_client import Deadlines, ModelClient, ModelError, ModelUnavailable
from mmina.store import Store
from tests.fake_openai import FakeOpenAI
from tests.store_helpers import REPO_ROOT

SLACK_S = 8.0
PROMPT = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _when(condition: Callable[[], bool], then: Callable[[], None], within_s: float = 120) -> threading.Thread:
    """``then()`` on a thread as soon as ``condition()`` holds (polled; at most ``within_s``)."""

    def run() -> None:
        deadline = time.monotonic() + within_s
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        then()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _calls(server: FakeOpenAI, deadlines: Deadlines, count: int, each: int = 1) -> list[object]:
    """``count`` threads each making ``each`` calls in a row; each call's result, or the exception it raised."""
    client = ModelClient(server.url, deadlines)

    def call(_: int) -> list[object]:
        results: list[object] = []
        for _call in range(each):
            try:
                results.append(client.complete(model="m", messages=PROMPT))
            except ModelError as exc:
                results.append(exc)
        return results

    with ThreadPoolExecutor(count) as pool:
        return [result for results in pool.map(call, range(count)) for result in results]


def test_calls_wait_out_an_outage_and_all_answer() -> None:
    with FakeOpenAI(delay_s=0.2) as server:

        def outage() -> None:
            server.go_down()
            time.sleep(4)
            server.come_back()

        _when(lambda: server.received >= 10, outage)
        started = time.monotonic()
        results = _calls(server, Deadlines(call_s=30, max_retries=1, patience_s=60), 8, each=4)
    assert all(not isinstance(r, Exception) for r in results), results
    assert max(r.waited_s for r in results) > 0  # type: ignore[attr-defined]
    assert time.monotonic() - started < 4 + 30 + SLACK_S
    gate = gate_for(server.url, 60)
    assert gate.outages >= 1 and gate.down_since is None


def test_a_503_storm_is_waited_out() -> None:
    with FakeOpenAI(unavailable=True) as server:
        threading.Timer(3.0, lambda: setattr(server, "unavailable", False)).start()
        results = _calls(server, Deadlines(call_s=30, max_retries=1, patience_s=60), 4)
    assert all(not isinstance(r, Exception) for r in results), results
    assert sum(r.retries for r in results) >= 4  # type: ignore[attr-defined]


def test_an_endpoint_down_past_its_patience_fails_every_call_as_unavailable() -> None:
    with FakeOpenAI() as server:
        server.go_down()
        started = time.monotonic()
        results = _calls(server, Deadlines(call_s=10, max_retries=0, patience_s=3), 3)
        elapsed = time.monotonic() - started
        server.come_back()
    assert all(isinstance(r, ModelUnavailable) for r in results), results
    assert "gave no answer for 3 s (--endpoint-patience)" in str(results[0])
    assert 3 <= elapsed < 3 + SLACK_S


def test_without_patience_a_call_fails_as_before() -> None:
    with FakeOpenAI(always_fail=True, fail_status=503) as server:
        [failed] = _calls(server, Deadlines(call_s=30, max_retries=1, patience_s=0), 1)
    assert isinstance(failed, ModelError) and not isinstance(failed, ModelUnavailable)
    assert str(failed).startswith("model endpoint failed after 1 retry: Error code: 503")


def test_a_rate_limited_endpoint_gets_fewer_calls_at_once_and_all_answer() -> None:
    with FakeOpenAI(delay_s=0.3, serves_at_once=2) as server:
        results = _calls(server, Deadlines(call_s=60, max_retries=2, patience_s=120), 12)
        gate = gate_for(server.url, 120)
    assert all(not isinstance(r, Exception) for r in results), results
    assert server.limited > 0 and gate.totals.limited > 0
    assert server.answered == 12


def test_a_request_the_server_fails_while_it_answers_others_is_not_held() -> None:
    with FakeOpenAI(delay_s=0.1) as server:
        original = server.respond

        def respond(body: dict) -> tuple[int, dict]:
            if body["messages"][0]["content"] == "poison":
                body["_failed"] = True
                return 500, {"error": {"message": "this prompt breaks the server"}}
            return original(body)

        server.respond = respond  # type: ignore[method-assign]
        client = ModelClient(server.url, Deadlines(call_s=30, max_retries=0, patience_s=120))
        stop = threading.Event()

        def others() -> None:
            while not stop.is_set():
                client.complete(model="m", messages=PROMPT)

        helper = threading.Thread(target=others, daemon=True)
        helper.start()
        started = time.monotonic()
        with pytest.raises(ModelError) as failed:
            client.complete(model="m", messages=[{"role": "user", "content": "poison"}])
        stop.set()
        helper.join()
    assert not isinstance(failed.value, ModelUnavailable) and "500" in str(failed.value)
    assert time.monotonic() - started < 10 + SLACK_S


def _record(store: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mmina",
            "record",
            "--store",
            str(store),
            "--agent",
            "openai",
            "--model",
            "fake",
            "--base-url",
            url,
            "--max-steps",
            "3",
            "--no-screenshots",
            "--format",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
        env={**__import__("os").environ, "OPENAI_API_KEY": "sk-local-test-key"},
    )


TASKS = "normal/1,normal/2,normal/3,normal/4,normal/5,normal/6"


def test_a_run_through_an_outage_completes_every_episode(tmp_path: Path) -> None:
    with FakeOpenAI(delay_s=0.3) as server:

        def outage() -> None:  # longer than the client's own retries (4, backoff up to 8 s) cover
            server.go_down()
            time.sleep(15)
            server.come_back()

        _when(lambda: server.received >= 4, outage)
        done = _record(tmp_path / "store", server.url, "--task", TASKS, "--concurrency", "4")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = Store.open(tmp_path / "store").read("episodes").to_pylist()
    assert sorted(r["task_id"] for r in rows) == sorted(TASKS.split(","))
    assert [r["error"] for r in rows if r["status"] == "error"] == []
    summary = json.loads(done.stdout)
    faults = summary["endpoint_faults"]
    assert faults["episodes_held"] >= 1 and faults["waited_s"] > 0 and faults["retries"] >= 1
    assert sum(r["endpoint_wait_s"] for r in rows) == pytest.approx(faults["waited_s"], abs=0.01)
    listed = subprocess.run(
        [sys.executable, "-m", "mmina", "runs", "--store", str(tmp_path / "store"), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    [run] = json.loads(listed.stdout)
    assert (
        run["status"] == f"complete; endpoint: {faults['retries']} retried, {faults['waited_s']:.0f} s waited"
    )


def test_a_run_stops_when_the_endpoint_stays_down_and_resumes_to_every_task_once(tmp_path: Path) -> None:
    with FakeOpenAI(delay_s=0.3) as server:
        _when(lambda: server.received >= 4, server.go_down)
        stopped = _record(
            tmp_path / "store",
            server.url,
            "--task",
            TASKS,
            "--concurrency",
            "2",
            "--endpoint-patience",
            "3",
            "--run-id",
            "campaign",
        )
        assert stopped.returncode != 0
        assert (
            "mmina record --resume --run-id campaign" in stopped.stderr and "Traceback" not in stopped.stderr
        )
        stored = Store.open(tmp_path / "store").read("episodes").to_pylist()
        assert all(r["status"] != "error" for r in stored)  # the outage failed no episode
        server.come_back()
        resumed = _record(
            tmp_path / "store", server.url, "--concurrency", "2", "--resume", "--run-id", "campaign"
        )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = Store.open(tmp_path / "store").read("episodes").to_pylist()
    assert sorted(r["task_id"] for r in rows) == sorted(TASKS.split(","))
    assert all(r["status"] != "error" for r in rows)


def test_a_budget_stops_new_episodes_and_resume_continues(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with FakeOpenAI() as server:  # 1,200 prompt tokens a call at $1,000 per million: $1.20 a call
        costly = _record(
            store,
            server.url,
            "--task",
            TASKS,
            "--max-steps",
            "2",
            "--price-in",
            "1000",
            "--max-cost",
            "5",
            "--run-id",
            "budget",
        )
        assert costly.returncode == 0, costly.stderr[-2000:]
        summary = json.loads(costly.stdout)
        assert summary["stopped"] == "max_cost" and summary["finished"] == 3 and summary["left"] == 3
        assert summary["cost_usd"] >= 5
        timed = _record(tmp_path / "other", server.url, "--task", TASKS, "--max-hours", "0.0001")
        timed_out = json.loads(
            timed.stdout
        )  # 0.36 s: spent before the browser is up, or after its first episode
        assert timed_out["stopped"] == "max_hours" and timed_out["finished"] <= 1 and timed_out["left"] >= 5
        resumed = _record(store, server.url, "--max-steps", "2", "--resume", "--run-id", "budget")
    assert resumed.returncode == 0 and json.loads(resumed.stdout)["stopped"] is None
    rows = Store.open(store).read("episodes").to_pylist()
    assert sorted(r["task_id"] for r in rows) == sorted(TASKS.split(","))
