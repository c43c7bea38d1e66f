"""The judge audit on the fixture web: is a judge as good as a second human, and does the
leaderboard depend on the judge?

Four agents of clearly different kinds run the same nine fixture tasks (1 to 6 hops) in real
Chromium: the oracle; one that makes seeded mistakes; one that visits every page and then
answers wrong; one that answers right without visiting anything. A fifth run is the ``openai``
agent on ``normal/1`` with the model ``fake-judge`` — the judge's own model, so the audit
warns. The episodes are scored by ``must_include``, ``hops``, ``mmina_official``, ``fuzzy`` and
``keypoints`` (both judges: the tests' local OpenAI-compatible server, answering by rule), and
labelled by two *simulated* labellers (the ``hops`` verdicts, each labeller flipping 5% / 10%
of them at random, seeded) — a stand-in for people, which this machine has none of. Then
``mmina agreement --audit`` over all of it; its tables are printed, the figures kept.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from random import Random

from click.testing import CliRunner

from bench.results import Section
from mmina.agents.settings import AgentSettings
from mmina.analysis.judge_audit import Audit, audit
from mmina.evaluators.judge import JudgeSettings
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.importers.label_files import import_labels
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fake_openai import FakeOpenAI  # noqa: E402 - the tests' local OpenAI-compatible server
from tests.keypoint_judge import KeypointJudge  # noqa: E402

TASKS = (
    "wikipedia/1",
    "normal/2",
    "normal/3",
    "normal/24",
    "compare/5",
    "normal/32",
    "normal/38",
    "multi567/1",
    "multi567/4",
)
AGENTS = {
    "oracle": "oracle",
    "mistakes": "tests.agents_for_tests:SeededMistakes",
    "wrong-answer": "tests.agents_for_tests:WrongAnswer",
    "no-visit": "tests.agents_for_tests:Cheater",
}
JUDGE_MODEL = "fake-judge"
EVALUATORS = ("fuzzy", "keypoints", "must_include", "mmina_official", "human")
LABELLERS = {"alice": 0.05, "bob": 0.10}
"""Simulated labellers and how often each flips the ``hops`` verdict."""


def judges_section(work: Path, log: Callable[[str], None], quick: bool = False) -> Section:
    section = Section("judges")
    store_path = work / "store"
    tasks = TASKS[:4] if quick else TASKS
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-judge")
    with FakeOpenAI(script=KeypointJudge()) as server:
        started = time.perf_counter()
        _record(store_path, tasks, server.url, log)
        section.add(
            "recording, 4 agents x tasks + 1",
            round(time.perf_counter() - started, 1),
            "s",
            note=f"{len(tasks)} fixture tasks each",
        )
        started = time.perf_counter()
        _score(Store.open(store_path), server.url, log)
        section.add("rescoring with 5 evaluators", round(time.perf_counter() - started, 1), "s")
    _label(store_path, work)
    log("judges: mmina agreement --audit")
    started = time.perf_counter()
    result = audit(Store.open(store_path), (), EVALUATORS, resamples=1000, seed=0)
    section.add("audit (1,000 resamples)", round(time.perf_counter() - started, 2), "s")
    _figures(section, result)
    _print_tables(store_path)
    return section


def _record(store_path: Path, tasks: tuple[str, ...], judge_url: str, log: Callable[[str], None]) -> None:
    for run_id, agent in AGENTS.items():
        log(f"judges: recording {run_id}")
        record_run(
            Store.open(store_path, create=True), RecordConfig(task_ids=tasks, agent=agent, run_id=run_id)
        )
    log("judges: recording the openai agent with the judge's model")
    settings = AgentSettings(model=JUDGE_MODEL, base_url=judge_url)
    record_run(
        Store.open(store_path, create=True),
        RecordConfig(task_ids=("normal/1",), agent="openai", run_id="judge-model", agent_settings=settings),
    )


def _score(store: Store, judge_url: str, log: Callable[[str], None]) -> None:
    judge = JudgeSettings(model=JUDGE_MODEL, base_url=judge_url, concurrency=8)
    for name, args in (
        ("must_include", {}),
        ("hops", {}),
        ("mmina_official", {}),
        ("fuzzy", {"reference": "must_include"}),
        ("keypoints", {}),
    ):
        log(f"judges: rescoring with {name}")
        result = rescore(store, RescoreConfig(name, args=args, judge=judge))
        if not result.ok:
            raise RuntimeError(f"{name}: {result.unscored[0].reason}")


def _label(store_path: Path, work: Path) -> None:
    """Two simulated labellers: the ``hops`` verdicts of every task and hop, each flipped at its rate."""
    store = Store.open(store_path)
    rows = [r for r in store.read("scores").to_pylist() if r["evaluator"] == "hops"]
    latest = {
        r["episode_id"]: max(
            (s["scored_at"], s["batch_id"]) for s in rows if s["episode_id"] == r["episode_id"]
        )
        for r in rows
    }
    rows = [r for r in rows if (r["scored_at"], r["batch_id"]) == latest[r["episode_id"]]]
    for labeller, rate in LABELLERS.items():
        draw = Random(labeller)
        lines = ["episode_id,hop,label"]
        for row in sorted(rows, key=lambda r: (r["episode_id"], r["hop"] or 0)):
            verdict = (
                row["verdict"]
                if draw.random() >= rate
                else {"pass": "fail", "fail": "pass"}.get(row["verdict"])
            )
            if verdict in ("pass", "fail"):
                lines.append(f"{row['episode_id']},{row['hop'] or 'task'},{verdict}")
        path = work / f"{labeller}.csv"
        path.write_text("\n".join(lines) + "\n")
        import_labels(store, path, labeller)


def _figures(section: Section, result: Audit) -> None:
    """κ and τ as measured (a figure left undefined by the data — one verdict everywhere — is left out)."""
    for b in result.baseline:
        if (
            b.by == "all"
            and b.evaluator in ("fuzzy", "keypoints")
            and None not in (b.human.value, b.judge.value)
        ):
            if b.evaluator == "keypoints":  # the same for every judge; keypoints has both levels
                section.add(
                    f"{b.level}: human-human kappa",
                    _round(b.human.value),
                    note=f"{b.items} items; [{_round(b.human.lo)}, {_round(b.human.hi)}]",
                )
            section.add(
                f"{b.level}: {b.evaluator}-human kappa",
                _round(b.judge.value),
                note=f"difference {_round(b.difference.value)} [{_round(b.difference.lo)}, "
                f"{_round(b.difference.hi)}]: {b.place}",
            )
    for t in result.taus:
        if t.b == "human" and t.tau.value is not None:
            section.add(
                f"Kendall tau, {t.a} vs human",
                _round(t.tau.value),
                note=f"[{_round(t.tau.lo)}, {_round(t.tau.hi)}] over {t.runs} runs",
            )
    section.add("self-judging warnings", sum("is also the model of ranked run" in w for w in result.warnings))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _print_tables(store_path: Path) -> None:
    """What ``mmina agreement --audit`` prints (for docs/judges.md)."""
    from mmina.cli import cli

    args = ["agreement", "--audit", "--store", str(store_path)] + [
        a for e in EVALUATORS for a in ("--evaluator", e)
    ]
    printed = CliRunner().invoke(cli, args, env={"COLUMNS": "150"})
    print(printed.output, file=sys.stderr)
