"""KCL and its kernels against plain loops over the official formula, closed forms, gradcheck, bf16."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import KCL, OBJECTIVES
from contrasuite.core.similarity.kernels import get_kernel, off_diagonal_kernel_sum
from tests.bf16_check import assert_finite_in_bf16, hard_pair


def loop_reference(anchors, positives, t, kernel, gamma):
    """Official utils.py: A = 2 mean k(a_i, p_i); E = c (mean_{i<j} k(a) + mean_{i<j} k(p)), c = 1/2 for log."""
    a = F.normalize(anchors.double(), dim=1)
    p = F.normalize(positives.double(), dim=1)
    n = a.shape[0]
    k = (lambda d2: math.exp(-t * d2)) if kernel == "gaussian" else (lambda d2: -math.log(t * d2 + 1))
    c = 1.0 if kernel == "gaussian" else 0.5
    d2 = lambda x, y: float(((x - y) ** 2).sum())
    align = 2 * sum(k(d2(a[i], p[i])) for i in range(n)) / n
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    energy = c * (sum(k(d2(a[i], a[j])) for i, j in pairs) + sum(k(d2(p[i], p[j])) for i, j in pairs)) / len(pairs)
    return -align + gamma * energy


def test_registered_with_official_defaults():
    obj = OBJECTIVES["kcl"]()
    assert isinstance(obj, KCL) and (obj.t, obj.kernel, obj.gamma) == (2.0, "gaussian", 16.0)


def test_kernels():
    u = 2.0 * torch.tensor([0.0, 1.0, 4.0])  # t d^2 with t = 2
    assert torch.allclose(get_kernel("gaussian").value_(u.clone()), torch.exp(torch.tensor([0.0, -2.0, -8.0])))
    assert torch.allclose(get_kernel("log").value_(u.clone()), -torch.log(torch.tensor([1.0, 3.0, 9.0])))
    for name, slope in (("gaussian", -torch.exp(-u)), ("log", -1 / (1 + u))):  # -dk/du from the value
        kernel = get_kernel(name)
        assert torch.allclose(kernel.neg_slope_(kernel.value_(u.clone())), -slope)
    with pytest.raises(ValueError, match="unknown kernel 'riesz'"):
        get_kernel("riesz")


@pytest.mark.parametrize("kernel", ["gaussian", "log"])
def test_off_diagonal_kernel_sum_value_and_gradient(kernel):
    # Against autograd through the plain formula (cdist on normalised rows), with a duplicate row.
    torch.manual_seed(0)
    x = torch.randn(6, 3, dtype=torch.float64)
    x[4] = x[1]
    ours = x.clone().requires_grad_()
    ref = x.clone().requires_grad_()
    w = torch.randn(6, dtype=torch.float64)
    (off_diagonal_kernel_sum(F.normalize(ours, dim=1), get_kernel(kernel), 1.5) * w).sum().backward()
    z = F.normalize(ref, dim=1)
    d2 = (2 - 2 * z @ z.T).clamp_min(0)
    k = torch.exp(-1.5 * d2) if kernel == "gaussian" else -torch.log1p(1.5 * d2)
    expected = torch.where(torch.eye(6, dtype=torch.bool), 0.0, k).sum(1)
    (expected * w).sum().backward()
    got = off_diagonal_kernel_sum(F.normalize(x, dim=1), get_kernel(kernel), 1.5)
    assert torch.allclose(got, expected, atol=1e-12) and torch.allclose(ours.grad, ref.grad, atol=1e-10)
    # Batched views [V, N, D] (each view on its own): close rows, gradcheck off the sphere too.
    views = x[:4].reshape(2, 2, 3).repeat(1, 2, 1) + 0.1 * torch.randn(2, 4, 3, dtype=torch.float64)
    energy = lambda v: off_diagonal_kernel_sum(v, get_kernel(kernel), 1.5)
    assert torch.allclose(energy(views)[1], energy(views[1]))
    assert torch.autograd.gradcheck(energy, (views.requires_grad_(),))


def test_identical_embeddings_closed_form():
    z = torch.ones(6, 4)
    # d = 0 everywhere: Gaussian A = 2, E = 2 -> -2 + 16 * 2; log kernel: every term is 0.
    assert KCL()(z, z.clone()).item() == pytest.approx(30.0, rel=1e-6)
    assert KCL(kernel="log")(z, z.clone()).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("kernel", ["gaussian", "log"])
def test_matches_loop(kernel):
    torch.manual_seed(1)
    a, p = torch.randn(7, 5), torch.randn(7, 5)
    loss = KCL(t=1.5, kernel=kernel, gamma=4.0)(a, p)
    assert loss.item() == pytest.approx(loop_reference(a, p, 1.5, kernel, 4.0), rel=1e-5)


@pytest.mark.parametrize("kernel", ["gaussian", "log"])
def test_official_pdist_form(kernel):
    torch.manual_seed(2)
    a, p = F.normalize(torch.randn(8, 4), dim=1), F.normalize(torch.randn(8, 4), dim=1)
    if kernel == "gaussian":
        energy = torch.pdist(a).pow(2).mul(-2).exp().mean() + torch.pdist(p).pow(2).mul(-2).exp().mean()
        align = 2 * (a - p).norm(dim=1).pow(2).mul(-2).exp().mean()
    else:
        energy = -0.5 * torch.log(2 * torch.pdist(a).pow(2) + 1).mean() - 0.5 * torch.log(2 * torch.pdist(p).pow(2) + 1).mean()
        align = 2 * -torch.log(2 * (a - p).norm(dim=1).pow(2) + 1).mean()
    official = -align + 16.0 * energy
    assert KCL(kernel=kernel)(a, p).item() == pytest.approx(official.item(), rel=1e-5)


@pytest.mark.parametrize("kernel", ["gaussian", "log"])
def test_gradcheck_float64(kernel):
    torch.manual_seed(3)
    a = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    p = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, p: KCL(kernel=kernel)(a, p), (a, p))


@pytest.mark.parametrize("kernel", ["gaussian", "log"])
@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_finite(kernel, near_duplicate):
    # KCL has no temperature; t = 100 gives the sharpest kernel a temperature of 0.01 would.
    a, p = hard_pair(4, near_duplicate)
    assert_finite_in_bf16(lambda: KCL(t=100.0, kernel=kernel)(a, p), a, p)


def test_bad_input_errors():
    a, p = torch.randn(4, 3), torch.randn(4, 3)
    with pytest.raises(ValueError, match="no extra candidate columns"):
        KCL()(a, torch.randn(6, 3))
    with pytest.raises(ValueError, match="neg_weight"):
        KCL()(a, p, neg_weight=torch.ones(4, 4))
    with pytest.raises(ValueError, match="KCL pairs anchor i with candidate i"):
        KCL()(a, p, labels=torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="unknown kernel"):
        KCL(kernel="imq")
    with pytest.raises(ValueError, match="t must be > 0"):
        KCL(t=0.0)


def test_gram_gradient_symmetric_shortcut_equals_the_transposed_sum():
    """KCL's slope matrix is symmetric, so its backward skips the transposed copy: ``(W + W^T) z`` with
    ``W = diag(w) e`` must be the same either way, batched or not, with and without row weights."""
    from contrasuite.core.similarity import gram_gradient

    gen = torch.Generator().manual_seed(0)
    e = torch.rand(2, 6, 6, generator=gen, dtype=torch.float64)
    e = e + e.mT
    z = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    w = torch.rand(2, 6, generator=gen, dtype=torch.float64)
    for weight in (None, w):
        expected = torch.stack([(torch.diag(wv) @ ev + (torch.diag(wv) @ ev).T) @ zv
                                for ev, zv, wv in zip(e, z, torch.ones_like(w) if weight is None else w)])
        torch.testing.assert_close(gram_gradient(e, z, weight, symmetric=True), expected)
        torch.testing.assert_close(gram_gradient(e, z, weight), expected)
