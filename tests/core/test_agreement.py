"""Agreement with the public implementations: pytorch-metric-learning and open_clip.

Losses and gradients are compared on the same inputs. Where conventions differ the test says which
one the suite follows:

* Reduction: the suite averages per-anchor losses over anchors with a positive. PML's reducers
  average per positive pair (NTXentLoss, MeanReducer "pos_pair"), over non-zero rows
  (CircleLoss/SupConLoss, AvgNonZeroReducer) or over all rows (MultiSimilarityLoss, MeanReducer).
  These coincide when every anchor has the same number of positives and at least one negative, which
  is how the batches below are built (k samples per class).
* Defaults: Circle m=0.4, gamma=80 (PML = paper's fine-grained setting). MS alpha=2, beta=50,
  epsilon=0.1 (paper and PML) and base=0.5 (official code and PML; the paper states lambda=1).
  NT-Xent: PML's default temperature is 0.07, ours 0.1 (SimCLR); the test sets both.
  open_clip: CLIP scale init 1/0.07, SigLIP scale 10 and bias -10 (both follow the papers).
"""

import math

import pytest
import torch
import torch.nn.functional as F

pml_losses = pytest.importorskip("pytorch_metric_learning.losses")
pml_miners = pytest.importorskip("pytorch_metric_learning.miners")
open_clip_loss = pytest.importorskip("open_clip.loss")

from contrasuite.core.objectives import CircleLoss, CLIPLoss, InfoNCE, MultiSimilarityLoss, SigLIP  # noqa: E402
from contrasuite.core.pairs import two_view  # noqa: E402


def balanced_batch(seed, n_classes=6, per_class=3, dim=8):
    torch.manual_seed(seed)
    labels = torch.arange(n_classes).repeat_interleave(per_class)
    x = torch.randn(n_classes * per_class, dim, dtype=torch.float64)
    return x, labels


def loss_and_grad(fn, x):
    x = x.clone().requires_grad_()
    loss = fn(x)
    (grad,) = torch.autograd.grad(loss, x)
    return loss.detach(), grad


def assert_agree(ours, theirs, x, rtol=1e-7):
    la, ga = loss_and_grad(ours, x)
    lb, gb = loss_and_grad(theirs, x)
    assert la.item() == pytest.approx(lb.item(), rel=rtol)
    assert torch.allclose(ga, gb, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("m,gamma", [(0.4, 80.0), (0.25, 256.0)])
def test_circle_loss_matches_pml(m, gamma):
    x, labels = balanced_batch(0)
    assert_agree(lambda z: CircleLoss(m=m, gamma=gamma)(z, labels=labels), lambda z: pml_losses.CircleLoss(m=m, gamma=gamma)(z, labels), x)


def test_circle_defaults_match_pml():
    ours, theirs = CircleLoss(), pml_losses.CircleLoss()
    assert (ours.m, ours.gamma) == (theirs.m, theirs.gamma)


@pytest.mark.parametrize("epsilon", [0.1, 0.5])
def test_multi_similarity_with_miner_matches_pml(epsilon):
    x, labels = balanced_batch(1, per_class=4)
    miner = pml_miners.MultiSimilarityMiner(epsilon=epsilon)
    theirs = pml_losses.MultiSimilarityLoss(alpha=2, beta=50, base=0.5)

    def pml(z):
        return theirs(z, labels, miner(z, labels))

    assert_agree(lambda z: MultiSimilarityLoss(epsilon=epsilon)(z, labels=labels), pml, x)


def test_multi_similarity_without_mining_matches_pml():
    x, labels = balanced_batch(2)
    ours = lambda z: MultiSimilarityLoss(alpha=3, beta=40, base=0.3, mine=False)(z, labels=labels)
    assert_agree(ours, lambda z: pml_losses.MultiSimilarityLoss(alpha=3, beta=40, base=0.3)(z, labels), x)


def test_multi_similarity_defaults_match_pml():
    ours, theirs = MultiSimilarityLoss(), pml_losses.MultiSimilarityLoss()
    assert (ours.alpha, ours.beta, ours.base) == (theirs.alpha, theirs.beta, theirs.base)
    assert ours.epsilon == pml_miners.MultiSimilarityMiner().epsilon


@pytest.mark.parametrize("t", [0.07, 0.5])
def test_infonce_matches_pml_ntxent_multi_positive(t):
    x, labels = balanced_batch(3)
    assert_agree(lambda z: InfoNCE(t)(z, labels=labels), lambda z: pml_losses.NTXentLoss(temperature=t)(z, labels), x)


def test_infonce_two_view_matches_pml_ntxent():
    torch.manual_seed(4)
    v1, v2 = torch.randn(8, 5, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    z, labels = two_view(v1, v2)
    assert_agree(lambda a: InfoNCE(0.2)(a, labels=labels), lambda a: pml_losses.NTXentLoss(0.2)(a, labels), z)


def test_supcon_option_matches_pml_supcon():
    x, labels = balanced_batch(5, per_class=4)
    ours = lambda z: InfoNCE(0.1, other_positives_in_denominator=True)(z, labels=labels)
    assert_agree(ours, lambda z: pml_losses.SupConLoss(temperature=0.1)(z, labels), x)


def clip_inputs(seed, n=8, dim=6):
    """Raw features: ours normalises inside, open_clip is given ``F.normalize`` of the same tensors."""
    torch.manual_seed(seed)
    return torch.randn(n, dim, dtype=torch.float64), torch.randn(n, dim, dtype=torch.float64)


@pytest.mark.parametrize("scale", [1 / 0.07, 99.0])  # at exactly 100 our clamp stops the scale gradient
def test_clip_matches_open_clip(scale):
    img, txt = clip_inputs(6)
    obj = CLIPLoss(init_logit_scale=math.log(scale)).double()
    ours = obj(img.requires_grad_(), txt.requires_grad_())
    g_ours = torch.autograd.grad(ours, (img, txt, obj.logit_scale))
    log_scale = torch.tensor(math.log(scale), dtype=torch.float64, requires_grad=True)
    theirs = open_clip_loss.ClipLoss()(F.normalize(img, dim=1), F.normalize(txt, dim=1), log_scale.exp())
    g_theirs = torch.autograd.grad(theirs, (img, txt, log_scale))
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)  # our parameter is stored in fp32
    for a, b in zip(g_ours, g_theirs):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize("log_scale,bias", [(math.log(10.0), -10.0), (1.0, -2.0)])
def test_siglip_matches_open_clip(log_scale, bias):
    img, txt = clip_inputs(7)
    obj = SigLIP(init_logit_scale=log_scale, init_logit_bias=bias).double()
    ours = obj(img.requires_grad_(), txt.requires_grad_())
    g_ours = torch.autograd.grad(ours, (img, txt, obj.logit_scale, obj.logit_bias))
    t = torch.tensor(log_scale, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(bias, dtype=torch.float64, requires_grad=True)
    theirs = open_clip_loss.SigLipLoss()(F.normalize(img, dim=1), F.normalize(txt, dim=1), t.exp(), b)
    g_theirs = torch.autograd.grad(theirs, (img, txt, t, b))
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)  # our parameter is stored in fp32
    for a, b_ in zip(g_ours, g_theirs):
        assert torch.allclose(a, b_, rtol=1e-6, atol=1e-10)


def test_reduction_difference_is_real_for_unbalanced_positives():
    """With unequal positive counts PML's per-pair mean differs from our per-anchor mean, as documented."""
    torch.manual_seed(8)
    x = torch.randn(7, 4, dtype=torch.float64)
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    ours = InfoNCE(0.1)(x, labels=labels).item()
    theirs = pml_losses.NTXentLoss(0.1)(x, labels).item()
    assert ours != pytest.approx(theirs, rel=1e-3)
