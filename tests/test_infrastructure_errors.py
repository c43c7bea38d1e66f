"""Errors that were not the agent's are re-run (issue 53, item 2): every episode error is stored
as the infrastructure's (the browser or its driver died, the model endpoint failed for everyone)
or the agent's (its model call refused, its site), reports count the infrastructure's in no rate,
and ``record --resume`` records those tasks again — the new episode superseding the old one,
which stays in the store and counts in no table; ``--rerun-errors`` re-runs the agent's too.

Real episodes in Chromium on the fixture web, the model behind the local OpenAI-compatible
server (real HTTP), and, for a browser crash, the recording's own Chromium killed mid-episode."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmina.store import Store
from mmina.tasks.taskcheck import load_suite
from tests.agents_for_tests import descendants
from tests.fake_openai import FakeOpenAI, last_user_text
from tests.store_helpers import REPO_ROOT

TASKS = ("normal/1", "normal/2", "normal/3")
INTENTS = {t.task_id: t.intent for t in load_suite(None, list(TASKS)).tasks}


def _mmina(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmina", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
        env={**os.environ, "OPENAI_API_KEY": "sk-local-test-key"},
    )


def _record(store: Path, url: str, *extra: str) -> dict[str, Any]:
    done = _mmina(
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
        "--endpoint-patience",
        "0",
        "--model-retries",
        "0",
        "--run-id",
        "campaign",
        "--format",
        "json",
        *extra,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return json.loads(done.stdout)


def _json(*args: str) -> Any:
    done = _mmina(*args, "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _episodes(store: Path) -> dict[str, list[dict[str, Any]]]:
    """Each task's episodes, oldest first."""
    found: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(
        Store.open(store).read("episodes").to_pylist(), key=lambda r: (r["attempt"], r["started_at"])
    ):
        found.setdefault(row["task_id"], []).append(row)
    return found


def _failing(
    server: FakeOpenAI, fails: Callable[[dict[str, Any]], tuple[int, dict[str, Any]] | None]
) -> None:
    """Answer a request with ``fails(body)`` when it gives an answer, else as usual."""
    usual = server.respond

    def respond(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        failure = fails(body)
        if failure is None:
            return usual(body)
        body["_failed"] = True
        return failure

    server.respond = respond  # type: ignore[method-assign]


def _for_task(task_id: str, body: dict[str, Any]) -> bool:
    return body.get("max_tokens") != 1 and INTENTS[task_id] in last_user_text(body)  # not the endpoint check


def test_infrastructure_errors_count_in_no_rate_and_resume_records_them_again(tmp_path: Path) -> None:
    store, outage, refusing = tmp_path / "store", [True], [True]

    def fails(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        if (
            _for_task("normal/1", body) and outage[0]
        ):  # the endpoint down for everyone, with no patience to wait
            return 503, {"error": {"message": "injected: the server is unavailable"}}
        if _for_task("normal/3", body) and refusing[0]:  # this request refused for its own sake: the agent's
            return 400, {"error": {"message": "injected: this prompt is refused"}}
        return None

    with FakeOpenAI() as server:
        _failing(server, fails)
        first = _record(store, server.url, "--task", ",".join(TASKS))
        episodes = _episodes(store)
        [endpoint], [fine], [refused] = episodes["normal/1"], episodes["normal/2"], episodes["normal/3"]
        assert (endpoint["status"], endpoint["error_kind"]) == ("error", "infrastructure"), endpoint["error"]
        assert endpoint["error"].startswith("model endpoint failed") and "503" in endpoint["error"]
        assert (fine["status"], fine["error_kind"], fine["supersedes"]) == ("completed", None, None)
        assert (refused["status"], refused["error_kind"]) == ("error", "agent") and "400" in refused["error"]
        assert (first["errors"], first["infrastructure_errors"]) == (1, 1)

        report = _json("report", "--store", str(store), "--run", "campaign")
        assert (report["tasks"], report["infrastructure_errors"]) == (
            2,
            1,
        )  # the endpoint's failure is in no rate
        [run] = _json("runs", "--store", str(store))
        assert (run["tasks_done"], run["errors"]) == (2, 2), run

        outage[0] = False
        resumed = _record(store, server.url, "--resume")
        assert resumed["rerun"] == ["normal/1"] and resumed["skipped"] == ["normal/2", "normal/3"]
        again = _episodes(store)
        old, new = again["normal/1"]
        assert (new["attempt"], new["supersedes"], new["status"], new["error_kind"]) == (
            1,
            old["episode_id"],
            "completed",
            None,
        )  # the same repeat, again
        report = _json("report", "--store", str(store), "--run", "campaign")
        assert (report["tasks"], report["infrastructure_errors"]) == (3, 0)  # normal/1 once: its new episode
        [run] = _json("runs", "--store", str(store))
        assert (run["episodes"], run["tasks_done"], run["errors"]) == (4, 3, 1), run
        counted = _json(
            "sql",
            "--store",
            str(store),
            "SELECT episode_id FROM episode_scores WHERE evaluator = 'hops' AND task_id = 'normal/1'",
        )
        assert counted == [{"episode_id": new["episode_id"]}]

        nothing = _record(store, server.url, "--resume")  # the agent's error stays without --rerun-errors
        assert (nothing["rerun"], nothing["finished"]) == ([], 0)
        refusing[0] = False
        agents = _record(store, server.url, "--resume", "--rerun-errors")
    assert agents["rerun"] == ["normal/3"]
    old, new = _episodes(store)["normal/3"]
    assert (new["attempt"], new["supersedes"], new["status"]) == (1, old["episode_id"], "completed")


def _chromium(pid: int) -> list[int]:
    """The Chromium processes under ``pid`` (the browser and its renderers, not Playwright's driver)."""
    found = []
    for child in descendants(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"chrom" in command.split(b"\0")[0]:
            found.append(child)
    return found


def test_a_browser_killed_mid_episode_is_an_infrastructure_error_and_the_next_episode_goes_on(
    tmp_path: Path,
) -> None:
    store, killed, recorder = tmp_path / "store", [], []

    def kill_the_browser(body: dict[str, Any]) -> None:
        """At normal/2's first model call, SIGKILL the recording's Chromium; the call is then answered."""
        if _for_task("normal/2", body) and not killed:
            killed.extend(_chromium(recorder[0].pid))
            for victim in killed:
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    with FakeOpenAI() as server:
        server.script = kill_the_browser
        recorder.append(
            subprocess.Popen(
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
                    server.url,
                    "--max-steps",
                    "3",
                    "--no-screenshots",
                    "--run-id",
                    "crash",
                    "--format",
                    "json",
                    "--task",
                    ",".join(TASKS),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO_ROOT,
                env={**os.environ, "OPENAI_API_KEY": "sk-local-test-key"},
            )
        )
        out, err = recorder[0].communicate(timeout=600)
    assert recorder[0].returncode == 0 and killed, err[-3000:]
    episodes = {task: rows[-1] for task, rows in _episodes(store).items()}
    assert (episodes["normal/2"]["status"], episodes["normal/2"]["error_kind"]) == ("error", "infrastructure")
    assert [episodes[t]["status"] for t in ("normal/1", "normal/3")] == ["completed", "completed"]
    assert json.loads(out)["infrastructure_errors"] == 1
    assert "normal/2: error (infrastructure)" in err
