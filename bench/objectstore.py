"""Stores on object storage, against a local S3-compatible server (moto, in its own process).

(a) The same fixture tasks recorded with the oracle into a local-disk store and into an
``s3://`` store: episodes per minute for both, and their ratio. (b) A synthetic store written
straight to S3 through mmina's batch writer (by default 100,000 episodes, 1,000,000 steps),
rescored with the ``hops`` evaluator on S3, then the scale section's bucket query timed the way
``mmina sql`` runs it (views built each time, DuckDB reading through the registered fsspec
filesystem).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.recording import record
from bench.results import AT_LEAST, Section, Target, ratio
from bench.scale import BUCKET_SQL, timed, timed_rescore
from bench.synthetic import build
from mmina.evaluators.rescore import RescoreConfig
from mmina.store import Store
from mmina.store.sql import run_query

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.s3_server import S3Server  # noqa: E402 - the tests' local S3-compatible server

BUCKET = "mmina-bench"
QUERY_REPEATS = 3
ROUNDS = 2


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set, as it was afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def recording_figures(
    section: Section, work: Path, task_ids: tuple[str, ...], log: Callable[[str], None]
) -> None:
    """The same tasks recorded into a local folder and into S3, alternately ``ROUNDS`` times
    (fixture web and browser start-up included in every wall); the fastest round of each
    counts, so that a burst of load from elsewhere on the machine does not decide the ratio."""
    walls: dict[str, list[float]] = {"local": [], "s3": []}
    for round_ in range(ROUNDS):
        for name, location in (
            ("local", work / f"local-{round_}"),
            ("s3", f"s3://{BUCKET}/recording-{round_}"),
        ):
            log(f"recording {len(task_ids)} tasks into the {name} store (round {round_ + 1} of {ROUNDS})")
            walls[name].append(record(location, task_ids).wall_s)  # type: ignore[arg-type] - a URL is a location too
    rates = {name: 60 * len(task_ids) / min(found) for name, found in walls.items()}
    for name, label in (("local", "a local store"), ("s3", "s3://")):
        section.add(
            f"recording into {label}",
            round(rates[name], 1),
            "episodes/min",
            note=f"fastest of {ROUNDS}: " + ", ".join(f"{wall:.1f} s" for wall in walls[name]),
        )
    section.add(
        "s3:// / local throughput",
        round(ratio(rates["s3"], rates["local"]), 2),
        "×",
        Target(0.8, AT_LEAST),
        note=f"{len(task_ids)} tasks, oracle, one worker",
    )


def query_figures(section: Section, episodes: int, log: Callable[[str], None]) -> None:
    """A synthetic store written to S3, rescored there, and the bucket query timed on it."""
    url = f"s3://{BUCKET}/synthetic"
    log(f"writing a synthetic store of {episodes} episodes to S3")
    info = build(url, episodes, log)  # type: ignore[arg-type] - a URL is a location too
    section.add(
        "synthetic store written to s3://",
        info["steps"],
        "steps",
        note=f"{info['episodes']} episodes in {info['runs']} runs, written in {info['seconds']:.0f} s",
    )
    log("rescoring it on S3 with the hops evaluator")
    result, wall = timed_rescore(Store.open(url), RescoreConfig(evaluator="hops"))
    section.add(
        "rescore hops on s3://",
        round(len(result.scored) / wall),
        "episodes/s",
        note=f"{len(result.scored)} episodes in {wall:.1f} s",
    )
    log("timing the bucket query on S3")
    store = Store.open(url)
    walls = [timed(lambda: run_query(store, BUCKET_SQL)) for _ in range(QUERY_REPEATS)]
    section.add(
        "task SR by hop-count bucket on s3:// (SQL)",
        round(statistics.median(walls), 3),
        "s",
        Target(3.0),
        note=f"median of {QUERY_REPEATS} (fastest {min(walls):.2f} s), views built each time as `mmina sql` "
        f"does",
    )


def objectstore_section(
    work: Path, task_ids: tuple[str, ...], episodes: int, log: Callable[[str], None]
) -> Section:
    section = Section("objectstore")
    log("starting a local S3 server (moto)")
    with S3Server() as s3, environment(s3.env):
        s3.make_bucket(BUCKET)
        recording_figures(section, work, task_ids, log)
        query_figures(section, episodes, log)
    return section
