"""Confidence intervals and paired tests, with no dependency beyond the standard library."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from math import comb, exp, lgamma, log, log1p, sqrt
from random import Random
from typing import TypeVar

Z95 = 1.959963984540054


def wilson(successes: int, total: int, z: float = Z95) -> tuple[float | None, float | None]:
    """The Wilson score interval (95 % by default) of a rate; (None, None) without data.

    Wilson rather than the normal approximation because MMInA groups are small and rates
    are often 0 or 1, where the normal interval collapses to a point.
    """
    if total <= 0:
        return None, None
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(successes: int, total: int) -> float | None:
    return successes / total if total else None


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts (binomial, p = 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Confusion:
    """Two raters' pass/fail verdicts on the same items, counted against a reference: ``tp``
    both pass, ``fp`` the rater passes what the reference fails, ``fn`` the rater fails what the
    reference passes, ``tn`` both fail. "Pass" is the positive class: a judge's precision is
    how often its passes are right, its recall how many of the true passes it finds."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def agreement(self) -> float | None:
        """Observed agreement: the share of items both gave the same verdict."""
        return rate(self.tp + self.tn, self.n)

    @property
    def kappa(self) -> float | None:
        """Cohen's κ: agreement beyond what the two raters' pass rates give by chance. Computed
        on integers, so it is exact; None when chance agreement is already total (both raters
        gave one and the same verdict to every item), where κ is undefined."""
        n, rater, reference = self.n, self.tp + self.fp, self.tp + self.fn
        chance = rater * reference + (n - rater) * (n - reference)
        if n == 0 or chance == n * n:
            return None
        return (n * (self.tp + self.tn) - chance) / (n * n - chance)

    @property
    def precision(self) -> float | None:
        return rate(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        return rate(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> float | None:
        """The harmonic mean of precision and recall (None when there is no pass on either side)."""
        return rate(2 * self.tp, 2 * self.tp + self.fp + self.fn)


def kappa_interval(
    confusion: Confusion, resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float | None, float | None]:
    """A percentile bootstrap interval of Cohen's κ: the items resampled with replacement
    ``resamples`` times, κ of each resample, and the middle ``level`` of those. A resample of
    items only matters through its four cell counts, so each is drawn as one multinomial draw
    of the cells (a few operations, however many items). Seeded: the same data always gives
    the same interval. Resamples where κ is undefined are left out; (None, None) when none is
    defined."""
    n = confusion.n
    if n == 0 or resamples <= 0:
        return None, None
    draw = Random(seed)
    shares = [cell / n for cell in (confusion.tp, confusion.fp, confusion.fn, confusion.tn)]
    values = []
    for _ in range(resamples):
        kappa = Confusion(*multinomial(draw, n, shares)).kappa
        if kappa is not None:
            values.append(kappa)
    return percentile_interval(values, level)


def multinomial(draw: Random, n: int, shares: list[float]) -> list[int]:
    """Counts of ``n`` draws over cells with these probabilities, as a chain of binomials."""
    counts, left, rest = [], n, 1.0
    for share in shares[:-1]:
        count = binomial(draw, left, min(1.0, share / rest) if rest > 0 else 0.0)
        counts.append(count)
        left, rest = left - count, rest - share
    return [*counts, left]


def binomial(draw: Random, n: int, p: float) -> int:
    """One Binomial(n, p) draw by inversion, searching outward from the mode: the outcomes are
    taken in the order mode, mode-1, mode+1, mode-2, ... and the first whose cumulative
    probability passes a uniform draw is the answer (about sqrt(n p (1-p)) steps)."""
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    mode = min(n, int((n + 1) * p))
    mass = exp(
        lgamma(n + 1) - lgamma(mode + 1) - lgamma(n - mode + 1) + mode * log(p) + (n - mode) * log1p(-p)
    )
    left = draw.random() - mass
    low = high = mode
    low_mass = high_mass = mass
    odds = p / (1 - p)
    while left > 0 and (low > 0 or high < n):
        if low > 0:
            low_mass *= low / ((n - low + 1) * odds)
            low -= 1
            left -= low_mass
            if left <= 0:
                return low
        if high < n:
            high_mass *= (n - high) / (high + 1) * odds
            high += 1
            left -= high_mass
            if left <= 0:
                return high
    return mode  # what rounding leaves over belongs to no outcome in particular


def _quantile(ordered: list[float], share: float) -> float:
    """The ``share`` quantile of sorted values, interpolated between neighbours."""
    position = share * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased estimate of pass@k (Chen et al. 2021): the chance that at least one of k
    repeats drawn without replacement from a task's n, c of which passed, passes:
    1 - C(n-c, k) / C(n, k). None when the task has fewer than k repeats."""
    if k < 1 or n < k:
        return None
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    """The unbiased estimate of pass^k (τ-bench, Yao et al. 2024): the chance that all of k
    repeats drawn without replacement from a task's n, c of which passed, pass:
    C(c, k) / C(n, k). None when the task has fewer than k repeats."""
    if k < 1 or n < k:
        return None
    return comb(c, k) / comb(n, k)


Cell = tuple[float, float]
"""One repeat of one task as (numerator, denominator): (passed, 1) for task success,
(hops passed, hops) for hop success."""


def nested_bootstrap(
    groups: Sequence[Sequence[Cell]], resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float | None, float | None]:
    """A percentile bootstrap interval of a rate (sum of numerators / sum of denominators)
    over tasks and their repeats: each resample draws the tasks with replacement and, within
    each task drawn, its repeats with replacement (two-stage: the task-to-task spread and the
    run-to-run one both show; slightly wider than resampling tasks alone). Seeded: the same
    data gives the same interval. (None, None) without data.

    Tasks whose repeats are the same multiset of cells are exchangeable, so a resample draws
    how many of each kind (one multinomial draw) and, for the m drawn of a kind with K repeats,
    how often each of its cells comes up in their m·K inner draws (another): a few draws per
    kind of task, however many tasks (a 1,050-task epoch of 3 repeats has a few dozen kinds).
    """
    kinds = Counter(tuple(sorted(group)) for group in groups if group)
    total = sum(kinds.values())
    if not total or resamples <= 0:
        return None, None
    draw = Random(seed)
    shares = [count / total for count in kinds.values()]
    inner = [(len(kind), list(Counter(kind).items())) for kind in kinds]
    values = []
    for _ in range(resamples):
        numerator = denominator = 0.0
        for drawn, (size, cells) in zip(multinomial(draw, total, shares), inner):
            picks = (
                [drawn * size]
                if len(cells) == 1 or not drawn
                else multinomial(draw, drawn * size, [count / size for _, count in cells])
            )
            numerator += sum(n * cell[0] for n, (cell, _) in zip(picks, cells))
            denominator += sum(n * cell[1] for n, (cell, _) in zip(picks, cells))
        if denominator:
            values.append(numerator / denominator)
    return percentile_interval(values, level)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's τ-b of two rankings of the same items (ties adjusted, as
    ``scipy.stats.kendalltau`` computes by default): (concordant − discordant pairs) over the
    geometric mean of the pairs each ranking does not tie. None when either ranking ties every
    pair (fewer than two items, or one value for all), where τ is undefined."""
    if len(x) != len(y):
        raise ValueError(f"two rankings of the same items: {len(x)} and {len(y)} values")
    concordant = discordant = tied_x = tied_y = pairs = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = _sign(x[i] - x[j]), _sign(y[i] - y[j])
            pairs += 1
            tied_x += dx == 0
            tied_y += dy == 0
            concordant += dx * dy > 0
            discordant += dx * dy < 0
    denominator = (pairs - tied_x) * (pairs - tied_y)
    return (concordant - discordant) / sqrt(denominator) if denominator > 0 else None


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


Pattern = TypeVar("Pattern", bound=Hashable)


def resample_counts(draw: Random, counts: Mapping[Pattern, int]) -> dict[Pattern, int]:
    """One bootstrap resample of items given as counts of their patterns (each item's verdicts,
    say): as many items drawn with replacement, which only matters through how many of each
    pattern come out — one multinomial draw over the patterns."""
    patterns = list(counts)
    n = sum(counts.values())
    if n == 0:
        return {}
    drawn = multinomial(draw, n, [counts[p] / n for p in patterns])
    return dict(zip(patterns, drawn))


def percentile_interval(values: list[float], level: float = 0.95) -> tuple[float | None, float | None]:
    """The middle ``level`` of bootstrap values (percentile interval); (None, None) without any."""
    if not values:
        return None, None
    ordered = sorted(values)
    tail = (1 - level) / 2
    return _quantile(ordered, tail), _quantile(ordered, 1 - tail)
