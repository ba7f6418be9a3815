"""Cells of the results tables that the domains' reports write."""

from __future__ import annotations

import statistics
from typing import Sequence


def mean_std(values: Sequence[float], digits: int = 2, scale: float = 1.0) -> str:
    """``"mean ± std"`` over seeds of ``scale * values`` (sample std), the value alone for one, ``-`` for none."""
    scaled = [scale * v for v in values]
    if not scaled:
        return "-"
    if len(scaled) == 1:
        return f"{scaled[0]:.{digits}f}"
    return f"{statistics.mean(scaled):.{digits}f} ± {statistics.stdev(scaled):.{digits}f}"
