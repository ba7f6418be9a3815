"""``config.optim``: the optimizer and learning-rate schedule of every domain, and what builds them.

Every task reads one :class:`OptimConfig` at ``config.optim``::

    optim:
      name: sgd                    # sgd | adam | adamw
      lr: 0.12
      weight_decay: 5.0e-4
      momentum: 0.9                # sgd only
      betas: [0.9, 0.999]          # adam, adamw
      eps: 1.0e-8                  # adam, adamw
      warmup: {epochs: 10}         # or {steps: 100}
      schedule: {name: cosine, end: {epochs: 200}, min_lr: 0.0}
      groups:                      # the parameters of named parts, with their own lr or weight decay
        objective: {weight_decay: 0.0}

A task hands :func:`build_optimization` the *parts* of each of its optimizers: named lists of
parameters (``[("head", ...), ("backbone", ...), ("objective", ...)]``). ``groups.<part>`` overrides
``lr`` (or ``lr_scale``, a multiple of ``optim.lr``) and ``weight_decay`` for that part; consecutive parts
with the same settings share one param group. A task with several optimizers (a GAN's discriminator and
generator) builds each one from this same config, and its parts' groups tell them apart
(``groups: {discriminator: {lr: 1.0e-4}}``). Each domain documents its part names.

The schedule is a factor of each param group's lr, a function of the optimisation step ``s`` (counted
from 0; each optimizer's scheduler steps with that optimizer)::

    f(s) = (s + 1) / W                          s < W                (linear warm-up over W steps)
    constant:  f(s) = 1
    step:      f(s) = gamma ** floor(s / every)
    cosine:    f(s) = m + (1 - m) * (1 + cos(pi * p)) / 2
    linear:    f(s) = m + (1 - m) * (1 - p)
    p = min(1, max(0, (s - a) / (T - a))),  a = max(W, start),  T = end   (f = 1 when T <= a)
    m = min_lr / (the param group's lr)

so cosine and linear decay from the group's lr at ``a`` to ``min_lr`` at ``end`` and stay there. Lengths
are ``{steps: N}`` or ``{epochs: E}`` (``round(E * steps per epoch)`` steps).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import torch
from torch import nn

from contrasuite.core.task.config_fields import bounded, one_of
from contrasuite.core.task.errors import ConfigValueError

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "cosine", "linear", "step")

Parts = Sequence[tuple[str, Iterable[nn.Parameter]]]
"""The named parameter lists of one optimizer, in order (a part may be empty)."""


@dataclass
class Length:
    """A span of training: ``steps`` optimisation steps or ``epochs`` epochs (at most one of them non-zero)."""

    steps: int = bounded(0, ge=0)
    epochs: float = bounded(0.0, ge=0)

    def in_steps(self, steps_per_epoch: int, key: str) -> int:
        """The span in steps (``round(epochs * steps_per_epoch)`` for epochs); ``key`` names it in errors."""
        if self.steps and self.epochs:
            raise ConfigValueError(f"{key}: give steps or epochs, not both (got {self.steps} steps, {self.epochs} epochs)")
        return self.steps or round(self.epochs * steps_per_epoch)


@dataclass
class ScheduleConfig:
    """``config.optim.schedule``: the lr after warm-up (the formula in the module docstring)."""

    name: str = one_of("constant", SCHEDULES)
    start: Length = field(default_factory=Length)
    """cosine, linear: the decay starts here (never before warm-up ends)."""
    end: Length = field(default_factory=Length)
    """cosine, linear: the decay reaches ``min_lr`` here (no decay when this is not after the start)."""
    every: Length = field(default_factory=Length)
    """step: the lr is multiplied by ``gamma`` every this many steps or epochs."""
    gamma: float = bounded(0.1, gt=0)
    min_lr: float = bounded(0.0, ge=0)
    """cosine, linear: the lr the decay ends at."""


@dataclass
class GroupConfig:
    """``config.optim.groups.<part>``: settings of one named part's parameters (unset: the optimizer's)."""

    lr: Optional[float] = bounded(None, gt=0)
    lr_scale: Optional[float] = bounded(None, ge=0)
    """The lr as a multiple of ``config.optim.lr`` (instead of ``lr``)."""
    weight_decay: Optional[float] = bounded(None, ge=0)


@dataclass
class OptimConfig:
    """``config.optim`` (module docstring); a domain sets its own defaults with :func:`optim_field`."""

    name: str = one_of("adamw", OPTIMIZERS)
    lr: float = bounded(1e-3, gt=0)
    weight_decay: float = bounded(0.0, ge=0)
    momentum: float = bounded(0.9, ge=0, lt=1)
    """sgd only."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999], metadata={"limits": {"ge": 0, "lt": 1}})
    """adam, adamw only."""
    eps: float = bounded(1e-8, gt=0)
    """adam, adamw only."""
    warmup: Length = field(default_factory=Length)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    groups: dict[str, GroupConfig] = field(default_factory=dict)


def optim_field(**values: Any) -> Any:
    """A domain config's ``optim`` field: an :class:`OptimConfig` with ``values`` as its defaults."""
    return field(default_factory=lambda: OptimConfig(**copy.deepcopy(values)))


@dataclass(frozen=True)
class Schedule:
    """``config.optim``'s warm-up and schedule with every length in steps."""

    name: str
    warmup: int
    start: int
    end: int
    every: int
    gamma: float

    @classmethod
    def of(cls, cfg: OptimConfig, steps_per_epoch: int, key: str = "config.optim") -> Schedule:
        """``cfg``'s schedule for ``steps_per_epoch`` optimisation steps an epoch."""
        s = cfg.schedule
        every = s.every.in_steps(steps_per_epoch, f"{key}.schedule.every")
        if s.name == "step" and every < 1:
            raise ConfigValueError(f"{key}.schedule: name step needs every: {{steps: N}} or {{epochs: E}} of at least one step")
        return cls(s.name, cfg.warmup.in_steps(steps_per_epoch, f"{key}.warmup"),
                   s.start.in_steps(steps_per_epoch, f"{key}.schedule.start"),
                   s.end.in_steps(steps_per_epoch, f"{key}.schedule.end"), every, s.gamma)

    def factor(self, step: int, floor: float = 0.0) -> float:
        """The lr factor ``f(step)`` of the module docstring; ``floor`` is ``m``."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.name == "step":
            return self.gamma ** (step // self.every)
        begin = max(self.warmup, self.start)
        if self.name == "constant" or self.end <= begin:
            return 1.0
        p = min(1.0, max(0.0, (step - begin) / (self.end - begin)))
        decay = 0.5 * (1.0 + math.cos(math.pi * p)) if self.name == "cosine" else 1.0 - p
        return floor + (1.0 - floor) * decay


def _part_settings(cfg: OptimConfig, part: str, key: str) -> dict[str, float]:
    """``lr`` and ``weight_decay`` of ``part``'s parameters."""
    group = cfg.groups.get(part) or GroupConfig()
    if group.lr is not None and group.lr_scale is not None:
        raise ConfigValueError(f"{key}.groups.{part}: give lr or lr_scale, not both")
    lr = group.lr if group.lr is not None else cfg.lr * group.lr_scale if group.lr_scale is not None else cfg.lr
    return {"lr": lr, "weight_decay": cfg.weight_decay if group.weight_decay is None else group.weight_decay}


def param_groups(cfg: OptimConfig, parts: Parts, key: str = "config.optim") -> list[dict[str, Any]]:
    """torch param groups of ``parts``: consecutive parts with the same settings share one; empty parts add none."""
    groups: list[dict[str, Any]] = []
    for part, params in parts:
        params = list(params)
        settings = _part_settings(cfg, part, key)
        if not params:
            continue
        if groups and {k: groups[-1][k] for k in settings} == settings:
            groups[-1]["params"] += params
        else:
            groups.append({"params": params, **settings})
    return groups


def build_optimizer(cfg: OptimConfig, parts: Parts, key: str = "config.optim") -> torch.optim.Optimizer:
    """The ``torch.optim`` optimizer ``cfg.name`` over ``parts``, on the fused kernel (:func:`use_fused_kernel`)."""
    groups = param_groups(cfg, parts, key)
    if cfg.name == "sgd":
        return use_fused_kernel(torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum))
    if len(cfg.betas) != 2:
        raise ConfigValueError(f"{key}.betas: two values (beta1, beta2), got {list(cfg.betas)}")
    adam = torch.optim.Adam if cfg.name == "adam" else torch.optim.AdamW
    return use_fused_kernel(adam(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps))


def use_fused_kernel(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Each param group whose tensors are all floating point on the CPU or CUDA on PyTorch's fused kernel.

    PyTorch's default on the CPU is a loop over the tensors; the fused kernel updates them in one pass, the same
    update up to float rounding (docs/engine.md). Set after construction, so GradScaler keeps its unscale-then-step
    path, and a checkpoint saved before this change resumes on its own kernel (``load_state_dict`` restores each
    group's ``fused``).
    """
    for group in optimizer.param_groups:
        if all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in group["params"]):
            group.update(fused=True, foreach=False)
    return optimizer


@dataclass
class Optimization:
    """A task's optimizers and their per-step schedulers, by optimizer name."""

    optimizers: dict[str, torch.optim.Optimizer]
    schedulers: dict[str, torch.optim.lr_scheduler.LambdaLR]


def build_optimization(cfg: OptimConfig, parts: Mapping[str, Parts], steps_per_epoch: int,
                       key: str = "config.optim") -> Optimization:
    """One optimizer per name of ``parts`` (in that order) and its LambdaLR of :meth:`Schedule.factor`.

    ``groups`` must name parts the task has (a typo would silently change nothing)."""
    known = {part for named in parts.values() for part, _ in named}
    unknown = sorted(set(cfg.groups) - known)
    if unknown:
        raise ConfigValueError(f"{key}.groups.{unknown[0]}: this task has no part {unknown[0]!r}; its parts: {sorted(known)}")
    schedule = Schedule.of(cfg, steps_per_epoch, key)
    optimizers = {name: build_optimizer(cfg, named, key) for name, named in parts.items()}
    schedulers = {name: torch.optim.lr_scheduler.LambdaLR(opt, [_factor(schedule, cfg.schedule.min_lr, g["lr"])
                                                                for g in opt.param_groups])
                  for name, opt in optimizers.items()}
    return Optimization(optimizers, schedulers)


def _factor(schedule: Schedule, min_lr: float, lr: float) -> Callable[[int], float]:
    """``step -> f(step)`` of a param group of learning rate ``lr`` (a plain function: checkpoints keep no state of it)."""
    floor = min_lr / lr if lr > 0 else 0.0
    return lambda step: schedule.factor(step, floor)
