"""A trained embedder outside the training loop: rebuild net and loss terms from a run's config, embed files, score."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from contrasuite.domains.metric_learning.evaluate import scorer_for
from contrasuite.domains.metric_learning.images import normalize, read_rgb
from contrasuite.domains.metric_learning.model import EmbeddingNet
from contrasuite.domains.metric_learning.objectives import MetricObjective


class Embedder:
    """Embeddings of image files and their retrieval scores, with a task config and checkpointed modules."""

    def __init__(self, config: Any, modules: Mapping[str, Mapping[str, Tensor]], batch_size: int = 256) -> None:
        self.image_size = config.data.image_size
        self.batch_size = batch_size
        self.model = EmbeddingNet(config.model.embedding_dim, pretrained=False, freeze_blocks=config.model.freeze_blocks)
        self.model.load_state_dict(modules["model"])
        self.model.eval()
        terms = [dict(t) for t in config.objective.terms]
        self.objective = MetricObjective(terms)
        self.objective.load_state_dict(modules.get("objective", {}), strict=False)
        self.score = scorer_for(self.objective)

    @torch.no_grad()
    def embed_paths(self, paths: Sequence[Path]) -> Tensor:
        """``[N, D]`` fp32 embeddings (BatchNorm in eval mode)."""
        out = []
        for start in range(0, len(paths), self.batch_size):
            images = torch.stack([read_rgb(Path(p), self.image_size) for p in paths[start : start + self.batch_size]])
            out.append(self.model(normalize(images)).float())
        return torch.cat(out)
