"""Train a few steps of several configs in one process: ``python rank_equality_worker.py OUT SPEC...``.

Run plainly (one process) or under ``torchrun --nproc_per_node 2``; ``--rank-invariant-layers`` fixes
the layers that differ by rank by design (:func:`rank_invariant_layers`); each ``SPEC`` is
``NAME=CONFIG[|OVERRIDE...]`` and trains through the real :class:`Trainer` into ``OUT/w<world>/NAME``
with validation skipped (the test compares the trained parameters in ``last.pt``). One process per
world size for all configs, so the imports and process-group start are paid once.
"""

import functools
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from contrasuite.pipelines import distributed
from contrasuite.pipelines.config import find_config, load_config
from contrasuite.pipelines.trainer import Trainer

RUN = ("run.progress=false", "run.eval_every_epochs=0", "run.health_every_steps=0", "run.log_every_steps=0",
       "run.checkpoint_every_steps=0", "run.resume=never", "run.deterministic=true")


def main(out: Path, specs: list[str], flags: set[str]) -> None:
    world = distributed.env_info().world_size
    for spec in specs:
        name, _, rest = spec.partition("=")
        config, *overrides = rest.split("|")
        run_dir = out / f"w{world}" / name
        loaded = load_config(find_config(config), [*RUN, f"run.output_root={out}", *overrides])
        trainer = Trainer(loaded, run_dir=run_dir)
        trainer.validate = dict  # no validation: parameters and gradients are compared, not metrics
        if "--rank-invariant-layers" in flags:
            rank_invariant_layers(trainer)
        grads = record_gradients(trainer)
        trainer.fit()
        if trainer.dist.is_main:
            torch.save(grads, run_dir / "gradients.pt")


def rank_invariant_layers(trainer: Trainer) -> None:
    """Every BatchNorm normalises with its running statistics, not the batch's, and every dropout is off.

    Both depend on the rank by design: without SyncBatchNorm (CUDA only) a rank's batch statistics are
    those of its shard, and each rank draws its own dropout masks. With these layers fixed, everything
    else (shards, draws, gathers, gradient averaging) must agree with one process exactly."""
    for module in trainer.task.modules().values():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.forward = functools.partial(_running_batchnorm, m)
            elif isinstance(m, nn.modules.dropout._DropoutNd):
                m.p = 0.0


def _running_batchnorm(m: nn.modules.batchnorm._BatchNorm, x: torch.Tensor) -> torch.Tensor:
    return F.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, False, 0.0, m.eps)


def record_gradients(trainer: Trainer) -> list[dict[str, torch.Tensor]]:
    """Every optimizer step's gradients (as the optimizer sees them), keyed ``optimizer:module.parameter``."""
    names = {id(p): f"{m}.{n}".replace("module.", "") for m, mod in trainer.task.modules().items()
             for n, p in mod.named_parameters()}
    steps: list[dict[str, torch.Tensor]] = []

    def hook(opt: torch.optim.Optimizer, args: tuple, kwargs: dict, name: str) -> None:
        steps.append({f"{name}:{names[id(p)]}": p.grad.detach().clone()
                      for group in opt.param_groups for p in group["params"] if p.grad is not None})

    for name, opt in trainer.task.optimizers().items():
        opt.register_step_pre_hook(lambda o, a, k, name=name: hook(o, a, k, name))
    return steps


if __name__ == "__main__":
    args = sys.argv[2:]
    try:
        main(Path(sys.argv[1]), [a for a in args if not a.startswith("--")], {a for a in args if a.startswith("--")})
    finally:  # as the CLI does: a group left to interpreter shutdown made gloo abort a rank now and then (CI)
        distributed.shutdown()
