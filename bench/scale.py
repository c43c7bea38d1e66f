"""Benchmarks on a synthetic store at scale: rescoring throughput and query latency."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from bench.results import AT_LEAST, Section, Target
from bench.synthetic import build
from mmina.evaluators.judge import JudgeSettings
from mmina.evaluators.rescore import RescoreConfig, RescoreResult, rescore
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.store.views import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fake_openai import FakeOpenAI  # noqa: E402 - the tests' local OpenAI-compatible server

DETERMINISTIC = ("exact_match", "must_include", "url_match", "hops", "mmina_official")
ARGS = {"mmina_official": {"domain": "multi567"}}
"""The synthetic tasks (``synthetic/N``) are in none of the runner's domain folders: the official
rules are forced to the multihop set (the built-in tasks they are cloned from are multihop)."""
STRING_ONLY = ("exact_match", "must_include")
"""Decided by the final answer alone (no steps read): held to a higher throughput."""
CONCURRENCY = (1, 8, 32)
FUZZY_ARGS = {"reference": "must_include"}
"""The synthetic tasks (like most fixture tasks) have must_include references, not fuzzy_match ones."""
JUDGE_DELAY_S = 0.05
BUCKET_SQL = """
select bucket, count(*) as tasks, avg(passed::int) as task_sr, sum(hops_passed) / sum(hops_total) as hop_sr
from episode_scores where evaluator = 'hops' group by bucket order by bucket
"""
EPISODE_SQL = "select run_id, blob_packs from episodes where episode_id = '{episode}'"
SCREENSHOTS_SQL = (
    "select screenshot from steps where run_id = '{run}' and episode_id = '{episode}' order by step_index"
)


def timed_rescore(store: Store, config: RescoreConfig) -> tuple[RescoreResult, float]:
    started = time.perf_counter()
    result = rescore(store, config)
    return result, time.perf_counter() - started


def rescore_section(root: Path, episodes: int, log: Callable[[str], None]) -> Section:
    section = Section("rescore")
    for name in DETERMINISTIC:
        log(f"rescoring {episodes} episodes with {name}")
        result, wall = timed_rescore(Store.open(root), RescoreConfig(evaluator=name, args=ARGS.get(name, {})))
        target = Target(50_000 if name in STRING_ONLY else 20_000, AT_LEAST)
        section.add(
            name,
            round(len(result.scored) / wall),
            "episodes/s",
            target,
            note=f"{len(result.scored)} episodes in {wall:.1f} s",
        )
    os.environ.setdefault("OPENAI_API_KEY", "bench-local")
    with FakeOpenAI() as judge:
        judge_settings = JudgeSettings(model="bench-judge", base_url=judge.url, concurrency=32)
        log("fuzzy: filling the judge cache")
        cold, _ = timed_rescore(
            Store.open(root), RescoreConfig(evaluator="fuzzy", args=FUZZY_ARGS, judge=judge_settings)
        )
        log("fuzzy: warm cache")
        sent = len(judge.requests)
        warm, wall = timed_rescore(
            Store.open(root), RescoreConfig(evaluator="fuzzy", args=FUZZY_ARGS, judge=judge_settings)
        )
        section.add(
            "fuzzy, warm judge cache",
            round(len(warm.scored) / wall),
            "episodes/s",
            Target(10_000, AT_LEAST),
            note=f"{len(judge.requests) - sent} requests sent; cache filled by {sent} "
            f"for {len(cold.scored)} episodes",
        )
    _cold_judge(section, root, log)
    return section


def _cold_judge(section: Section, root: Path, log: Callable[[str], None]) -> None:
    """Cold cache against an endpoint answering after JUDGE_DELAY_S: throughput by concurrency."""
    first_run = Store.open(root).run_ids()[0]
    with FakeOpenAI(delay_s=JUDGE_DELAY_S) as judge:
        for bound in CONCURRENCY:
            log(f"fuzzy: cold cache, concurrency {bound}")
            settings = JudgeSettings(model=f"bench-cold-{bound}", base_url=judge.url, concurrency=bound)
            sent = len(judge.requests)
            result, wall = timed_rescore(
                Store.open(root),
                RescoreConfig(evaluator="fuzzy", args=FUZZY_ARGS, runs=(first_run,), judge=settings),
            )
            requests = len(judge.requests) - sent
            section.add(
                f"fuzzy, cold cache, concurrency {bound}",
                round(len(result.scored) / wall, 1),
                "episodes/s",
                note=f"{requests} requests at {1000 * JUDGE_DELAY_S:.0f} ms each: "
                f"{requests / wall:.0f} requests/s",
            )


def store_section(root: Path, info: dict[str, Any], repeats: int = 3) -> Section:
    section = Section("store")
    store = Store.open(root)
    section.add(
        "synthetic store",
        info["steps"],
        "steps",
        note=f"{info['episodes']} episodes in {info['runs']} runs, written in {info['seconds']:.0f} s",
    )
    walls = [timed(lambda: run_query(store, BUCKET_SQL)) for _ in range(repeats)]
    section.add(
        "task SR by hop-count bucket (SQL)",
        round(statistics.median(walls), 3),
        "s",
        Target(1.0),
        note=f"median of {repeats}, views built each time as `mmina sql` does",
    )
    walls = [timed(lambda: connect(store).close()) for _ in range(repeats)]
    section.add("opening the store's SQL views", round(1000 * statistics.median(walls), 1), "ms")
    episode = f"syn-{info['episodes'] // 2:07d}"
    db = connect(store)
    try:
        walls = [timed(lambda: _screenshots(store, db.connection, episode)) for _ in range(repeats)]
        count = len(_screenshots(store, db.connection, episode))
    finally:
        db.close()
    section.add(
        "one episode's screenshots",
        round(1000 * statistics.median(walls), 1),
        "ms",
        Target(100),
        note=f"{count} screenshots: its run and packs, its steps (that run's files only), the blobs",
    )
    return section


def _screenshots(store: Store, db: duckdb.DuckDBPyConnection, episode: str) -> list[bytes]:
    [(run, packs)] = db.execute(EPISODE_SQL.format(episode=episode)).fetchall()
    digests = [row[0] for row in db.execute(SCREENSHOTS_SQL.format(run=run, episode=episode)).fetchall()]
    blobs = store.read_blobs(digests, packs)
    return [blobs[d] for d in digests]


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def run_scale(work: Path, episodes: int, log: Callable[[str], None]) -> list[Section]:
    root = work / "synthetic"
    log(f"writing a synthetic store of {episodes} episodes")
    info = build(root, episodes, log)
    sections = [rescore_section(root, episodes, log)]
    sections.append(store_section(root, info))
    return sections
