"""Extra negative sources for the paired form (placeholder until core.negatives sources land)."""

from __future__ import annotations

from typing import Any, Mapping

from torch import Tensor, nn


class NegativeSource(nn.Module):
    """``forward(anchors, positives, *, epoch, training) -> (anchors, candidates, pos_mask)``."""

    def forward(self, anchors: Tensor, positives: Tensor, *, epoch: int, training: bool) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError


def build_negative_source(spec: Mapping[str, Any], dim: int) -> NegativeSource | None:
    if not spec:
        return None
    raise ValueError(f"config.negatives: unknown source {spec.get('name')!r}")
