"""Small synthetic stores for the judge tests: episodes of tasks with known hop counts, written
through the real store writer, and verdicts of any evaluator written as real score batches."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from mmina.evaluators.base import Score
from mmina.evaluators.batch import ScoreBatch, episode_score_rows
from mmina.store import Store
from tests.store_helpers import episode_row, run_row, step_row, task_row

Episode = tuple[str, str, str, int]
"""(run id, episode id, task id, hops)."""


def synthetic_store(path: Path, episodes: Sequence[Episode], blobs: Sequence[bytes] = ()) -> Store:
    """A store holding these episodes (two steps each; each step's screenshot the next of ``blobs``)."""
    store = Store.open(path, create=True)
    tasks: dict[str, dict[str, int]] = defaultdict(dict)
    for run_id, _, task_id, hops in episodes:
        tasks[run_id][task_id] = hops
    for run_id, by_task in tasks.items():
        store.begin_run(
            run_id, run_row(task_count=len(by_task)), [task_row(t, n) for t, n in by_task.items()]
        )
    for number, (run_id, episode_id, task_id, hops) in enumerate(episodes):
        writer = store.episode_writer(run_id, episode_id)
        shots = [writer.put_blob(data, "image/jpeg") for data in blobs]
        for index in range(2):
            writer.add_step(step_row(index, shots[(number + index) % len(shots)] if shots else None))
        writer.commit(episode_row(task_id, n_hops=hops, hop_steps=[]))
    return store


def write_verdicts(
    store: Store,
    evaluator: str,
    verdicts: Mapping[str, tuple[str | None, Sequence[str]]],
    episodes: Sequence[Episode],
) -> str:
    """One batch of ``evaluator``: per episode its task verdict (None: no task row) and its hop
    verdicts in order; returns the batch id."""
    batch = ScoreBatch.new(evaluator, "1", {})
    where = {e: (run, task) for run, e, task, _ in episodes}
    by_run: dict[str, list[dict[str, object]]] = defaultdict(list)
    for episode_id, (task, hops) in verdicts.items():
        scores = [Score(task, float(task == "pass"))] if task else []
        scores += [Score(v, float(v == "pass"), "hop", i) for i, v in enumerate(hops)]
        run_id, task_id = where[episode_id]
        by_run[run_id] += episode_score_rows(episode_id, task_id, scores, batch)
    for run_id, rows in by_run.items():
        store.append("scores", rows, stem=batch.batch_id, run_id=run_id)
    return batch.batch_id
