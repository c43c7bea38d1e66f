"""The epoch bench's layers (``bench/layers.py``): a recorded episode is done again by a bare
Playwright harness and by the recorder alone, each with gotos and with the episode's own actions.

What would silently change the figures: an episode read back in another order or missing a
step, and actions that fail on the redo (the harness would then stay on the first page and
cost less than the recording did). So each way's CPU is counted, and every way must reach
every page the recording observed (the recorder's in its HAR, the bare harness's among the
URLs of the pages it observed).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from bench.layers import ACTIONS, BARE, BARE_ACTIONS, GOTOS, layers
from bench.layers import recorded as recorded_steps
from mmina.recorder.recording import RunSummary
from mmina.store import Store
from mmina.store.sql import run_query


def test_the_layers_redo_the_recorded_episode_and_reach_every_page(
    recorded: tuple[Path, RunSummary], fixture_web, tmp_path: Path
) -> None:
    store_path, summary = recorded
    store = Store.open(store_path)
    episodes = recorded_steps(store, summary.run_id)
    rows = run_query(
        store,
        f"select url, action, target_box from steps where run_id = '{summary.run_id}' order by step_index",
    ).rows
    assert episodes == [[(url, action, box) for url, action, box in rows]]
    assert {a.split(" ")[0] for _, a, _ in episodes[0]} >= {"type", "stop"}  # typed, not only gone to
    assert all(box for _, a, box in episodes[0] if a.startswith(("click", "type")))

    split_up = layers(episodes, tuple(fixture_web.chromium_args()), {}, 1, 0.0, tmp_path)

    assert list(split_up) == [BARE, BARE_ACTIONS, GOTOS, ACTIONS]
    for split in split_up.values():
        assert split.seconds.get("renderer", 0.0) > 0 and split.seconds.get("browser", 0.0) > 0
    pages = {url for url, _, _ in episodes[0]}
    for way in ("gotos", "actions"):
        [har] = tmp_path.glob(f"{way}-*.har.zip")
        with zipfile.ZipFile(har) as archive:
            requested = {e["request"]["url"] for e in json.loads(archive.read("har.har"))["log"]["entries"]}
        assert pages <= requested, way
        [urls] = tmp_path.glob(f"bare-{way}-*.urls")
        assert pages <= set(urls.read_text().split()), f"bare {way}"
