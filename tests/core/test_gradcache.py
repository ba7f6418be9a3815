"""GradCache gives the full-batch parameter gradient for every registered objective."""

import copy

import pytest
import torch
from torch import nn

from contrasuite.core.gradcache import cached_backward, warn_if_batchnorm
from contrasuite.core.objectives import OBJECTIVES


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Dropout(0.2), nn.Linear(12, 5)).double()


def _grads(model: nn.Module, objective: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in [*model.parameters(), *objective.parameters()]]


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_parameter_gradient_equals_full_batch(name):
    try:
        objective = OBJECTIVES[name]().double()
    except TypeError as err:
        pytest.skip(f"{name} needs constructor arguments: {err}")
    gen = torch.Generator().manual_seed(1)
    x1, x2 = torch.randn(12, 6, generator=gen, dtype=torch.float64), torch.randn(12, 6, generator=gen, dtype=torch.float64)
    chunks = [(x1[i : i + 5], x2[i : i + 5]) for i in range(0, 12, 5)]  # uneven chunks: 5, 5, 2
    model = _model()
    fresh = copy.deepcopy(objective)  # stateful objectives (EMA statistics) must see each batch once per path

    # reference: one graph over the whole batch, the same RNG draws chunk by chunk
    torch.manual_seed(7)
    outs = [(model(a), model(b)) for a, b in chunks]
    full = objective(torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs]))
    full.backward()
    expected = _grads(model, objective)
    model.zero_grad()

    torch.manual_seed(7)
    loss = cached_backward(lambda c: (model(c[0]), model(c[1])), chunks, fresh)
    got = _grads(model, fresh)
    torch.testing.assert_close(loss, full.detach())
    assert any(g.abs().sum() > 0 for g in got)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-12)


def test_dropout_is_replayed_not_redrawn():
    """Without RNG replay the re-embedding draws new dropout masks and the gradient is wrong."""
    model = _model()
    x = torch.randn(8, 6, dtype=torch.float64)
    chunks = [x[:4], x[4:]]
    objective = OBJECTIVES["infonce"]()
    torch.manual_seed(3)
    ref = torch.cat([model(c) for c in chunks])
    objective(ref[:, :5], ref.flip(0)).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.manual_seed(3)
    cached_backward(model, chunks, lambda z: objective(z[:, :5], z.flip(0)))
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, e)


def test_scale_multiplies_the_gradient():
    model = _model().eval()
    x = torch.randn(8, 6, dtype=torch.float64)
    objective = OBJECTIVES["infonce"]()
    cached_backward(model, [x[:4], x[4:]], lambda z: objective(z, z.flip(0)))
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    cached_backward(model, [x[:4], x[4:]], lambda z: objective(z, z.flip(0)), scale=lambda loss: 8.0 * loss)
    for p, g in zip(model.parameters(), plain):
        torch.testing.assert_close(p.grad, 8.0 * g)


def test_warns_about_batchnorm_in_training_mode():
    net = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    with pytest.warns(UserWarning, match="BatchNorm"):
        assert warn_if_batchnorm(net)
    assert not warn_if_batchnorm(net.eval())


def test_rejects_empty_chunks_and_mismatched_outputs():
    with pytest.raises(ValueError, match="no chunks"):
        cached_backward(lambda c: c, [], lambda z: z.sum())
    calls = iter([torch.zeros(2, 2), (torch.zeros(2, 2), torch.zeros(2, 2))])
    with pytest.raises(ValueError, match="different number"):
        cached_backward(lambda c: next(calls), [0, 1], lambda *z: z[0].sum())


def test_no_sync_wraps_all_chunks_but_the_last():
    import contextlib

    entered = []

    @contextlib.contextmanager
    def no_sync():
        entered.append(1)
        yield

    model = _model().eval()
    x = torch.randn(9, 6, dtype=torch.float64)
    cached_backward(model, [x[:3], x[3:6], x[6:]], lambda z: z.pow(2).sum(), no_sync=no_sync)
    assert len(entered) == 2
