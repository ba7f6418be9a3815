"""Backbone weights and padding, frozen BatchNorm, PML terms through the shared registry."""

import pytest
import torch

from contrasuite.core.objectives import OBJECTIVES, ObjectiveSum
from contrasuite.domains.metric_learning.backbone import SameConv2d, efficientnet_lite0
from contrasuite.domains.metric_learning.model import EmbeddingNet
from contrasuite.domains.metric_learning.task import MetricLearningTask
from contrasuite.domains.metric_learning.objectives import PML_TERMS, MetricObjective


def test_pretrained_weights_load_strictly_and_classify():
    model = efficientnet_lite0(pretrained=True, with_classifier=True).eval()
    assert model._bn0.running_var.abs().sum() > 0 and not torch.allclose(model._bn0.running_mean, torch.zeros(32))
    with torch.no_grad():
        logits = model._fc(model(torch.zeros(2, 3, 64, 64)))
    assert logits.shape == (2, 1000) and torch.isfinite(logits).all()


@pytest.mark.parametrize("size", [7, 8, 64, 65])
def test_same_padding_output_size(size):
    conv = SameConv2d(1, 1, 5, stride=2, bias=False)
    assert conv(torch.zeros(1, 1, size, size)).shape[-1] == -(-size // 2)


def test_frozen_part_stays_in_eval_and_split_forward_matches():
    net = EmbeddingNet(16, pretrained=False, freeze_blocks=4).train()
    assert not net.backbone._bn0.training and not net.backbone._blocks[3]._bn1.training
    assert net.backbone._blocks[4]._bn1.training
    assert all(not p.requires_grad for p in net.frozen_parameters())
    net.eval()
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(net(x), net.from_stem(net.stem_features(x)), atol=1e-5)


def test_pml_terms_registered_and_agree_with_core():
    pytest.importorskip("pytorch_metric_learning")
    assert not {"pml_circle", "pml_multi_similarity"} & set(OBJECTIVES), "domain terms must not leak into core"
    assert MetricLearningTask.extra_objectives is PML_TERMS
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(24, 8, generator=g, requires_grad=True)
    labels = torch.arange(12).repeat_interleave(2)
    for ours, ref in (("multi_similarity", "pml_multi_similarity"), ("circle", "pml_circle")):
        a = MetricObjective([{"name": ours}])(emb, labels)
        b = ObjectiveSum([{"name": ref}], extra=PML_TERMS)(emb, labels=labels)
        assert a.item() == pytest.approx(b.item(), rel=1e-4), ours
        ga, = torch.autograd.grad(a, emb)
        gb, = torch.autograd.grad(b, emb)
        assert torch.allclose(ga, gb, atol=1e-5), ours


def test_unknown_term_lists_names():
    with pytest.raises(ValueError, match="pml_circle"):
        MetricObjective([{"name": "tripletz"}])
