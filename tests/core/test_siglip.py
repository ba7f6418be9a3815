"""SigLIP against a plain-loop reference, extra negatives, the ring recipe and gradcheck (scale clamp and bf16:
test_image_text_objectives.py)."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import Distributed, SigLIP


def loop_reference(images, texts, pos, t, b, weight=None, extra_texts=(), extra_images=()):
    """-1/|B| sum_ij log sigmoid(z_ij (t x_i.y_j + b)) with plain loops in float64."""
    x = F.normalize(images.double(), dim=1)
    y = F.normalize(texts.double(), dim=1)
    ext = [F.normalize(e.double(), dim=0) for e in extra_texts]
    exi = [F.normalize(e.double(), dim=0) for e in extra_images]
    log_sigmoid = lambda v: -math.log1p(math.exp(-v)) if v > 0 else v - math.log1p(math.exp(v))
    total = 0.0
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            z = 1.0 if pos[i, j] else -1.0
            w = 1.0 if (pos[i, j] or weight is None) else float(weight[i, j])
            total -= w * log_sigmoid(z * (t * float(x[i] @ y[j]) + b))
        total -= sum(log_sigmoid(-(t * float(x[i] @ e) + b)) for e in ext)
    for e in exi:
        total -= sum(log_sigmoid(-(t * float(e @ y[j]) + b)) for j in range(y.shape[0]))
    return total / int(pos.any(dim=1).sum())


def test_default_initialisation_and_declaration():
    loss = SigLIP()
    assert loss.logit_scale.item() == pytest.approx(math.log(10))
    assert loss.logit_bias.item() == pytest.approx(-10)
    assert loss.distributed is Distributed.PAIRWISE_RING
    assert {n for n, _ in loss.named_parameters()} == {"logit_scale", "logit_bias"}
    assert list(SigLIP(learnable=False).parameters()) == []
    # the trained scalars are declared, so the trainer logs them (param/...) without guessing by name
    assert loss.learned_values() == pytest.approx({"logit_scale": math.log(10), "logit_bias": -10.0})
    assert SigLIP(learnable=False).learned_values() == {}


def test_matches_loop_diagonal_and_extras():
    torch.manual_seed(0)
    img, txt = torch.randn(6, 5), torch.randn(6, 5)
    et, ei = torch.randn(3, 5), torch.randn(2, 5)
    loss = SigLIP(init_logit_scale=math.log(5.0), init_logit_bias=-2.0)(img, txt, extra_texts=et, extra_images=ei)
    ref = loop_reference(img, txt, torch.eye(6, dtype=torch.bool), 5.0, -2.0, extra_texts=et, extra_images=ei)
    assert loss.item() == pytest.approx(ref, rel=1e-5)


def test_matches_loop_labels_and_weights():
    torch.manual_seed(1)
    img, txt = torch.randn(6, 5), torch.randn(6, 5)
    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    w = torch.rand(6, 6) + 0.2
    loss = SigLIP(init_logit_bias=-3.0)(img, txt, labels=labels, neg_weight=w)
    pos = labels[:, None] == labels[None, :]
    assert loss.item() == pytest.approx(loop_reference(img, txt, pos, 10.0, -3.0, weight=w), rel=1e-5)


def test_hand_made_single_pair():
    # Identical unit vectors: s = 1, so L = -log sigmoid(t + b) = softplus(-(t + b)).
    v = torch.tensor([[1.0, 0.0]])
    assert SigLIP()(v, v).item() == pytest.approx(math.log1p(math.exp(-(10.0 - 10.0))))


def test_ring_recipe_matches_global_loss():
    """Each 'rank' adds the other ranks' texts as extra_texts; the mean of rank losses is the global loss."""
    torch.manual_seed(2)
    img, txt = torch.randn(8, 4), torch.randn(8, 4)
    obj = SigLIP(init_logit_bias=-1.0)
    ranks = [obj(img[r::2], txt[r::2], extra_texts=txt[1 - r :: 2]) for r in range(2)]
    assert ((ranks[0] + ranks[1]) / 2).item() == pytest.approx(obj(img, txt).item(), rel=1e-6)


def test_gradcheck_float64_inputs_and_parameters():
    torch.manual_seed(4)
    img = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    txt = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    et = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    params = (torch.tensor(1.5, dtype=torch.float64, requires_grad=True), torch.tensor(-2.0, dtype=torch.float64, requires_grad=True))
    obj = SigLIP()

    def fn(img, txt, et, s, b):
        return torch.func.functional_call(obj, {"logit_scale": s, "logit_bias": b}, (img, txt), {"extra_texts": et})

    assert torch.autograd.gradcheck(fn, (img, txt, et, *params))


def test_needs_candidates():
    with pytest.raises(ValueError, match="candidates"):
        SigLIP()(torch.randn(3, 2), labels=torch.arange(3))
