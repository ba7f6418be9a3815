"""MEOW's model parts as in its code: feature preprocessing, masks, GCN layer, attention, task-level masks."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.task.protocol import TaskContext
from contrasuite.domains.graph.data import row_normalize
from contrasuite.domains.graph.model import GCNEncoder, OneHotLinear, SemanticAttention, mask_entries
from contrasuite.domains.graph.task import GraphTask, adameow_term
from contrasuite.pipelines.config import load_config

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "graph"


def test_row_normalize_keeps_zero_rows():
    x = torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, 2.0]])
    assert torch.equal(row_normalize(x), torch.tensor([[0.25, 0.75, 0.0], [0.0, 0.0, 0.0], [0.5, 0.0, 0.5]]))


def test_mask_entries_zeroes_that_fraction_of_the_nonzeros():
    x = torch.rand(50, 40) * (torch.rand(50, 40) > 0.7)
    nnz = int((x != 0).sum())
    masked = mask_entries(x, 0.3, torch.Generator().manual_seed(0))
    assert int((masked != 0).sum()) == nnz - int(0.3 * nnz)
    kept = masked != 0
    assert torch.equal(masked[kept], x[kept])
    assert not torch.equal(masked, mask_entries(x, 0.3, torch.Generator().manual_seed(1)))


def test_one_hot_linear_is_a_linear_layer_on_the_identity():
    torch.manual_seed(0)
    layer = OneHotLinear(7, 5)
    linear = torch.nn.Linear(7, 5)
    with torch.no_grad():
        linear.weight.copy_(layer.weight.T)
        linear.bias.copy_(layer.bias)
    assert torch.allclose(layer(), linear(torch.eye(7)))
    assert layer.weight.abs().max() <= 7**-0.5 and layer.bias.abs().max() <= 7**-0.5  # nn.Linear(7, 5) init


@pytest.mark.parametrize("norm", ["matrix", "node"])
def test_gcn_encoder_is_two_bias_free_graph_convolutions_then_layer_norm(norm):
    torch.manual_seed(0)
    n, d = 12, 6
    adj = torch.rand(n, n) * (torch.rand(n, n) > 0.5)
    x = torch.randn(n, d)
    encoder = GCNEncoder(d, dropout=0.5, layer_norm=norm).eval()
    w1, w2 = (conv.lin.weight.T for conv in encoder.convs)
    z = adj @ (encoder.act(adj @ (x @ w1)) @ w2)
    expected = (z - z.mean()) / (z.var(unbiased=False) + 1e-5).sqrt() if norm == "matrix" else F.layer_norm(z, (d,))
    assert torch.allclose(encoder(x, adj.to_sparse_csr()), expected, atol=1e-5)
    assert all(p.abs().max() <= d**-0.5 for p in (w1, w2))
    encoder.train()  # dropout on x W before the propagation
    assert not torch.allclose(encoder(x, adj.to_sparse_csr()), encoder(x, adj.to_sparse_csr()))


def test_attention_query_dropout_only_in_training():
    torch.manual_seed(0)
    attention = SemanticAttention(8, dropout=0.5)
    views = [torch.randn(10, 8) for _ in range(3)]
    out = attention.eval()(views)
    assert torch.equal(out, attention(views))
    attention.train()
    assert not torch.allclose(attention(views), attention(views))


def tiny_task(tmp_path, make_tiny_graph, *overrides: str) -> GraphTask:
    dataset = make_tiny_graph(tmp_path / "tiny", 2)
    cfg = load_config(
        CONFIGS / "meow_acm.yaml",
        [f"config.dataset={json.dumps(dataset)}", "config.eval_ratios=[5]", "config.model.nei_max=[8, 8]",
         "config.negatives.num_clusters=[3, 5]", *overrides],
    ).config
    task = GraphTask()
    task.setup(TaskContext(cfg, torch.device("cpu"), "fp32", tmp_path, tmp_path, 0))
    return task


def test_masks_are_drawn_once_unless_resampled(tmp_path, make_tiny_graph):
    fixed = tiny_task(tmp_path, make_tiny_graph)
    fixed.model.eval()  # no dropout: the views differ only through the masks
    assert torch.equal(fixed.views(0)[1], fixed.views(1)[1])
    resampled = tiny_task(tmp_path, make_tiny_graph, "config.model.resample_masks=true")
    resampled.model.eval()
    assert not torch.allclose(resampled.views(0)[1], resampled.views(1)[1])


def test_evaluated_embedding_fuses_the_augmented_views(tmp_path, make_tiny_graph):
    task = tiny_task(tmp_path, make_tiny_graph)
    emb = task.embeddings()
    assert torch.equal(emb, task.embeddings())  # deterministic: dropout off, masks from setup
    plain = tiny_task(tmp_path, make_tiny_graph, "config.model.eval_views=plain").embeddings()
    assert emb.shape == plain.shape and not torch.allclose(emb, plain)


def test_feature_masking_needs_target_features(tmp_path, make_tiny_graph):
    dataset = make_tiny_graph(tmp_path / "tiny", 2)
    dataset["node_types"][0] = {"name": "item", "count": 60}
    with pytest.raises(ValueError, match="config.model.feat_mask"):
        tiny_task(tmp_path, lambda *_: dataset)
    with pytest.raises(ValueError, match="config.model.gather"):
        tiny_task(tmp_path, make_tiny_graph, "config.model.gather=sideways")


def test_learned_weights_can_be_cut_off_from_the_encoder(tmp_path, make_tiny_graph):
    """AdaMEOW's weights pass gradient into both views unless ``detach_weight_inputs``; the weight
    MLP itself learns either way."""
    grads = {}
    for detach in (False, True):
        task = tiny_task(tmp_path, make_tiny_graph, "config.negatives.kind=learned", "config.objective.anchor=fine",
                         "config.objective.terms.0.positive_in_denominator=false",
                         f"config.negatives.detach_weight_inputs={str(detach).lower()}")
        task.model.eval()
        coarse, fine = task.views(0)
        coarse, fine = coarse.detach().requires_grad_(), fine.detach().requires_grad_()
        loss = task.loss_terms(coarse, fine, 0)[0]["contrastive"]
        grads[detach] = torch.autograd.grad(loss, [fine, coarse, task.weigher.first.weight])
        with torch.no_grad():
            weight = task.weigher(fine, coarse)
        # The same loss with the weights held constant: what the detached variant must differentiate.
        eye = torch.eye(len(weight), dtype=torch.bool)
        const = task.objective(fine, torch.cat([coarse, coarse]), pos_mask=torch.cat([eye, torch.zeros_like(eye)], 1),
                               neg_weight=torch.cat([weight.masked_fill(eye, 0), weight * eye], 1))
        grads[f"const{detach}"] = torch.autograd.grad(const, [fine, coarse])
    for g_detached, g_const in zip(grads[True][:2], grads["constTrue"]):
        assert torch.allclose(g_detached, g_const, atol=1e-6)
    assert not torch.allclose(grads[False][0], grads["constFalse"][0], atol=1e-6)
    assert grads[True][2].abs().sum() > 0 and grads[False][2].abs().sum() > 0


def test_adameow_loss_is_the_official_formula(tmp_path, make_tiny_graph):
    """``-log( exp(s_ii / t) / sum_j w_ij exp(s_ij / t) )`` with the fine view as anchor and ``w_ii`` in the
    denominator, as ``weight_InfoNce`` in the official ``code_adameow/module/adameow.py``."""
    task = tiny_task(tmp_path, make_tiny_graph, "config.negatives.kind=learned", "config.objective.anchor=fine",
                     "config.objective.terms.0.positive_in_denominator=false",
                     "config.objective.terms.0.temperature=0.7")
    task.model.eval()
    coarse, fine = task.views(0)
    terms, logs = task.loss_terms(coarse, fine, 0)
    loss = terms["contrastive"]
    dots = torch.exp(fine @ coarse.T / 0.7)  # the views are unit rows: cosine = dot
    weights = task.weigher.naive(fine, coarse)
    expected = -torch.log(dots.diagonal() / (dots * weights).sum(dim=1)).mean()
    assert torch.allclose(loss, expected, atol=1e-5)
    assert logs["neg_weight_mean"] == pytest.approx(float(weights.mean()), abs=1e-6)


def test_adameow_single_term_equals_the_general_weighted_form(tmp_path, make_tiny_graph):
    """The one-term path (``learned_weight_infonce``) gives the loss and gradients of the general form that
    any other objective takes: ``w_ii`` as an extra weighted negative column of the candidates."""
    task = tiny_task(tmp_path, make_tiny_graph, "config.negatives.kind=learned", "config.objective.anchor=fine",
                     "config.objective.terms.0.positive_in_denominator=false")
    task.model.eval()
    coarse, fine = (v.detach().requires_grad_() for v in task.views(0))
    params = [fine, coarse, *task.weigher.parameters()]
    loss = task.loss_terms(coarse, fine, 0)[0]["contrastive"]
    weight = task.weigher(fine, coarse)
    eye = torch.eye(len(weight), dtype=torch.bool)
    general = task.objective(fine, torch.cat([coarse, coarse]), pos_mask=torch.cat([eye, torch.zeros_like(eye)], 1),
                             neg_weight=torch.cat([weight.masked_fill(eye, 0), weight * eye], 1))
    assert torch.allclose(loss, general, atol=1e-6)
    for x, y in zip(torch.autograd.grad(loss, params), torch.autograd.grad(general, params)):
        assert torch.allclose(x, y, atol=1e-6)
    assert adameow_term(task.objective) is not None  # the loss above took the one-term path


def test_pathsim_ties_option_reaches_the_graphs(tmp_path, make_tiny_graph):
    """``config.model.pathsim_ties`` chooses the top-k among tied nodes (graphs.pathsim_topk)."""
    task = tiny_task(tmp_path, make_tiny_graph, "config.model.pathsim_ties=numpy")
    from contrasuite.domains.graph.data import metapath_counts
    from contrasuite.domains.graph.graphs import pathsim_topk
    counts = metapath_counts(task.data, list(task.cfg.dataset.metapaths))
    for graph, m in zip(task.graphs, task.cfg.dataset.metapaths):
        expected = pathsim_topk(counts[m.name], 8, ties="numpy")
        assert torch.equal(graph.rows, expected.rows) and torch.equal(graph.cols, expected.cols)
