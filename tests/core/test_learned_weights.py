"""AdaMEOW's learned pair weights: equal to the naive N x N x D formula, without its memory."""

import pytest
import torch

from contrasuite.core.negatives.learned_weights import CPU_BLOCK_BYTES, LearnedNegativeWeights, learned_weight_infonce


def saved_bytes(fn):
    """Bytes of every tensor autograd saves for backward while ``fn`` runs, and fn's output."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return total[0], out


def test_matches_naive_forward_and_backward():
    torch.manual_seed(0)
    mod = LearnedNegativeWeights(6, hidden=4, chunk_size=3).double()
    a = torch.randn(7, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    fast = mod(a, b)
    slow = mod.naive(a, b)
    assert fast.shape == (7, 5)
    assert torch.allclose(fast, slow, atol=1e-12)
    g = torch.randn(7, 5, dtype=torch.float64)
    grads_fast = torch.autograd.grad((fast * g).sum(), [a, b, *mod.parameters()])
    grads_slow = torch.autograd.grad((slow * g).sum(), [a, b, *mod.parameters()])
    for x, y in zip(grads_fast, grads_slow):
        assert torch.allclose(x, y, atol=1e-10)


def test_gradcheck():
    torch.manual_seed(1)
    mod = LearnedNegativeWeights(3, hidden=2, chunk_size=2).double()
    a = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: mod(x, y), (a, b))


def test_saved_memory_is_quadratic_not_cubic():
    n, d, h = 256, 64, 16
    mod = LearnedNegativeWeights(d, hidden=h, chunk_size=32)
    a = torch.randn(n, d, requires_grad=True)
    b = torch.randn(n, d, requires_grad=True)
    fast_bytes, fast = saved_bytes(lambda: mod(a, b))
    naive_bytes, _ = saved_bytes(lambda: mod.naive(a, b))
    n2, nd = n * n * 4, n * (d + h) * 4
    assert fast_bytes <= 4 * (n2 + nd), fast_bytes
    assert naive_bytes >= n * n * d * 4  # the naive form keeps an N x N x D tensor
    fast.sum().backward()
    assert a.grad is not None and torch.isfinite(a.grad).all()


def test_no_grad_path_and_shape_errors():
    mod = LearnedNegativeWeights(4)
    with torch.no_grad():
        w = mod(torch.randn(10, 4), torch.randn(3, 4))
    assert w.shape == (10, 3) and ((w > 0) & (w < 1)).all()
    with pytest.raises(ValueError, match="share D"):
        mod(torch.randn(2, 4), torch.randn(2, 5))


def test_automatic_block_fits_the_cpu_budget_and_gives_the_same_weights():
    """chunk_size 0 picks the rows of one cache-sized block; the weights are those of any explicit chunk
    size (up to the order of the hidden sum inside a block's product)."""
    torch.manual_seed(2)
    mod = LearnedNegativeWeights(8, hidden=4)
    a, b = torch.randn(300, 8), torch.randn(700, 8)
    hidden_b = torch.nn.functional.linear(b, mod.first.weight)
    rows = mod.rows_per_chunk(hidden_b)
    assert rows == CPU_BLOCK_BYTES // (700 * 4 * 4) and rows * 700 * 4 * 4 <= CPU_BLOCK_BYTES
    explicit = LearnedNegativeWeights(8, hidden=4, chunk_size=7)
    explicit.load_state_dict(mod.state_dict())
    assert torch.allclose(mod(a, b), explicit(a, b), atol=1e-7, rtol=0)
    with pytest.raises(ValueError, match="chunk_size >= 0"):
        LearnedNegativeWeights(8, chunk_size=-1)


def test_learned_weight_infonce_is_adameows_formula():
    """``-log( exp(l_ii) / sum_j w_ij exp(l_ij) )`` with ``w_ii`` in the denominator, values and gradients,
    against the direct form in float64."""
    torch.manual_seed(3)
    logits = torch.randn(6, 6, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(6, 6, dtype=torch.float64).requires_grad_()
    ours = learned_weight_infonce(logits, weight)
    direct = -torch.log(logits.diagonal().exp() / (weight * logits.exp()).sum(dim=1))
    assert torch.allclose(ours, direct, atol=1e-12)
    for x, y in zip(torch.autograd.grad(ours.sum(), [logits, weight]), torch.autograd.grad(direct.sum(), [logits, weight])):
        assert torch.allclose(x, y, atol=1e-12)
    with pytest.raises(ValueError, match=r"\[N, N\]"):
        learned_weight_infonce(torch.zeros(2, 3), torch.zeros(2, 3))


@pytest.mark.parametrize("n", [7, 700])  # 700: several blocks of logsumexp_rows' scratch
def test_learned_weight_infonce_is_the_autograd_form_to_the_bit(n):
    """The fused loss gives autograd's values and gradients of ``logsumexp(l + log w.clamp_min(tiny)) - diag(l)``
    exactly, weights that underflow to 0 included (their gradient 0, as the clamp's backward gives)."""
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(n, n, generator=g) * 5
    weight = torch.rand(n, n, generator=g)
    weight[weight < 0.05] = 0.0
    upstream = torch.linspace(-1.0, 2.0, n)
    out = []
    for form in ("fused", "autograd"):
        x, w = logits.clone().requires_grad_(), weight.clone().requires_grad_()
        if form == "fused":
            loss = learned_weight_infonce(x, w)
        else:
            loss = torch.logsumexp(x + w.clamp_min(torch.finfo(w.dtype).tiny).log(), dim=1) - x.diagonal()
        out.append((loss.detach(), *torch.autograd.grad((loss * upstream).sum(), [x, w])))
    assert all(torch.equal(a, b) for a, b in zip(*out))
    assert (out[0][2][weight == 0] == 0).all() and out[0][2].abs().sum() > 0
    x = logits.clone().requires_grad_()  # constant weights: the logits' gradient alone
    (grad,) = torch.autograd.grad(learned_weight_infonce(x, weight).mul(upstream).sum(), [x])
    assert torch.equal(grad, out[1][1])
