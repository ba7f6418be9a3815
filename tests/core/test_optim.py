"""config.optim (core/task/optim.py): the schedule formula, the param groups of named parts, the refusals."""

import math

import pytest
import torch
from torch import nn

from contrasuite.core.task.errors import ConfigValueError
from contrasuite.core.task.optim import (
    GroupConfig, Length, OptimConfig, Schedule, ScheduleConfig, build_optimization, param_groups,
)


def _lrs(optimizer, scheduler, steps):
    """The lr of every param group before each of ``steps`` optimisation steps."""
    out = []
    for _ in range(steps):
        out.append([g["lr"] for g in optimizer.param_groups])
        optimizer.step()
        scheduler.step()
    return out


def test_warm_up_then_cosine_to_zero_at_the_end():
    s = Schedule("cosine", warmup=10, start=0, end=110, every=0, gamma=0.1)
    assert [s.factor(i) for i in range(10)] == [(i + 1) / 10 for i in range(10)]
    assert s.factor(10) == 1.0 and s.factor(60) == pytest.approx(0.5) and s.factor(110) == 0.0
    assert s.factor(35) == pytest.approx(0.5 * (1 + math.cos(math.pi * 25 / 100)))
    assert s.factor(500) == 0.0  # stays at the end value
    assert s.factor(110, floor=0.2) == pytest.approx(0.2) and s.factor(60, floor=0.2) == pytest.approx(0.6)


def test_linear_decay_starts_at_start_and_an_empty_window_is_constant():
    s = Schedule("linear", warmup=0, start=20, end=40, every=0, gamma=0.1)
    assert [s.factor(i) for i in (0, 19, 20, 30, 40, 99)] == [1.0, 1.0, 1.0, 0.5, 0.0, 0.0]
    assert Schedule("cosine", 5, 0, 0, 0, 0.1).factor(7) == 1.0  # no end: warm-up, then constant
    assert Schedule("linear", 0, 30, 30, 0, 0.1).factor(50) == 1.0


def test_step_and_constant():
    s = Schedule("step", warmup=0, start=0, end=0, every=100, gamma=0.5)
    assert [s.factor(i) for i in (0, 99, 100, 199, 200)] == [1.0, 1.0, 0.5, 0.5, 0.25]
    assert Schedule("constant", 4, 0, 0, 0, 0.1).factor(1) == 0.5
    assert Schedule("constant", 4, 0, 0, 0, 0.1).factor(1000) == 1.0


def test_lengths_in_epochs_are_rounded_steps_and_one_unit_only():
    cfg = OptimConfig(warmup=Length(epochs=1.5), schedule=ScheduleConfig("cosine", end=Length(epochs=10)))
    assert Schedule.of(cfg, 7) == Schedule("cosine", round(1.5 * 7), 0, 70, 0, 0.1)
    with pytest.raises(ConfigValueError, match=r"config\.optim\.warmup: give steps or epochs, not both"):
        Schedule.of(OptimConfig(warmup=Length(steps=3, epochs=1)), 7)
    with pytest.raises(ConfigValueError, match=r"config\.optim\.schedule: name step needs every"):
        Schedule.of(OptimConfig(schedule=ScheduleConfig("step")), 7)


def test_consecutive_parts_with_the_same_settings_share_a_param_group():
    a, b, c = (nn.Linear(2, 2) for _ in range(3))
    cfg = OptimConfig(lr=0.1, weight_decay=0.01, groups={"c": GroupConfig(lr_scale=0.5), "b": GroupConfig(weight_decay=0.0)})
    groups = param_groups(cfg, [("a", a.parameters()), ("empty", []), ("a2", []), ("b", b.parameters()), ("c", c.parameters())])
    assert [(len(g["params"]), g["lr"], g["weight_decay"]) for g in groups] == [(2, 0.1, 0.01), (2, 0.1, 0.0), (2, 0.1 * 0.5, 0.01)]
    merged = param_groups(OptimConfig(lr=0.1), [("a", a.parameters()), ("b", b.parameters())])
    assert len(merged) == 1 and merged[0]["params"] == [*a.parameters(), *b.parameters()]
    with pytest.raises(ConfigValueError, match=r"groups\.c: give lr or lr_scale, not both"):
        param_groups(OptimConfig(groups={"c": GroupConfig(lr=1.0, lr_scale=1.0)}), [("c", c.parameters())])


@pytest.mark.parametrize("name, kind", [("sgd", torch.optim.SGD), ("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)])
def test_the_named_optimizer_gets_the_configured_hyperparameters(name, kind):
    cfg = OptimConfig(name=name, lr=0.3, momentum=0.8, betas=[0.5, 0.99], eps=1e-6, weight_decay=0.02)
    opt = build_optimization(cfg, {"model": [("model", nn.Linear(2, 2).parameters())]}, 1).optimizers["model"]
    group = opt.param_groups[0]
    assert type(opt) is kind and group["lr"] == 0.3 and group["weight_decay"] == 0.02
    if name == "sgd":
        assert group["momentum"] == 0.8
    else:
        assert group["betas"] == (0.5, 0.99) and group["eps"] == 1e-6


def test_several_optimizers_follow_one_schedule_each_group_to_min_lr():
    """A GAN's optimizers: the discriminator's lr from its group, both decayed on one cosine to the same min_lr."""
    d, g = nn.Linear(2, 2), nn.Linear(2, 2)
    cfg = OptimConfig(name="adam", lr=5e-5, groups={"discriminator": GroupConfig(lr=1e-4)},
                      schedule=ScheduleConfig("cosine", end=Length(steps=8), min_lr=1e-8))
    built = build_optimization(cfg, {"discriminator": [("discriminator", d.parameters())],
                                     "generator": [("generator", g.parameters())]}, steps_per_epoch=4)
    assert list(built.optimizers) == ["discriminator", "generator"]
    for name, lr in (("discriminator", 1e-4), ("generator", 5e-5)):
        got = _lrs(built.optimizers[name], built.schedulers[name], 10)
        want = [1e-8 + (lr - 1e-8) * 0.5 * (1 + math.cos(math.pi * min(s, 8) / 8)) for s in range(10)]
        assert [x[0] for x in got] == pytest.approx(want, rel=1e-12)
    assert built.schedulers["generator"].state_dict()["lr_lambdas"] == [None]  # a checkpoint keeps no function
    with pytest.raises(ConfigValueError, match=r"groups\.discriminatr: this task has no part 'discriminatr'"):
        build_optimization(OptimConfig(groups={"discriminatr": GroupConfig(lr=1.0)}),
                           {"generator": [("generator", g.parameters())]}, 1)
