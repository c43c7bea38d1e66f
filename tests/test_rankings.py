"""Rankings that survive replay (issue 54, item 5): agents of clearly different skill — the
oracle, the heuristic and a noisy oracle — each run on the live fixture web and on the archive
of a reference run (``replay --agent``), then ``mmina rankings`` gives each agent's live and
archived task SR, the change, and Kendall's tau of the two rankings with its interval. Real
episodes in Chromium; tau is checked against scipy."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from scipy.stats import kendalltau

from mmina.analysis.replay_ranking import AgentPair, Side, _same_order
from tests.store_helpers import REPO_ROOT

TASKS = "normal/1,normal/2"
AGENTS = {"oracle": (), "heuristic": (), "noisy": ("--agent", "oracle", "--error-rate", "0.6", "--seed", "3")}


def _mmina(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "mmina", *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600
    )
    assert (done.returncode == 0) == ok, done.stderr[-2000:]
    return done


def _agent(name: str) -> list[str]:
    return list(AGENTS[name]) or ["--agent", name]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("rankings") / "store"
    common = ["--store", str(root), "--max-steps", "8"]
    for name in AGENTS:  # the oracle's live run is the reference whose archive the others replay on
        _mmina(
            "record", *common, "--no-screenshots", "--task", TASKS, "--run-id", f"{name}-live", *_agent(name)
        )
    for name in AGENTS:
        _mmina("replay", *common, "--run", "oracle-live", "--run-id", f"{name}-archived", *_agent(name))
    yield root


def _pairs() -> list[str]:
    return [arg for name in AGENTS for arg in ("--pair", f"{name}-live", f"{name}-archived")]


def test_the_archived_web_keeps_the_ranking_of_agents_of_different_skill(store: Path) -> None:
    shift = json.loads(_mmina("rankings", "--store", str(store), *_pairs(), "--format", "json").stdout)
    assert [(a["live"]["run_id"], a["archived"]["run_id"]) for a in shift["agents"]] == [
        (f"{name}-live", f"{name}-archived") for name in AGENTS
    ]
    oracle, heuristic, _noisy = shift["agents"]
    assert oracle["live"]["task_sr"] == oracle["archived"]["task_sr"] == 1.0  # the oracle passes on both webs
    assert heuristic["live"]["tasks"] == heuristic["archived"]["tasks"] == 2
    live = [a["live"]["task_sr"] for a in shift["agents"]]
    archived = [a["archived"]["task_sr"] for a in shift["agents"]]
    expected = kendalltau(live, archived).statistic  # NaN where every rate ties
    assert shift["tau"] == pytest.approx(expected) if expected == expected else shift["tau"] is None
    assert shift["same_order"] == (shift["tau"] == pytest.approx(1.0))
    for agent in shift["agents"]:
        assert agent["change"] == pytest.approx(agent["archived"]["task_sr"] - agent["live"]["task_sr"])
        assert agent["live"]["low"] <= agent["live"]["task_sr"] <= agent["live"]["high"]
    table = _mmina("rankings", "--store", str(store), *_pairs()).stdout
    assert "Kendall's tau of the rankings" in table and "oracle-archived" in table
    rows = list(
        csv.DictReader(
            io.StringIO(_mmina("rankings", "--store", str(store), *_pairs(), "--format", "csv").stdout)
        )
    )
    assert [float(r["archived_sr"]) for r in rows] == archived


def test_bad_pairs_are_one_line_errors(store: Path) -> None:
    one = _mmina("rankings", "--store", str(store), "--pair", "oracle-live", "oracle-archived", ok=False)
    assert "two agents or more" in one.stderr and "Traceback" not in one.stderr
    unknown = _mmina(
        "rankings",
        "--store",
        str(store),
        "--pair",
        "oracle-live",
        "never",
        "--pair",
        "heuristic-live",
        "heuristic-archived",
        ok=False,
    )
    assert unknown.stderr.startswith("Error:") and "never" in unknown.stderr


def _pair(name: str, live: tuple[int, int], archived: tuple[int, int]) -> AgentPair:
    return AgentPair(name, Side(f"{name}-l", *live), Side(f"{name}-a", *archived))


def test_the_order_is_the_same_only_when_every_two_agents_keep_theirs() -> None:
    kept = [_pair("a", (9, 10), (8, 10)), _pair("b", (5, 10), (4, 10)), _pair("c", (1, 10), (2, 10))]
    assert _same_order(kept)
    swapped = [_pair("a", (9, 10), (3, 10)), _pair("b", (5, 10), (4, 10))]
    tied = [_pair("a", (9, 10), (4, 10)), _pair("b", (5, 10), (4, 10))]  # a tie on one side only
    assert not _same_order(swapped) and not _same_order(tied)
