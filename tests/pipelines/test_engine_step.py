"""The step context: clipping, scheduler stepping, non-finite handling, fp16 scaling, GradCache."""

import contextlib

import pytest
import torch
from torch import nn

from contrasuite.core.task.protocol import StepContext
from contrasuite.pipelines.step import NonFiniteStepError, Step


def _setup(grad_clip=None, non_finite="stop", scaler=None, grad_clip_value=None):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    step = Step(epoch=0, step=5, optimizers={"net": opt}, schedulers={"net": sched},
                autocast=contextlib.nullcontext, scaler=scaler, grad_clip=grad_clip, non_finite=non_finite,
                no_sync=contextlib.nullcontext, grad_clip_value=grad_clip_value)
    return model, opt, sched, step


def test_step_is_a_step_context_and_steps_everything():
    model, opt, sched, step = _setup()
    assert isinstance(step, StepContext)
    before = model.weight.detach().clone()
    step.optimize("net", model(torch.randn(8, 4)).pow(2).sum())
    assert not torch.equal(model.weight, before)
    assert sched.last_epoch == 1 and opt.param_groups[0]["lr"] == 0.5
    assert model.weight.grad is None  # zeroed (set to None)
    assert step.stats["grad_norm/net"] > 0


def test_grad_clip_bounds_the_update():
    model, _, _, step = _setup(grad_clip=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    step.optimize("net", 1000 * model(torch.randn(8, 4)).sum())
    change = torch.sqrt(sum((p.detach() - b).pow(2).sum() for p, b in zip(model.parameters(), before)))
    assert change.item() == pytest.approx(0.01, rel=1e-4)  # lr 1 * clipped norm 0.01
    assert step.stats["grad_norm/net"] > 0.01  # the logged norm is the one before clipping


def test_grad_clip_value_clamps_each_element_and_keeps_infinite_gradients_visible():
    model, _, _, step = _setup(grad_clip_value=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    step.optimize("net", 1000 * model(torch.randn(8, 4)).sum())
    change = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    assert change.abs().max().item() == pytest.approx(0.5) and step.stats["grad_norm/net"] > 100
    model, _, _, step = _setup(grad_clip_value=0.5)
    with torch.no_grad():
        model.weight[0, 0] = 0.0
    loss = model.weight[0, 0].sqrt()  # 0, with gradient +inf
    with pytest.raises(NonFiniteStepError, match="non-finite gradient norm"):  # clamping inf to 0.5 must not hide it
        step.optimize("net", loss)


def test_unknown_optimizer_is_named():
    model, _, _, step = _setup()
    with pytest.raises(KeyError, match=r"no optimizer 'gen'; it has \['net'\]"):
        step.optimize("gen", model(torch.randn(2, 4)).sum())


def test_non_finite_gradient_stops_or_skips():
    model, _, _, step = _setup()
    with torch.no_grad():
        model.weight[0, 0] = 0.0
    loss = model.weight.abs().sqrt().sum()  # finite loss, non-finite gradient at 0
    assert torch.isfinite(loss)
    with pytest.raises(NonFiniteStepError, match=r"step 5 \(epoch 0\), optimizer 'net': non-finite gradient norm"):
        step.optimize("net", loss)
    model, _, sched, step = _setup(non_finite="skip")
    before = model.weight.detach().clone()
    step.optimize("net", model(torch.randn(2, 4)).sum() * float("nan"))
    assert torch.equal(model.weight, before) and step.stats["skipped/net"] == 1.0 and sched.last_epoch == 0


def test_fp16_scaler_scales_and_updates_once():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    model, _, _, step = _setup(scaler=scaler)
    ref_model, ref_opt, _, ref_step = _setup()
    x = torch.randn(8, 4)
    step.optimize("net", model(x).pow(2).mean())
    ref_step.optimize("net", ref_model(x).pow(2).mean())
    step.finish()
    torch.testing.assert_close(model.weight, ref_model.weight)  # unscaled before the update
    assert scaler.get_scale() == 2.0**10  # growth only after growth_interval good steps


def test_optimize_cached_equals_optimize():
    x = torch.randn(10, 4)
    loss_fn = lambda z: z.pow(2).sum(1).softmax(0).max()  # couples the whole batch  # noqa: E731
    model, _, _, step = _setup()
    ref_model, _, _, ref_step = _setup()
    step.optimize_cached("net", model, [x[:3], x[3:7], x[7:]], loss_fn)
    ref_step.optimize("net", loss_fn(ref_model(x)))
    torch.testing.assert_close(model.weight, ref_model.weight)


def test_non_finite_loss_and_weights_are_named():
    model, _, _, step = _setup()
    loss = model(torch.randn(2, 4)).sum()
    terms = {"0:infonce": loss * float("nan"), "1:l1": loss}
    with pytest.raises(NonFiniteStepError, match=r"step 5 \(epoch 0\), optimizer 'net': non-finite loss \[nan\] "
                                                  r"from terms \['0:infonce'\]"):
        step.optimize("net", sum(terms.values()), terms=terms)
    model, opt, _, step = _setup(non_finite="skip")  # an update cannot be skipped, whatever run.non_finite says
    step._param_names = {id(model.bias): "model.bias"}
    opt.param_groups[0]["params"] = [model.bias]
    opt.param_groups[0]["lr"] = float("inf")
    with pytest.raises(NonFiniteStepError, match=r"the update made the weights non-finite \(model.bias, gradient norm"):
        step.optimize("net", model(torch.randn(2, 4)).sum())


def _with_grads(grads):
    params = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    return params


def _bits(t):
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grad_clip_scales_exactly_as_clip_grad_norm(dtype):
    """Skipping a clip that multiplies by 1 changes no bit: every max_norm around the norm gives torch's gradients."""
    torch.manual_seed(0)
    model = nn.Linear(64, 32).to(dtype)
    model(torch.randn(16, 64, dtype=dtype)).pow(2).sum().backward()
    grads = [p.grad for p in model.parameters()]
    norm = nn.utils.get_total_norm(grads)
    for rel in [k * 1e-3 for k in range(-20, 21)] + [k * 1e-7 for k in range(-20, 21)]:
        max_norm = float(norm) * (1 + rel)
        ours, reference = _with_grads(grads), _with_grads(grads)
        _setup(grad_clip=max_norm)[3]._clip(ours, norm, float(norm))
        nn.utils.clip_grad_norm_(reference, max_norm)
        assert all(torch.equal(_bits(p.grad), _bits(r.grad)) for p, r in zip(ours, reference)), rel
