"""The negative-source contract: every registered source builds from its defaults, returns the declared
shapes, dtypes and gradient, feeds any objective, and each adapter equals the function it adapts."""

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.negatives import (
    NEGATIVE_SOURCES,
    FeatureTransformation,
    Negatives,
    NegativeQueue,
    NegativeSource,
    build_negative_source,
    mine_hard_negatives,
    mochi,
    per_anchor_columns,
    register_negative_source,
)
from contrasuite.core.objectives import InfoNCE

N, D = 6, 8


def batch(dtype=torch.float32, grad=False, seed=0) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    a, k = F.normalize(torch.randn(2, N, D, generator=g, dtype=dtype), dim=2)
    return a.requires_grad_(grad), k.requires_grad_(grad)


def filled(name: str, **params) -> NegativeSource:
    """The source built from its defaults (and ``params``), after two steps of keys."""
    source = build_negative_source(name, dim=D, **params)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        source.update(*F.normalize(torch.randn(2, N, D, generator=g), dim=2))
    return source


@pytest.mark.parametrize("name", sorted(NEGATIVE_SOURCES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_source_returns_the_declared_shapes_dtypes_and_gradient(name, dtype):
    source = filled(name)
    assert isinstance(source, NegativeSource)
    anchors, candidates = batch(dtype, grad=True)
    out = source(anchors, candidates, generator=torch.Generator().manual_seed(0))
    assert isinstance(out, Negatives) and out.grad == source.grad
    assert out.columns.dim() == 2 and out.columns.shape[1] == D and out.columns.dtype == dtype
    assert (out.columns.shape[0] > 0) == source.adds_columns or out.own is not None
    assert out.columns.requires_grad == out.grad
    if out.own is not None:
        assert out.own.shape[0] == N and out.own.shape[2] == D and out.own.dtype == dtype
        assert out.own.requires_grad == out.grad
    k = out.columns.shape[0]
    if out.weight is not None:
        assert out.weight.shape == (N, N + k) and out.weight.dtype == dtype
    assert (out.anchors is not None) == source.mixes_positives
    for replaced, given in ((out.anchors, anchors), (out.candidates, candidates)):
        if replaced is not None:
            assert replaced.shape == given.shape and replaced.dtype == dtype and replaced.requires_grad

    inputs = out.inputs(anchors, candidates)
    m = N + k + (0 if out.own is None else N * out.own.shape[1])
    assert inputs.candidates.shape == (m, D) and inputs.pos_mask.shape == (N, m)
    assert torch.equal(inputs.pos_mask[:, :N], torch.eye(N, dtype=torch.bool)) and not inputs.pos_mask[:, N:].any()
    loss = InfoNCE(temperature=0.2)(inputs.anchors, inputs.candidates, pos_mask=inputs.pos_mask,
                                    neg_weight=inputs.neg_weight)
    assert torch.isfinite(loss)
    loss.backward()
    assert anchors.grad is not None and torch.isfinite(anchors.grad).all()


@pytest.mark.parametrize("name", sorted(NEGATIVE_SOURCES))
def test_a_seeded_call_repeats_and_an_empty_source_adds_nothing(name):
    anchors, candidates = batch()
    source = filled(name)
    first, again = (source(anchors, candidates, generator=torch.Generator().manual_seed(3)) for _ in range(2))
    for field in ("columns", "own", "weight", "anchors", "candidates"):
        x, y = getattr(first, field), getattr(again, field)
        assert (x is None and y is None) or torch.equal(x, y), field
    fresh = build_negative_source(name, dim=D)(anchors, candidates, generator=torch.Generator().manual_seed(3))
    assert fresh.columns.shape == (0, D) and fresh.own is None  # nothing queued yet: no columns, not random ones


def test_queue_source_is_the_queue():
    source, queue = filled("queue", size=10), NegativeQueue(10, D)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        queue.enqueue(torch.cat(list(F.normalize(torch.randn(2, N, D, generator=g), dim=2))))
    q, k = batch()
    assert torch.equal(source(q, k).columns, queue.negatives())
    inputs = source(q, k).inputs(q, k)
    expected = queue.extend(k)
    assert torch.equal(inputs.candidates, expected[0]) and torch.equal(inputs.pos_mask, expected[1])
    assert inputs.neg_weight is None
    assert set(source.state_dict()) == {"queue.keys", "queue.ptr", "queue.filled"}
    shares = [source(q, k, rank=r, world=2).columns for r in range(2)]
    assert torch.equal(torch.stack(shares, 1).reshape(-1, D), queue.negatives())  # rank r holds queue[r::2]
    with pytest.raises(ValueError, match="divisible by the 3 ranks"):
        source(q, k, rank=0, world=3)


def test_mochi_source_is_mochi_on_the_queue():
    source = filled("mochi", size=12, n_hard=5, s=3, s_prime=2, warmup_epochs=1)
    q, k = batch()
    assert source(q, k, epoch=0).own is None  # warm-up: the queue only
    out = source(q, k, epoch=1, generator=torch.Generator().manual_seed(4))
    pool = source.queue.negatives()
    synthetic = mochi(q, pool, 5, 3, 2, generator=torch.Generator().manual_seed(4))
    assert torch.equal(out.own, synthetic) and torch.equal(out.columns, pool)
    inputs = out.inputs(q, k)
    expected = per_anchor_columns(torch.cat([k, pool]), None, synthetic)
    for got, want in zip((inputs.candidates, inputs.pos_mask, inputs.neg_weight), expected):
        assert torch.equal(got, want)


@pytest.mark.parametrize("size", [12, 0])
def test_feature_transformation_source_is_feature_transformation(size):
    source = filled("feature_transformation", size=size)
    q, k = batch(grad=True)
    out = source(q, k, generator=torch.Generator().manual_seed(5))
    queued = source.queue.negatives() if size else None
    want = FeatureTransformation()(q, k, queued, generator=torch.Generator().manual_seed(5))
    assert torch.equal(out.anchors, want.anchors)
    assert torch.equal(torch.cat([out.candidates, out.columns]), want.candidates)
    assert out.columns.shape[0] == (12 if size else 0) and source.adds_columns == bool(size)
    assert torch.equal(out.inputs(q, k).pos_mask, want.pos_mask)


def test_topk_source_is_mining():
    source = build_negative_source("topk", dim=D, k=2)
    q, k = batch()
    assert torch.equal(source(q, k).weight, mine_hard_negatives(q, k, k=2).neg_weight)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    pos_mask = labels[:, None] == labels[None, :]
    assert torch.equal(source(q, k, pos_mask=pos_mask).weight, mine_hard_negatives(q, k, k=2, pos_mask=pos_mask).neg_weight)
    clipped = build_negative_source("topk", dim=D)(q, k).weight  # the default k = 16 clipped to the 6 candidates
    assert torch.equal(clipped, mine_hard_negatives(q, k, k=N).neg_weight)


class GeneratedNegatives(nn.Module):
    """A test-local source whose columns carry gradient: a learned map of the candidates (as generated
    negatives embedded by the model would)."""

    adds_columns, mixes_positives, grad = True, False, True

    def __init__(self, dim: int, scale: float = 0.5) -> None:
        super().__init__()
        self.map = nn.Linear(dim, dim)
        self.scale = scale

    def forward(self, anchors, candidates, *, pos_mask=None, epoch=0, generator=None, rank=0, world=1) -> Negatives:
        return Negatives(self.scale * self.map(candidates), grad=True)

    def update(self, *keys: Tensor) -> None:
        """Stateless."""


def test_a_registered_source_is_used_by_name_and_its_columns_carry_gradient():
    register_negative_source("generated_test", GeneratedNegatives)
    try:
        assert register_negative_source("generated_test", GeneratedNegatives) is GeneratedNegatives  # idempotent
        with pytest.raises(ValueError, match="already registered"):
            register_negative_source("generated_test", type("Other", (GeneratedNegatives,), {}))
        source = build_negative_source("generated_test", dim=D, scale=2.0)
        q, k = batch()
        out = source(q, k)
        assert out.grad and out.columns.requires_grad
        inputs = out.inputs(q, k)
        InfoNCE(0.2)(inputs.anchors, inputs.candidates, pos_mask=inputs.pos_mask).backward()
        assert source.map.weight.grad is not None
    finally:
        NEGATIVE_SOURCES.pop("generated_test", None)
    with pytest.raises(TypeError, match="does not declare"):
        register_negative_source("plain", nn.Identity)


def test_build_errors_name_the_source():
    with pytest.raises(ValueError, match=r"unknown negative source 'memory_bank'; known: \['feature_transformation'"):
        build_negative_source("memory_bank", dim=D)
    with pytest.raises(ValueError, match="negative source 'queue'.*sise"):
        build_negative_source("queue", dim=D, sise=3)


def test_contrasuite_list_shows_every_source_with_its_defaults():
    from contrasuite.pipelines.catalog import listing, negative_source_parameters

    params = negative_source_parameters()
    assert set(params) == set(NEGATIVE_SOURCES) and params["queue"] == "size=4096"
    assert "negative sources" in listing() and "n_hard=256" in listing()
