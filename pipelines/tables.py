"""Cells of the results tables that the domains' reports write."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence


def mean_std(values: Sequence[float], digits: int = 2, scale: float = 1.0) -> str:
    """``"mean ± std"`` over seeds of ``scale * values`` (sample std), the value alone for one, ``-`` for none."""
    scaled = [scale * v for v in values]
    if not scaled:
        return "-"
    if len(scaled) == 1:
        return f"{scaled[0]:.{digits}f}"
    return f"{statistics.mean(scaled):.{digits}f} ± {statistics.stdev(scaled):.{digits}f}"


@dataclass(frozen=True)
class Difference:
    """``mean(a) - mean(b)`` over seeds and its standard error ``sqrt(var(a)/n_a + var(b)/n_b)``."""

    mean: float
    se: float
    seeds: tuple[int, int]

    @property
    def beyond(self) -> bool:
        """Whether the difference is at least two standard errors from zero."""
        return abs(self.mean) >= 2 * self.se


def difference(a: Sequence[float], b: Sequence[float]) -> Difference:
    """The difference of the means of ``a`` and ``b`` (two or more values each) and its standard error."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a difference with a standard error needs two values a side, got {len(a)} and {len(b)}")
    se = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    return Difference(statistics.mean(a) - statistics.mean(b), se, (len(a), len(b)))
