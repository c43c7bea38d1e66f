"""Is this judge as good as a second human, and does the leaderboard depend on the judge?
``mmina agreement --audit``.

Over the episodes of any set of runs and any evaluators (two or more; three or more is the
protocol ClawBench asks for):

* **Human baseline** — for each evaluator that is not people's labels, with two or more
  labellers, per level (task, hop) and group (all items, hop-count bucket, hop position) where
  the evaluator decided any item:
  *human–human* κ (Cohen's κ of every pair of labellers over the items both decided, averaged
  over the pairs), *judge–human* κ (the judge's κ with each labeller, averaged over the
  labellers) and their *difference*, each with a percentile bootstrap interval (the items
  resampled with replacement, one resample for all three figures, so the difference's interval
  is a paired one). The judge is ``below`` the humans when the difference's interval lies below
  0, ``above`` when above, else ``within`` their spread: no worse than a second person, as far
  as these labels can tell.
* **Rankings** — each run's task success rate under each evaluator, over the episodes every
  evaluator judged (a ``pass``, ``fail`` or ``unclear`` task verdict; ``n/a`` and missing ones
  are left out, so that every evaluator ranks the runs on the same episodes), the runs' ranks
  (1 best, ties sharing the better rank), and Kendall's τ-b between each two evaluators'
  rankings with a percentile bootstrap interval (each run's episodes resampled within the run).
* **Warnings** — a judge whose model is also the model of a ranked run (a judge tends to
  prefer its own model's answers), fewer than three evaluators or three runs, fewer than two
  labellers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from random import Random
from statistics import fmean
from typing import Any

from mmina.analysis.agreement import (
    EPISODES_SQL,
    HUMAN,
    LABELS_SQL,
    VIEWS,
    Item,
    Key,
    Side,
    consensus,
    item_key,
    items_of,
    partitions,
    side_verdicts,
)
from mmina.analysis.data import AnalysisError, query, select_runs
from mmina.stats import Confusion, kendall_tau, percentile_interval, resample_counts
from mmina.store import Store
from mmina.store.views import StoreConnection, connect

COUNTED = ("pass", "fail", "unclear")
"""Task verdicts that count in a success rate (``n/a`` and missing ones do not)."""
RUNS_SQL = "SELECT run_id, model FROM runs WHERE list_contains($runs, run_id) ORDER BY run_id"
JUDGE_MODELS_SQL = """
SELECT DISTINCT coalesce(json_extract_string(judge_json, '$.model'), json_extract_string(args_json, '$.judge_model'))
       AS model
FROM latest_scores WHERE evaluator = $evaluator AND episode_id IN (SELECT episode_id FROM episodes)
"""
"""The judge models of an evaluator's current verdicts (its ``judge_json``, else its ``judge_model`` argument)."""

Pattern = tuple[str, ...]
"""One item's verdicts, one per rater: ``pass``, ``fail`` or ``-`` (anything else: not decided)."""


@dataclass(frozen=True)
class Estimate:
    """A figure with its 95% percentile bootstrap interval (None: undefined, or no resample defined it)."""

    value: float | None
    lo: float | None
    hi: float | None


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """One group's human–human and judge–human agreement, and where the judge lies."""

    evaluator: str
    level: str
    by: str
    group: str
    items: int
    human: Estimate
    judge: Estimate
    difference: Estimate
    place: str
    """``within``, ``below`` or ``above`` the human spread; ``unknown`` when the difference is undefined."""
    pairs: Mapping[str, float | None]
    """Each pair's κ: ``alice~bob`` (two labellers), ``fuzzy~alice`` (the judge with one)."""


@dataclass(frozen=True)
class Ranked:
    """One run under every evaluator: its success rate and rank over the commonly judged episodes."""

    run_id: str
    model: str | None
    episodes: int
    rates: Mapping[str, float | None]
    ranks: Mapping[str, int | None]


@dataclass(frozen=True)
class Tau:
    """Kendall's τ-b between two evaluators' rankings of the runs."""

    a: str
    b: str
    runs: int
    tau: Estimate


@dataclass
class Audit:
    runs: tuple[str, ...]
    evaluators: list[str]
    labellers: list[str]
    resamples: int
    baseline: list[Baseline] = field(default_factory=list)
    ranking: list[Ranked] = field(default_factory=list)
    taus: list[Tau] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "runs": list(self.runs),
            "evaluators": self.evaluators,
            "labellers": self.labellers,
            "bootstrap_resamples": self.resamples,
            "baseline": [asdict(b) for b in self.baseline],
            "ranking": [asdict(r) for r in self.ranking],
            "taus": [asdict(t) for t in self.taus],
            "warnings": self.warnings,
        }


def audit(
    store: Store, runs: Sequence[str], evaluators: Sequence[str], resamples: int = 1000, seed: int = 0
) -> Audit:
    """The judge audit of ``evaluators`` over the episodes of ``runs`` (default: every run)."""
    sides = list(dict.fromkeys(Side.parse(e) for e in evaluators))
    if len(sides) < 2:
        raise AnalysisError(
            "an audit compares evaluators: name two or more (--evaluator A --evaluator B ...; "
            "three or more to see whether the ranking depends on the judge)"
        )
    chosen = select_runs(store, runs)
    db = connect(store, chosen, only=(*VIEWS, "runs"))
    try:
        episodes = query(db, EPISODES_SQL, {"runs": list(chosen)})
        verdicts = {str(side): side_verdicts(db, side, chosen) for side in sides}
        labels = labeller_verdicts(db)
        models = {r["run_id"]: r["model"] for r in query(db, RUNS_SQL, {"runs": list(chosen)})}
        judges = {str(s): _judge_models(db, s.evaluator) for s in sides if s.evaluator != HUMAN}
    finally:
        db.close()
    result = Audit(chosen, [str(s) for s in sides], sorted(labels), resamples)
    items = list(items_of(episodes))
    for side in sides:
        if side.evaluator != HUMAN and len(labels) >= 2:
            result.baseline += baselines(str(side), items, verdicts[str(side)], labels, resamples, seed)
    result.ranking, result.taus = rankings(episodes, verdicts, models, resamples, seed)
    result.warnings = _warnings(result, labels, judges, models)
    return result


def labeller_verdicts(db: StoreConnection) -> dict[str, dict[Key, str]]:
    """Each labeller's current verdicts (their latest batch per episode)."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in query(db, LABELS_SQL, {"labeller": None}):
        rows[row["labeller"]].append(row)
    return {name: consensus(given) for name, given in rows.items()}


def _judge_models(db: StoreConnection, evaluator: str) -> set[str]:
    return {r["model"] for r in query(db, JUDGE_MODELS_SQL, {"evaluator": evaluator}) if r["model"]}


# -- human baseline ---------------------------------------------------------------------------


def baselines(
    evaluator: str,
    items: Sequence[Item],
    judge: Mapping[Key, str],
    labels: Mapping[str, Mapping[Key, str]],
    resamples: int,
    seed: int,
) -> list[Baseline]:
    """The judge's agreement with each labeller beside the labellers' with each other, per group
    (groups where the judge decided no item — a level it gives no verdict for — left out)."""
    names = sorted(labels)
    raters = [judge, *(labels[n] for n in names)]
    found = []
    for level, by, group, part in partitions(items):
        counts = Counter(tuple(_decided(r.get(item_key(i))) for r in raters) for i in part)
        if any(pattern[0] != "-" for pattern in counts):
            found.append(baseline(evaluator, names, counts, (level, by, group), resamples, seed))
    return found


def _decided(verdict: str | None) -> str:
    return verdict if verdict in ("pass", "fail") else "-"


def baseline(
    evaluator: str,
    names: Sequence[str],
    counts: Mapping[Pattern, int],
    where: tuple[str, str, str],
    resamples: int,
    seed: int,
) -> Baseline:
    """One group's figures: rater 0 of each pattern is the judge, the others the labellers ``names``."""
    human, judge, pairs = _kappas(counts, evaluator, names)
    draw, humans, judges, differences = Random(seed), [], [], []
    for _ in range(resamples):
        h, j, _ = _kappas(resample_counts(draw, counts), evaluator, names)
        humans += [h] if h is not None else []
        judges += [j] if j is not None else []
        differences += [j - h] if h is not None and j is not None else []
    difference = Estimate(
        None if human is None or judge is None else judge - human, *percentile_interval(differences)
    )
    level, by, group = where
    return Baseline(
        evaluator=evaluator,
        level=level,
        by=by,
        group=group,
        items=sum(counts.values()),
        human=Estimate(human, *percentile_interval(humans)),
        judge=Estimate(judge, *percentile_interval(judges)),
        difference=difference,
        place=_place(difference),
        pairs=pairs,
    )


def _kappas(
    counts: Mapping[Pattern, int], evaluator: str, names: Sequence[str]
) -> tuple[float | None, float | None, dict[str, float | None]]:
    """Mean human–human κ, mean judge–human κ, and each pair's κ."""
    pairs = {
        f"{names[a - 1]}~{names[b - 1]}": pair_kappa(counts, a, b)
        for a, b in combinations(range(1, len(names) + 1), 2)
    }
    judged = {
        f"{evaluator}~{name}": pair_kappa(counts, 0, index) for index, name in enumerate(names, start=1)
    }
    return _mean(pairs.values()), _mean(judged.values()), {**pairs, **judged}


def pair_kappa(counts: Mapping[Pattern, int], a: int, b: int) -> float | None:
    """Cohen's κ of raters ``a`` and ``b`` over the items both decided."""
    cells: Counter[tuple[str, str]] = Counter()
    for pattern, count in counts.items():
        cells[(pattern[a], pattern[b])] += count
    return Confusion(
        cells[("pass", "pass")], cells[("pass", "fail")], cells[("fail", "pass")], cells[("fail", "fail")]
    ).kappa


def _mean(values: Any) -> float | None:
    defined = [v for v in values if v is not None]
    return fmean(defined) if defined else None


def _place(difference: Estimate) -> str:
    if difference.lo is None or difference.hi is None:
        return "unknown"
    return "above" if difference.lo > 0 else "below" if difference.hi < 0 else "within"


# -- rankings ---------------------------------------------------------------------------------


def rankings(
    episodes: Sequence[Mapping[str, Any]],
    verdicts: Mapping[str, Mapping[Key, str]],
    models: Mapping[str, str | None],
    resamples: int,
    seed: int,
) -> tuple[list[Ranked], list[Tau]]:
    """Each run's success rate and rank under every evaluator over the episodes all of them
    judged, and Kendall's τ-b between every two evaluators' rankings with its interval."""
    names = list(verdicts)
    counts: dict[str, Counter[tuple[bool, ...]]] = defaultdict(Counter)
    for e in episodes:
        given = [verdicts[n].get((e["episode_id"], None)) for n in names]
        if all(v in COUNTED for v in given):
            counts[e["run_id"]][tuple(v == "pass" for v in given)] += 1
    runs = [r for r in dict.fromkeys(e["run_id"] for e in episodes) if counts[r]]
    rates = _rates(counts, runs, len(names))
    ranked = [
        Ranked(
            run,
            models.get(run),
            sum(counts[run].values()),
            dict(zip(names, rates[run])),
            {n: _rank(rates, runs, i, run) for i, n in enumerate(names)},
        )
        for run in runs
    ]
    draw = Random(seed)
    resampled = [
        _rates({r: resample_counts(draw, counts[r]) for r in runs}, runs, len(names))
        for _ in range(resamples)
    ]
    taus = [_tau(names, i, j, runs, rates, resampled) for i, j in combinations(range(len(names)), 2)]
    return ranked, taus


def _rates(
    counts: Mapping[str, Mapping[tuple[bool, ...], int]], runs: Sequence[str], width: int
) -> dict[str, list[float]]:
    """Each run's success rate under each evaluator (position ``i`` of the patterns)."""
    rates = {}
    for run in runs:
        total = sum(counts[run].values())
        rates[run] = [sum(c for p, c in counts[run].items() if p[i]) / total for i in range(width)]
    return rates


def _rank(rates: Mapping[str, Sequence[float]], runs: Sequence[str], index: int, run: str) -> int:
    """1 + the runs with a strictly higher rate under evaluator ``index``."""
    return 1 + sum(rates[other][index] > rates[run][index] for other in runs)


def _tau(
    names: Sequence[str],
    i: int,
    j: int,
    runs: Sequence[str],
    rates: Mapping[str, Sequence[float]],
    resampled: Sequence[Mapping[str, Sequence[float]]],
) -> Tau:
    def tau(by_run: Mapping[str, Sequence[float]]) -> float | None:
        return kendall_tau([by_run[r][i] for r in runs], [by_run[r][j] for r in runs])

    values = [t for t in map(tau, resampled) if t is not None]
    return Tau(names[i], names[j], len(runs), Estimate(tau(rates), *percentile_interval(values)))


# -- warnings ---------------------------------------------------------------------------------


def _warnings(
    result: Audit, labels: Mapping[str, Any], judges: Mapping[str, set[str]], models: Mapping[str, str | None]
) -> list[str]:
    ranked = {r.run_id for r in result.ranking}
    found = [
        f"{evaluator}'s judge model {model} is also the model of ranked run {run}: a judge tends to prefer "
        f"its own model's answers — judge with another model, or report it"
        for evaluator, used in judges.items()
        for model in sorted(used)
        for run, run_model in models.items()
        if run in ranked and same_model(model, run_model)
    ]
    if len(result.evaluators) < 3:
        found.append(
            f"{len(result.evaluators)} evaluators: the protocol compares the ranking under three or more"
        )
    if len(result.ranking) < 3:
        found.append(
            f"{len(result.ranking)} run(s) ranked on commonly judged episodes: Kendall's tau needs three "
            "or more to say much"
        )
    if len(labels) < 2:
        found.append(
            f"human-human agreement needs two labellers on the same episodes (labellers: "
            f"{', '.join(sorted(labels)) or 'none'}): label with another name in mmina serve or "
            "`mmina import labels FILE --labeller NAME`"
        )
    return found


def same_model(a: str | None, b: str | None) -> bool:
    """Whether two model names name the same model (case, spaces and a ``provider/`` prefix aside)."""

    def bare(name: str) -> str:
        return name.strip().lower().rsplit("/", 1)[-1]

    return bool(a and b) and bare(a or "") == bare(b or "")
