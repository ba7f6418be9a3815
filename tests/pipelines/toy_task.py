"""A tiny two-view contrastive task on random data, for the engine tests (config: ``task: toy_task:ToyTask``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from contrasuite.core.objectives import ObjectiveSum
from contrasuite.core.task.protocol import StepContext, TaskContext


@dataclass
class ToyObjective:
    terms: list[dict[str, Any]] = field(default_factory=lambda: [{"name": "infonce", "temperature": 0.5}])


@dataclass
class ToyConfig:
    n: int = 64
    dim: int = 8
    batch_size: int = 16
    """Global batch size (split over ranks)."""
    hidden: int = 16
    lr: float = 0.1
    noise: float = 0.1
    """Fixed per-sample view noise (from the seeded data generator)."""
    augment: float = 0.05
    """Fresh noise added in every step from the global RNG (exercises RNG restore)."""
    dropout: float = 0.0
    batchnorm: bool = False
    """A BatchNorm1d after the first layer: buffers, which DDP broadcasts before a training forward."""
    unsynced: bool = False
    """A scale parameter outside the DDP wrapper, trained on each rank's own loss (ranks diverge)."""
    record_evals: bool = False
    """Append each ``evaluate`` call to ``RUN_DIR/evals_rank<r>.txt`` (which ranks evaluate)."""
    sleep: float = 0.0
    nan_at_step: int = -1
    nan_steps: int = 1
    """How many steps from ``nan_at_step`` on have a NaN loss."""
    gradcache_chunk: int = 0
    data_file: Optional[str] = None
    """A file under the data root that must exist (exercises missing-data errors)."""
    objective: ToyObjective = field(default_factory=ToyObjective)


class ToyTask:
    config_class = ToyConfig

    def setup(self, ctx: TaskContext) -> None:
        self.ctx, cfg = ctx, ctx.config
        if cfg.data_file and not (ctx.data_root / cfg.data_file).is_file():
            raise FileNotFoundError(f"toy data file not found: {ctx.data_root / cfg.data_file}")
        self.cfg = cfg
        gen = torch.Generator().manual_seed(1234)
        x = torch.randn(cfg.n, cfg.dim, generator=gen)
        self.v1 = x + cfg.noise * torch.randn(cfg.n, cfg.dim, generator=gen)
        self.v2 = x + cfg.noise * torch.randn(cfg.n, cfg.dim, generator=gen)
        norm = [nn.BatchNorm1d(cfg.hidden)] if cfg.batchnorm else []
        self.model = nn.Sequential(
            nn.Linear(cfg.dim, cfg.hidden), *norm, nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(cfg.hidden, cfg.dim)
        ).to(ctx.device)
        self.net = ctx.wrap(self.model)
        self.scale = nn.Parameter(torch.ones((), device=ctx.device)) if cfg.unsynced else None
        self.objective = ObjectiveSum(cfg.objective.terms).to(ctx.device)
        extra = [self.scale] if self.scale is not None else []
        self.opt = torch.optim.SGD([*self.model.parameters(), *self.objective.parameters(), *extra], lr=cfg.lr, momentum=0.9)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=5, gamma=0.5)

    def modules(self):
        learnable = any(True for _ in self.objective.parameters())
        extra = {"scale": nn.ParameterList([self.scale])} if self.scale is not None else {}
        return {"model": self.model, **({"objective": self.objective} if learnable else {}), **extra}

    def optimizers(self):
        return {"model": self.opt}

    def schedulers(self):
        return {"model": self.sched}

    def batches(self, epoch: int):
        cfg, ctx = self.cfg, self.ctx
        perm = torch.randperm(cfg.n, generator=torch.Generator().manual_seed(ctx.seed * 1000 + epoch))
        local = cfg.batch_size // ctx.world_size
        out = []
        for b in range(cfg.n // cfg.batch_size):
            idx = perm[b * cfg.batch_size + ctx.rank * local : b * cfg.batch_size + (ctx.rank + 1) * local]
            out.append((self.v1[idx], self.v2[idx]))
        return out

    def _views(self, batch):
        v1, v2 = (v.to(self.ctx.device) for v in batch)
        if self.cfg.augment:
            v1 = v1 + self.cfg.augment * torch.randn_like(v1)
        return v1, v2

    def train_step(self, batch, step: StepContext):
        if self.cfg.sleep:
            time.sleep(self.cfg.sleep)
        v1, v2 = self._views(batch)
        if self.cfg.gradcache_chunk:
            k = self.cfg.gradcache_chunk
            chunks = [(v1[i : i + k], v2[i : i + k]) for i in range(0, v1.shape[0], k)]
            loss = step.optimize_cached(
                "model", lambda c: (self.net(c[0]), self.net(c[1])), chunks,
                lambda z1, z2: self.objective(z1, z2, pos_mask=torch.eye(z1.shape[0], dtype=torch.bool, device=z1.device)),
            )
            return {"loss": float(loss.detach())}
        with step.autocast():
            z1, z2 = self.net(v1), self.net(v2)
        cand = self.ctx.gather(z2)
        n = z1.shape[0]
        pos = torch.zeros(n, cand.shape[0], dtype=torch.bool, device=z1.device)
        pos[torch.arange(n), self.ctx.rank * n + torch.arange(n)] = True
        loss = self.objective(z1, cand, pos_mask=pos)
        if self.scale is not None:
            loss = loss * self.scale
        if 0 <= step.step - self.cfg.nan_at_step < self.cfg.nan_steps:
            loss = loss * float("nan")
        step.optimize("model", loss, terms={"objective": loss})
        return {"loss": float(loss.detach())}

    def evaluate(self, split: str = "val"):
        if self.cfg.record_evals:
            with (self.ctx.run_dir / f"evals_rank{self.ctx.rank}.txt").open("a") as f:
                f.write(split + "\n")
        half = self.cfg.n // 2
        sl = slice(0, half) if split == "val" else slice(half, None)
        with torch.no_grad():  # through the DDP wrapper, as a task may do: it must not wait for other ranks
            z1 = nn.functional.normalize(self.net(self.v1[sl].to(self.ctx.device)), dim=1)
            z2 = nn.functional.normalize(self.net(self.v2[sl].to(self.ctx.device)), dim=1)
        acc = (z1 @ z2.T).argmax(1).eq(torch.arange(z1.shape[0], device=z1.device)).float().mean()
        return {"top1": float(acc), "pos_sim": float((z1 * z2).sum(1).mean())}

    def embed_for_health(self, batch):
        v1, v2 = (v.to(self.ctx.device) for v in batch)
        return self.model(v1), self.model(v2)
