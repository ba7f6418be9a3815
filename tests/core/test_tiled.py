"""Tiled objectives (``tile_size``) equal the dense path: loss and gradients, every pair layout.

Tolerances: relative 1e-5 in float32, 1e-10 in float64, on the loss and on the gradients with respect to
anchors, candidates, extra columns, the objective's own parameters and a grad-requiring ``neg_weight``.
"""

from __future__ import annotations

import copy
import inspect
import math

import pytest
import torch
from torch import nn

from contrasuite.core.gradcache import cached_backward
from contrasuite.core.objectives import DCL, DCLW, CLIPLoss, FocalInfoNCE, InfoNCE, SigLIP, SoftInfoNCE
from contrasuite.core.objectives import OBJECTIVES as REGISTERED
from contrasuite.core.pairs import Pairs, resolve_pairs, two_view
from contrasuite.core.tiling import Tiling, check_tile_size, tiled_rows
from contrasuite.pipelines.bench.objectives import peak_mb

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}
OBJECTIVES = {
    "infonce": lambda tile: InfoNCE(0.1, tile_size=tile),
    "infonce_a0": lambda tile: InfoNCE(0.1, positive_in_denominator=False, tile_size=tile),
    "supcon": lambda tile: InfoNCE(0.1, other_positives_in_denominator=True, tile_size=tile),
    "infonce_dot": lambda tile: InfoNCE(2.0, similarity="dot", tile_size=tile),
    "dcl": lambda tile: DCL(0.1, tile_size=tile),
    "dclw": lambda tile: DCLW(0.1, tile_size=tile),
    "soft_infonce": lambda tile: SoftInfoNCE(tile_size=tile),
    "focal_infonce": lambda tile: FocalInfoNCE(tile_size=tile),
    "clip": lambda tile: CLIPLoss(tile_size=tile),
    "siglip": lambda tile: SigLIP(init_logit_bias=-2.0, tile_size=tile),
}
IMAGE_TEXT = {"clip", "siglip"}
LAYOUTS = ("diagonal", "extra_columns", "labels", "self_labels", "two_view", "pos_mask", "pos_function", "neg_weight")
N, M_EXTRA, D, TILE = 13, 6, 8, 4
NEAR = 0.03


def inputs(kind: str, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Anchors ``[N, D]``, candidates ``[N, D]`` and extra columns ``[M_EXTRA, D]`` (drawn in float64, then cast)."""
    return tuple(t.to(dtype) for t in _inputs(kind, torch.float64, gen))


def _inputs(kind: str, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if kind == "random":
        a, c = torch.randn(N, D, generator=gen, dtype=dtype), torch.randn(N, D, generator=gen, dtype=dtype)
    elif kind == "near_duplicate":
        # Every row near one direction (cosines within ~1e-3 of each other and of 1: near-ties in
        # every tile's max), and exact duplicates among the candidates. Closer copies would put the
        # differences between the logits at fp32's rounding, where the dense path itself has no digits left.
        base = torch.randn(1, D, generator=gen, dtype=dtype)
        a = base + NEAR * torch.randn(N, D, generator=gen, dtype=dtype)
        c = base + NEAR * torch.randn(N, D, generator=gen, dtype=dtype)
        c[N // 2 :] = c[0]
    else:  # hand-made: axis vectors and their negations, exact ties and exact duplicates
        eye = torch.eye(D, dtype=dtype)
        a = torch.cat([eye, -eye])[:N] * 3.0
        c = torch.cat([eye.flip(0), eye])[:N] * 0.5
    extra = torch.randn(M_EXTRA, D, generator=gen, dtype=dtype)
    return a, c, extra


def call_args(layout: str, name: str, a: torch.Tensor, c: torch.Tensor, extra: torch.Tensor, gen: torch.Generator) -> tuple:
    """``(anchors, candidates, kwargs)`` of one layout; ``None`` when the objective cannot take it."""
    labels = torch.randint(0, 4, (N,), generator=gen)
    if layout == "diagonal":
        return a, c, {}
    if layout == "extra_columns":
        if name in IMAGE_TEXT:
            return a, c, {"extra_texts": extra, "extra_images": extra[:3] * 2}
        return a, torch.cat([c, extra]), {}
    if layout == "labels":  # multi-positive, and candidate labels that match no anchor
        return a, torch.cat([c, extra]), {"labels": labels, "candidate_labels": torch.randint(0, 6, (N + M_EXTRA,), generator=gen)}
    if layout in ("self_labels", "two_view"):
        if name in IMAGE_TEXT:
            return None
        if layout == "two_view":
            z, view_labels = two_view(a, c)
            return z, None, {"labels": view_labels}
        return a, None, {"labels": labels}
    mask = torch.rand(N, N + M_EXTRA, generator=gen) < 0.15
    mask[0] = False  # an anchor without positives
    mask[1, :4] = True  # one with several
    if layout == "pos_mask":
        return a, torch.cat([c, extra]), {"pos_mask": mask}
    if layout == "pos_function":
        return a, torch.cat([c, extra]), {"pos_mask": lambda rows, cols: mask[rows, cols]}
    weight = torch.rand(N, N, generator=gen, dtype=a.dtype) * 2
    weight[weight < 0.3] = 0.0  # removed negatives
    return a, c, {"neg_weight": weight}


def _double(args: tuple) -> tuple:
    """The call arguments with every floating tensor in float64 (functions and labels unchanged)."""
    cast = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
    return cast(args[0]), cast(args[1]), {k: cast(v) for k, v in args[2].items()}


def loss_and_grads(objective: nn.Module, anchors, candidates, kwargs: dict) -> list[torch.Tensor]:
    leaves = [anchors.clone().requires_grad_()]
    leaves.append(None if candidates is None else candidates.clone().requires_grad_())
    kw = dict(kwargs)
    for key in ("extra_texts", "extra_images", "neg_weight"):
        if key in kw:
            kw[key] = kw[key].clone().requires_grad_()
            leaves.append(kw[key])
    loss = objective(leaves[0], leaves[1], **kw)
    loss.backward()
    grads = [leaf.grad for leaf in leaves if leaf is not None]
    return [loss.detach()] + grads + [p.grad for p in objective.parameters()]


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("kind", ["random", "near_duplicate", "hand_made"])
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_tiled_equals_dense(name, kind, dtype):
    gen = torch.Generator().manual_seed(3)
    a, c, extra = inputs(kind, dtype, gen)
    checked = 0
    for layout in LAYOUTS:
        args = call_args(layout, name, a, c, extra, gen)
        if args is None:
            continue
        dense = OBJECTIVES[name](None).to(dtype)
        tiled = copy.deepcopy(dense)
        tiled.tile_size = TILE
        want = loss_and_grads(dense, *args)
        got = loss_and_grads(tiled, *args)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g is not None and w is not None, f"{layout}: output {i} has no gradient"
            if rel_err(g, w) >= TOLERANCE[dtype] and dtype == torch.float32:
                # An output that fp32 cannot give to 1e-5 relative (CLIP's logit-scale gradient on
                # near-duplicates, a sum that cancels to ~1e-3 of its terms; over 20 seeds tiled was the
                # closer of the two): then both must be within 1e-5 of the float64 truth, relative to
                # max(|truth|, 1), and dense must indeed miss 1e-5 relative there.
                truth = loss_and_grads(copy.deepcopy(dense).double(), *_double(args))[i]
                assert rel_err(w.double(), truth) >= TOLERANCE[dtype] / 10, f"{layout}: output {i}"
                for value in (g, w):
                    assert float((value.double() - truth).abs().max()) < 1e-5 * max(float(truth.abs().max()), 1.0)
            else:
                assert rel_err(g, w) < TOLERANCE[dtype], f"{layout}: output {i} differs by {rel_err(g, w):.2e}"
        checked += 1
    assert checked >= (5 if name in IMAGE_TEXT else 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_soft_infonce_prior_in_blocks(dtype):
    gen = torch.Generator().manual_seed(4)
    a, c, extra = inputs("random", dtype, gen)
    candidates = torch.cat([c, extra])
    prior = torch.randn(N, N + M_EXTRA, generator=gen, dtype=dtype)
    labels = torch.randint(0, 4, (N,), generator=gen)
    kw = {"prior": prior, "labels": labels, "candidate_labels": torch.randint(0, 4, (N + M_EXTRA,), generator=gen)}
    want = loss_and_grads(SoftInfoNCE(alpha=0.5, beta=1.0).to(dtype), a, candidates, kw)
    got = loss_and_grads(SoftInfoNCE(alpha=0.5, beta=1.0, tile_size=5).to(dtype), a, candidates, kw)
    for g, w in zip(got, want):
        assert rel_err(g, w) < TOLERANCE[dtype]


@pytest.mark.parametrize("name", ["infonce", "supcon", "dcl", "focal_infonce", "clip", "siglip"])
def test_gradcheck_float64(name):
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(6, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    c = torch.randn(9, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    objective = OBJECTIVES[name](2).double()
    if name in IMAGE_TEXT:
        labels = torch.tensor([0, 1, 1, 2, 3, 3])
        fn = lambda a, c: objective(a, c, labels=labels, candidate_labels=torch.tensor([0, 1, 2, 3, 3, 1, 4, 5, 0]))  # noqa: E731
        assert torch.autograd.gradcheck(fn, (a, c))
        return
    weight = torch.rand(6, 9, generator=gen, dtype=torch.float64).add_(0.2).requires_grad_()
    mask = torch.rand(6, 9, generator=gen) < 0.3
    mask[:, 0] = True
    assert torch.autograd.gradcheck(lambda a, c, w: objective(a, c, pos_mask=mask, neg_weight=w), (a, c, weight))


def test_tiled_rows_matches_a_direct_formula():
    """The engine itself: a log-sum-exp over negatives with weights, and a softplus sum, against torch."""
    gen = torch.Generator().manual_seed(6)
    x, y = torch.randn(11, 3, generator=gen, dtype=torch.float64), torch.randn(17, 3, generator=gen, dtype=torch.float64)
    labels, cand = torch.randint(0, 3, (11,), generator=gen), torch.randint(0, 3, (17,), generator=gen)
    pairs = Pairs.of_labels(labels, cand)
    weight = torch.rand(11, 17, generator=gen, dtype=torch.float64)
    s = x @ y.T
    neg = labels[:, None] != cand[None, :]
    want = torch.where(neg, s + weight.log(), -math.inf).logsumexp(dim=1)
    got = tiled_rows(x, y, Tiling(pairs, 4, include_positives=False, weight_columns=17), weight)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    soft = tiled_rows(x, y, Tiling(pairs, 5, include_positives=True, reduction="softplus"))
    assert torch.allclose(soft, torch.nn.functional.softplus(s).sum(dim=1), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="reduction"):
        tiled_rows(x, y, Tiling(pairs, 4, include_positives=True, reduction="max"))


def test_empty_denominator_rows_are_finite():
    """A row whose set is empty (DCL with no negatives) gives log(tiny) and zero gradient, as the dense path."""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    only_positives = Pairs.of_labels(torch.tensor([0]), torch.tensor([0, 0]))
    out = tiled_rows(x[:1], x[1:3], Tiling(only_positives, 1, include_positives=False))
    assert float(out.detach()) == pytest.approx(math.log(torch.finfo(torch.float64).tiny))
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_pairs_forms_agree_with_masks():
    gen = torch.Generator().manual_seed(7)
    labels, cand = torch.randint(0, 4, (9,), generator=gen), torch.randint(0, 4, (12,), generator=gen)
    mask = torch.rand(9, 12, generator=gen) < 0.3
    forms = {
        "labels": Pairs.of_labels(labels, cand, self_offset=2),
        "function": Pairs.of_function(lambda r, c: mask[r, c], (9, 12), mask.device, self_offset=-1),
        "targets": Pairs.single_positive(torch.randint(0, 12, (9,), generator=gen), 12),
        "none": Pairs.no_positives(9, 12, mask.device),
    }
    with pytest.raises(ValueError, match="negative-only columns"):
        forms["none"].transposed()
    for name, pairs in forms.items():
        for p in (pairs, pairs.with_negative_columns(3)) + (() if name == "none" else (pairs.transposed(),)):
            pos, valid = p.pos.clone(), p.valid.clone()
            assert torch.equal(p.positive_counts(), pos.sum(dim=1)), name
            assert torch.equal(p.has_pos, pos.any(dim=1)), name
            rows, cols = p.positive_indices()
            assert torch.equal(torch.stack([rows, cols]), torch.stack(pos.nonzero(as_tuple=True))), name
            n, m = p.shape
            fresh = copy.copy(p)
            if p.targets is not None or p.labels is not None or p.pos_blocks is not None:
                fresh._pos = fresh._valid = None  # block() from the compact form, not the cached masks
            block_pos, block_valid = fresh.block(slice(2, n), slice(1, m))
            assert torch.equal(block_pos, pos[2:, 1:]), name
            assert torch.equal(valid[2:, 1:], torch.ones_like(block_pos) if block_valid is None else block_valid), name
    assert forms["labels"].valid[1, 3] is not None and not bool(forms["labels"].valid[1, 3])


def test_tile_size_validation_and_block_weights_need_tiles():
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="tile_size"):
            check_tile_size(bad)
    gen = torch.Generator().manual_seed(8)
    a = torch.randn(5, 3, generator=gen)
    with pytest.raises(ValueError, match="needs tile_size"):
        InfoNCE()(a, a.clone(), neg_weight=lambda rows, cols: torch.ones(rows.stop - rows.start, cols.stop - cols.start))
    weights = torch.rand(5, 5, generator=gen)
    blocks = InfoNCE(tile_size=2)(a, a.clone(), neg_weight=lambda rows, cols: weights[rows, cols])
    assert torch.equal(blocks, InfoNCE(tile_size=2)(a, a.clone(), neg_weight=weights))  # the same blocks, the same sums


def test_tiled_never_allocates_the_matrix():
    """Peak bytes of a forward+backward at N = M = 4096, D = 16 (the dense logits alone are 64 MiB)
    within ``16 (N + M) D + 8 tile^2`` floats: the factors, their gradients and a few block buffers."""
    torch.manual_seed(0)
    n, dim, tile = 4096, 16, 256
    a = torch.randn(n, dim, requires_grad=True)
    b = torch.randn(n, dim, requires_grad=True)
    matrix_mb = n * n * 4 / 2**20
    bound_mb = (16 * 2 * n * dim + 8 * tile * tile) * 4 / 2**20
    assert bound_mb < matrix_mb / 4
    labels = torch.arange(n) // 4
    steps = {
        "infonce": lambda x, y: InfoNCE(tile_size=tile)(x, y),
        "infonce_labels": lambda x, y: InfoNCE(tile_size=tile)(x, y, labels=labels, candidate_labels=labels),
        "dcl": lambda x, y: DCL(tile_size=tile)(x, y),
        "siglip": lambda x, y: SigLIP(tile_size=tile)(x, y),
        "clip": lambda x, y: CLIPLoss(tile_size=tile)(x, y),
    }
    for name, step in steps.items():
        peak = peak_mb(step, a, b, exact=True)  # the bench's resident-set peak is too coarse for this bound
        assert peak < bound_mb, f"{name}: peak {peak:.1f} MiB, bound {bound_mb:.1f} MiB"
    assert peak_mb(lambda x, y: InfoNCE()(x, y), a, b, exact=True) > matrix_mb  # the check can fail: dense does allocate it


def test_gradcache_with_a_tiled_loss_gives_the_full_batch_gradient():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 5)).double()
    x1, x2 = torch.randn(20, 6, dtype=torch.float64), torch.randn(20, 6, dtype=torch.float64)
    chunks = [(x1[i : i + 6], x2[i : i + 6]) for i in range(0, 20, 6)]
    dense, tiled = CLIPLoss().double(), CLIPLoss(tile_size=3).double()
    dense(model(x1), model(x2)).backward()
    want = [p.grad.clone() for p in [*model.parameters(), *dense.parameters()]]
    model.zero_grad()
    loss = cached_backward(lambda chunk: (model(chunk[0]), model(chunk[1])), chunks, lambda a, b: tiled(a, b))
    with torch.no_grad():
        assert float(loss) == pytest.approx(float(dense(model(x1), model(x2))), rel=1e-12)
    for got, w in zip([p.grad for p in [*model.parameters(), *tiled.parameters()]], want):
        assert rel_err(got, w) < 1e-10


def test_resolve_pairs_keeps_labels_and_functions_compact():
    a = torch.randn(6, 3)
    _, by_labels = resolve_pairs(a, labels=torch.tensor([0, 0, 0, 1, 1, 2]))
    assert by_labels.labels is not None and by_labels._pos is None and by_labels.self_offset == 0
    _, by_function = resolve_pairs(a, a, pos_mask=lambda rows, cols: torch.zeros(rows.stop - rows.start, cols.stop - cols.start))
    assert by_function.pos_blocks is not None and not bool(by_function.has_pos.any())


def test_the_tiles_capability_is_declared_by_exactly_the_objectives_that_take_tile_size():
    """``tiles`` is what the bench and the neg_weight check read; it must match the constructors."""
    for name, cls in REGISTERED.items():
        assert cls.tiles == ("tile_size" in inspect.signature(cls).parameters), name
    assert {"infonce", "dcl", "clip", "siglip"} <= {n for n, c in REGISTERED.items() if c.tiles}
