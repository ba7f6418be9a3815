"""A trained embedder outside the training loop: a run's net and scoring, or an export's; embed files, score."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

from contrasuite.domains.exporting import load_exported
from contrasuite.domains.metric_learning.evaluate import scorer, scoring_of
from contrasuite.domains.metric_learning.images import read_rgb
from contrasuite.domains.metric_learning.model import NormalizedEmbeddingNet
from contrasuite.domains.metric_learning.objectives import MetricObjective


class Embedder:
    """Embeddings of image files and their retrieval scores (:meth:`from_run`, :meth:`from_export`).

    ``model`` maps float images ``[B, 3, S, S]`` in [0, 1] to embeddings (eval mode); ``scoring`` is
    :func:`~contrasuite.domains.metric_learning.evaluate.scoring_of`'s description."""

    def __init__(self, model: nn.Module, image_size: int, scoring: Mapping[str, Any], batch_size: int = 256) -> None:
        self.model, self.image_size, self.batch_size = model, image_size, batch_size
        self.scoring = dict(scoring)
        self.score = scorer(self.scoring)

    @classmethod
    def from_run(cls, config: Any, modules: Mapping[str, Mapping[str, Tensor]], batch_size: int = 256) -> "Embedder":
        """A run's net and loss terms, rebuilt from its task config and checkpointed modules."""
        model = NormalizedEmbeddingNet(config.model.embedding_dim, pretrained=False, freeze_blocks=config.model.freeze_blocks)
        model.load_state_dict(modules["model"])
        objective = MetricObjective([dict(t) for t in config.objective.terms])
        objective.load_state_dict(modules.get("objective", {}), strict=False)
        return cls(model.eval(), config.data.image_size, scoring_of(objective), batch_size)

    @classmethod
    def from_export(cls, path: Path, batch_size: int = 256) -> "Embedder":
        """What ``contrasuite export`` wrote (the folder or its model file), with its ``config.json``."""
        model, config = load_exported(Path(path), "metric_learning", lambda c: NormalizedEmbeddingNet(
            c["embedding_dim"], pretrained=False, freeze_blocks=c["freeze_blocks"]))
        return cls(model, config["image_size"], config["scoring"], batch_size)

    @torch.no_grad()
    def embed_paths(self, paths: Sequence[Path]) -> Tensor:
        """``[N, D]`` fp32 embeddings (BatchNorm in eval mode)."""
        out = []
        for start in range(0, len(paths), self.batch_size):
            images = torch.stack([read_rgb(Path(p), self.image_size) for p in paths[start : start + self.batch_size]])
            out.append(self.model(images.float() / 255.0).float())
        return torch.cat(out)
