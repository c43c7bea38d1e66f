"""How far one evaluator agrees with another, per task and per hop: ``mmina agreement``.

An *item* is one episode's task, or one of its hops (a hop-conditioned episode's given hops
are not items: they are not the agent's). Each side says ``pass``, ``fail``, ``unclear``
(a person's ``unsure``) or nothing (missing) about each item. Over the items both sides
decided (pass or fail) this computes agreement, Cohen's κ with a percentile bootstrap
interval, and the precision, recall and F1 of "pass" taking the reference as the truth;
unsure and missing items are counted apart, never folded into either verdict. Every figure
comes overall, by hop-count bucket (1 / 2-4 / 5+) and, for hops, by hop position (1-based).

A side is an evaluator name, whose current verdicts are its latest batch per episode
(``latest_scores``), or ``human`` — people's labels (``mmina serve``, ``mmina import labels``):
each labeller's latest batch per episode, an item taking the labellers' verdict when they all
agree and ``unclear`` when they differ — or ``human:NAME``, one labeller's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from mmina.analysis.data import AnalysisError, query, rescore_hint, select_runs, stored_evaluators
from mmina.stats import Confusion, kappa_interval
from mmina.store import Store
from mmina.store.convenience import bucket_sql
from mmina.store.views import StoreConnection, connect
from mmina.tasks.task import BUCKETS

HUMAN = "human"
"""The evaluator name people's labels are stored under (by ``mmina.evaluators.labelling``)."""
VERDICTS = ("pass", "fail", "unclear", "missing")
DEFAULT_RESAMPLES = 1000
DEFAULT_SERVE_URL = "http://127.0.0.1:8787"
VIEWS = ("episodes", "scores", "latest_scores")

EPISODES_SQL = f"""
SELECT run_id, episode_id, task_id, n_hops, coalesce(hops_given, 0) AS start_hop, {bucket_sql("n_hops")} AS bucket
FROM episodes WHERE list_contains($runs, run_id)
ORDER BY run_id, task_id, started_at, episode_id
"""
EVALUATOR_SQL = """
SELECT episode_id, level, hop - 1 AS hop_index, verdict FROM latest_scores
WHERE evaluator = $evaluator AND level IN ('task', 'hop')
"""
LABELS_SQL = """
SELECT episode_id, level, hop - 1 AS hop_index, verdict, json_extract_string(args_json, '$.labeller') AS labeller
FROM scores WHERE evaluator = 'human' AND level IN ('task', 'hop')
      AND ($labeller IS NULL OR json_extract_string(args_json, '$.labeller') = $labeller)
QUALIFY batch_id = first_value(batch_id) OVER (PARTITION BY episode_id, json_extract_string(args_json, '$.labeller')
                                               ORDER BY scored_at DESC, batch_id DESC)
"""
"""Each labeller's current labels: their latest ``human`` batch per episode (``$labeller``: one, or NULL: all)."""
LABELLERS_SQL = """
SELECT DISTINCT json_extract_string(args_json, '$.labeller') AS labeller FROM scores WHERE evaluator = 'human'
ORDER BY labeller
"""

Key = tuple[str, int | None]
"""An item: (episode id, hop index 0-based; None for the task)."""


@dataclass(frozen=True)
class Side:
    """Whose verdicts: an evaluator, or people's labels (``human``, one labeller's with ``human:NAME``)."""

    evaluator: str
    labeller: str | None = None

    @classmethod
    def parse(cls, text: str) -> Side:
        name, sep, labeller = text.strip().partition(":")
        if sep and name == HUMAN and labeller.strip():
            return cls(HUMAN, labeller.strip())
        if not text.strip():
            raise AnalysisError("name an evaluator (e.g. fuzzy, hops, human, human:alice)")
        return cls(text.strip())

    def __str__(self) -> str:
        return f"{self.evaluator}:{self.labeller}" if self.labeller else self.evaluator


@dataclass(frozen=True)
class Item:
    run_id: str
    episode_id: str
    task_id: str
    bucket: str
    hop: int | None
    """0-based hop index; None for the task."""


@dataclass(frozen=True, kw_only=True)
class Group:
    """The statistics of one group of items (``level``: task or hop; ``by``: all, bucket or hop)."""

    level: str
    by: str
    group: str
    matrix: Mapping[str, Mapping[str, int]]
    """Items by the evaluator's verdict, then the reference's (pass, fail, unclear, missing)."""
    kappa_lo: float | None
    kappa_hi: float | None

    @property
    def confusion(self) -> Confusion:
        m = self.matrix
        return Confusion(m["pass"]["pass"], m["pass"]["fail"], m["fail"]["pass"], m["fail"]["fail"])

    @property
    def items(self) -> int:
        return sum(sum(row.values()) for row in self.matrix.values())

    @property
    def missing_evaluator(self) -> int:
        return sum(self.matrix["missing"].values())

    @property
    def missing_reference(self) -> int:
        return sum(row["missing"] for row in self.matrix.values())

    @property
    def unsure_evaluator(self) -> int:
        """Items the evaluator called unclear and the reference judged (or called unclear too)."""
        return sum(count for ref, count in self.matrix["unclear"].items() if ref != "missing")

    @property
    def unsure_reference(self) -> int:
        return sum(row["unclear"] for ev, row in self.matrix.items() if ev != "missing")

    def as_json(self) -> dict[str, Any]:
        c = self.confusion
        return {
            "level": self.level,
            "by": self.by,
            "group": self.group,
            "items": self.items,
            "pairs": c.n,
            "agreement": c.agreement,
            "kappa": c.kappa,
            "kappa_lo": self.kappa_lo,
            "kappa_hi": self.kappa_hi,
            "precision": c.precision,
            "recall": c.recall,
            "f1": c.f1,
            **asdict(c),
            "unsure_evaluator": self.unsure_evaluator,
            "unsure_reference": self.unsure_reference,
            "missing_evaluator": self.missing_evaluator,
            "missing_reference": self.missing_reference,
            "matrix": {ev: dict(row) for ev, row in self.matrix.items()},
        }


@dataclass(frozen=True, kw_only=True)
class Disagreement:
    run_id: str
    episode_id: str
    task_id: str
    hop: int | None
    """1-based hop position; None for the task."""
    evaluator: str
    reference: str
    link: str


@dataclass
class Agreement:
    evaluator: Side
    reference: Side
    runs: tuple[str, ...]
    resamples: int
    groups: list[Group] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)

    def group(self, level: str, by: str = "all", group: str = "all") -> Group | None:
        return next((g for g in self.groups if (g.level, g.by, g.group) == (level, by, group)), None)

    def as_json(self) -> dict[str, Any]:
        return {
            "evaluator": str(self.evaluator),
            "reference": str(self.reference),
            "runs": list(self.runs),
            "bootstrap_resamples": self.resamples,
            "groups": [g.as_json() for g in self.groups],
            "disagreements": [asdict(d) for d in self.disagreements],
        }


def agreement(
    store: Store,
    runs: Sequence[str],
    evaluator: str,
    reference: str,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    serve_url: str = DEFAULT_SERVE_URL,
) -> Agreement:
    """``evaluator`` against ``reference`` over the episodes of ``runs`` (default: every run)."""
    sides = Side.parse(evaluator), Side.parse(reference)
    if sides[0] == sides[1]:
        raise AnalysisError(
            f"the evaluator and the reference are both {sides[0]}: compare two different ones"
        )
    chosen = select_runs(store, runs)
    db = connect(store, chosen, only=VIEWS)
    try:
        episodes = query(db, EPISODES_SQL, {"runs": list(chosen)})
        verdicts = [side_verdicts(db, side, chosen) for side in sides]
    finally:
        db.close()
    items = list(items_of(episodes))
    result = Agreement(sides[0], sides[1], chosen, resamples)
    result.groups = _groups(items, verdicts[0], verdicts[1], resamples, seed)
    result.disagreements = _disagreements(items, verdicts[0], verdicts[1], serve_url)
    return result


def side_verdicts(db: StoreConnection, side: Side, runs: Sequence[str]) -> dict[Key, str]:
    """The side's current verdict of every item it judged; none at all is an error naming the cure."""
    if side.evaluator != HUMAN:
        found = {_key(r): r["verdict"] for r in query(db, EVALUATOR_SQL, {"evaluator": side.evaluator})}
        if not found:
            raise AnalysisError(
                f"no {side} verdicts in run(s) {', '.join(runs)}"
                f"{stored_evaluators(db, side.evaluator)}: run "
                f"`{rescore_hint(side.evaluator, runs)}` first"
            )
        return found
    rows = query(db, LABELS_SQL, {"labeller": side.labeller})
    if not rows:
        raise AnalysisError(_no_labels(db, side, runs))
    return consensus(rows)


def _no_labels(db: StoreConnection, side: Side, runs: Sequence[str]) -> str:
    where = f"run(s) {', '.join(runs)}"
    if side.labeller is None:
        return (
            f"no human labels in {where}: label episodes in `mmina serve` or with `mmina import labels FILE`"
        )
    names = [r["labeller"] for r in query(db, LABELLERS_SQL, {})]
    return f"no labels by {side.labeller} in {where} (labellers there: {', '.join(names) or 'none'})"


def consensus(rows: Iterable[Mapping[str, Any]]) -> dict[Key, str]:
    """Each item's verdict over its labellers: theirs when they all agree, else ``unclear``."""
    given: dict[Key, set[str]] = defaultdict(set)
    for row in rows:
        given[_key(row)].add(row["verdict"])
    return {key: verdicts.pop() if len(verdicts) == 1 else "unclear" for key, verdicts in given.items()}


def _key(row: Mapping[str, Any]) -> Key:
    return row["episode_id"], None if row["level"] == "task" else row["hop_index"]


def items_of(episodes: Iterable[Mapping[str, Any]]) -> Iterator[Item]:
    """Every episode's task, then its hops (those the agent had to do)."""
    for e in episodes:
        yield Item(e["run_id"], e["episode_id"], e["task_id"], e["bucket"], None)
        for hop in range(e["start_hop"], e["n_hops"] or 0):
            yield Item(e["run_id"], e["episode_id"], e["task_id"], e["bucket"], hop)


def partitions(items: Sequence[Item]) -> Iterator[tuple[str, str, str, list[Item]]]:
    """The groups figures are given for, as (level, by, group, items): per level (task, hop),
    all items, each hop-count bucket and (hops) each hop position (1-based); empty ones left out."""
    for level in ("task", "hop"):
        chosen = [i for i in items if (i.hop is None) == (level == "task")]
        parts: list[tuple[str, str, list[Item]]] = [("all", "all", chosen)]
        parts += [("bucket", b, [i for i in chosen if i.bucket == b]) for b in BUCKETS]
        if level == "hop":
            positions = sorted({i.hop for i in chosen if i.hop is not None})
            parts += [("hop", str(p + 1), [i for i in chosen if i.hop == p]) for p in positions]
        yield from ((level, by, name, part) for by, name, part in parts if part)


def _groups(
    items: Sequence[Item], ours: Mapping[Key, str], theirs: Mapping[Key, str], resamples: int, seed: int
) -> list[Group]:
    """Statistics per level: overall, by bucket, and (hops) by position."""
    return [
        _group(level, by, name, part, ours, theirs, resamples, seed)
        for level, by, name, part in partitions(items)
    ]


def _group(
    level: str,
    by: str,
    name: str,
    items: Sequence[Item],
    ours: Mapping[Key, str],
    theirs: Mapping[Key, str],
    resamples: int,
    seed: int,
) -> Group:
    counts = Counter((ours.get(item_key(i), "missing"), theirs.get(item_key(i), "missing")) for i in items)
    matrix = {ev: {ref: counts[(ev, ref)] for ref in VERDICTS} for ev in VERDICTS}
    group = Group(level=level, by=by, group=name, matrix=matrix, kappa_lo=None, kappa_hi=None)
    lo, hi = kappa_interval(group.confusion, resamples, seed)
    return Group(level=level, by=by, group=name, matrix=matrix, kappa_lo=lo, kappa_hi=hi)


def item_key(item: Item) -> Key:
    return item.episode_id, item.hop


def _disagreements(
    items: Sequence[Item], ours: Mapping[Key, str], theirs: Mapping[Key, str], serve_url: str
) -> list[Disagreement]:
    """Items both sides decided differently, in run, task and hop order, with a link into ``mmina serve``."""
    found = []
    for item in items:
        a, b = ours.get(item_key(item)), theirs.get(item_key(item))
        if a in ("pass", "fail") and b in ("pass", "fail") and a != b:
            found.append(
                Disagreement(
                    run_id=item.run_id,
                    episode_id=item.episode_id,
                    task_id=item.task_id,
                    hop=None if item.hop is None else item.hop + 1,
                    evaluator=a,
                    reference=b,
                    link=episode_link(serve_url, item.episode_id),
                )
            )
    return found


def episode_link(serve_url: str, episode_id: str) -> str:
    """The episode's page in ``mmina serve`` (its trajectory viewer and labelling panel)."""
    return f"{serve_url.rstrip('/')}/#/episode/{quote(episode_id, safe='')}"
