"""Confidence intervals and paired tests, with no dependency beyond the standard library."""
from __future__ import annotations

from math import comb, sqrt

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
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)
