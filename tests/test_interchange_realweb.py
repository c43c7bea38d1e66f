"""A real application captured by pywb's recording mode, imported, and re-run offline.

Datasette (a real application from PyPI, new random data) is driven by the oracle through
pywb's record mode (``/cap/record/mp_/<url>``): pywb, not mmina, writes the WARC. That WARC is
imported with tasks pointing at the application's own URL, and the same scripted episode is
replayed on the archive: no connection reaches the application, no request is unmatched, the
answer is the same, and every step shows the page the capture showed inside pywb's frame
(same URL, every line of its tree).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.recorder.recording import RecordConfig, record_run
from mmina.replayer.replays import replay_agent
from mmina.store import Store
from tests.interchange_tools import pywb
from tests.realweb.apps import DATASETTE, RunningApp

COLLECTION = "cap"


def _suite(folder: Path, start_url: str) -> Path:
    suite = folder / "realweb"
    suite.mkdir(parents=True)
    (suite / "1.json").write_text(json.dumps({**DATASETTE.task(1), "start_url": start_url}))
    return suite


def _steps(store: Store, run_id: str) -> list[dict]:
    rows = store.read("steps", run_id=run_id, columns=["step_index", "url", "tree_text"]).to_pylist()
    return sorted(rows, key=lambda s: s["step_index"])


@pytest.mark.heavy  # ~40-60 s: Datasette, pywb recording, two Chromium runs (MMINA_HEAVY=1)
def test_a_pywb_capture_of_datasette_replays_offline_with_the_same_answers(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    with RunningApp(DATASETTE, tmp_path / "app") as app:
        site = f"http://127.0.0.1:{app.relay_port}"
        with pywb(tmp_path / "pywb", COLLECTION, [], "--record", "--live") as archive:
            prefix = f"{archive}/{COLLECTION}/record/mp_/"
            capture = record_run(
                store,
                RecordConfig(
                    tasks=str(_suite(tmp_path / "capture", prefix + site + "/")),
                    agent="oracle",
                    run_id="capture",
                ),
            )
        [captured] = capture.episodes
        assert captured.final_answer == "done" and captured.n_steps > 5
        [warc] = list((tmp_path / "pywb" / "collections" / COLLECTION / "archive").glob("*.warc.gz"))
        result = CliRunner().invoke(
            cli,
            [
                "import",
                "warc",
                str(warc),
                "--tasks",
                str(_suite(tmp_path / "offline", site + "/")),
                "--run-id",
                "imported",
                "--store",
                str(store.root),
            ],
        )
        assert result.exit_code == 0, result.output
        before = app.connections
        report = replay_agent(Store.open(store.root), "oracle", run_id="imported")
        assert app.connections == before
    [episode] = report.episodes
    assert (episode.result.final_answer, episode.result.status, report.unmatched) == ("done", "completed", 0)
    recorded, replayed = _steps(store, "capture"), _steps(store, report.replay_run)
    assert [re.sub(r"^.*?/record/(mp_/)?", "", s["url"]) for s in recorded] == [s["url"] for s in replayed]
    for capture_step, replay_step in zip(
        recorded, replayed
    ):  # the capture showed the page inside pywb's frame
        assert _lines(replay_step["tree_text"]) <= _lines(capture_step["tree_text"]), replay_step["url"]


def _lines(tree: str) -> set[str]:
    """A tree's lines without ids and depth (a page shown in a frame is deeper), link targets
    left out (pywb rewrites them into its own URL space)."""
    return {
        re.sub(r"\[\w+\] ", "", line.strip())
        for line in tree.splitlines()
        if line.strip() and not line.strip().startswith("/url:")
    }
