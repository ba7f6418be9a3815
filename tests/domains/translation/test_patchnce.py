"""PatchNCE through the core contract equals CUT's plain formulation; negatives stay in their image."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import ObjectiveSum
from contrasuite.core.objectives.infonce import InfoNCE
from contrasuite.domains.translation.patchnce import patch_nce, patch_nce_layer


def cut_reference(q: torch.Tensor, k: torch.Tensor, t: float = 0.07, all_negatives_from_batch: bool = False) -> torch.Tensor:
    """CUT's PatchNCELoss written out: per-image S x S logits, diagonal masked out of the negatives, CE to 0."""
    b, s, d = q.shape
    if all_negatives_from_batch:
        q, k = q.reshape(1, b * s, d), k.reshape(1, b * s, d)
    k = k.detach()
    losses = []
    for qi, ki in zip(q, k):
        n = qi.shape[0]
        for a in range(n):
            pos = qi[a] @ ki[a] / t
            negs = torch.stack([qi[a] @ ki[j] / t for j in range(n) if j != a])
            losses.append(-pos + torch.logsumexp(torch.cat([pos[None], negs]), 0))
    return torch.stack(losses).mean()


def unit(*shape: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)), dim=-1)


@pytest.mark.parametrize("negatives", ["image", "batch"])
def test_core_patchnce_equals_plain_loop(negatives):
    # Gradients w.r.t. the head's pre-normalisation output: cosine on unit vectors (the default)
    # and CUT's dot product give the same loss and the same gradient there.
    raw = torch.randn(3, 10, 8, generator=torch.Generator().manual_seed(0)).requires_grad_()
    q, k = F.normalize(raw, dim=-1), unit(3, 10, 8, seed=1)
    ref = cut_reference(q, k, all_negatives_from_batch=negatives == "batch")
    g_ref, = torch.autograd.grad(ref, raw, retain_graph=True)
    for similarity in ("cosine", "dot"):
        ours = patch_nce_layer(InfoNCE(temperature=0.07, similarity=similarity), q, k, negatives)
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
        g_ours, = torch.autograd.grad(ours, raw, retain_graph=True)
        torch.testing.assert_close(g_ours, g_ref, rtol=1e-4, atol=1e-6)


def test_layers_averaged_and_config_objective():
    qs = [unit(2, 6, 4, seed=i) for i in range(3)]
    ks = [unit(2, 6, 4, seed=10 + i) for i in range(3)]
    obj = ObjectiveSum([{"name": "infonce", "temperature": 0.07}])
    expected = torch.stack([cut_reference(q, k) for q, k in zip(qs, ks)]).mean()
    torch.testing.assert_close(patch_nce(obj, qs, ks), expected, rtol=1e-5, atol=1e-5)
    for name in ("dhel", "dcl", "weince"):
        other = patch_nce(ObjectiveSum([{"name": name, "temperature": 0.07}]), qs, ks)
        assert torch.isfinite(other) and not torch.allclose(other, expected)


def grad_wrt_keys_of_other_image(negatives: str) -> torch.Tensor:
    """d loss(image 0's anchors) / d keys of image 1 (keys made differentiable for the check)."""
    q, k = unit(2, 8, 4, seed=3), unit(2, 8, 4, seed=4).requires_grad_()
    # detach() in patch_nce_layer blocks key gradients, so probe through the queries' gradient instead.
    q = q.requires_grad_()
    loss0 = patch_nce_layer(InfoNCE(temperature=0.07), q, k, negatives)
    g0, = torch.autograd.grad(loss0, q)
    k2 = k.detach().clone()
    k2[1] = unit(8, 4, seed=99)
    loss1 = patch_nce_layer(InfoNCE(temperature=0.07), q, k2, negatives)
    g1, = torch.autograd.grad(loss1, q)
    return (g0[0] - g1[0]).abs().max()


def test_negatives_from_same_image_by_default_batch_as_option():
    # Changing image 1's keys leaves image 0's query gradient unchanged only with per-image negatives.
    assert grad_wrt_keys_of_other_image("image") == 0
    assert grad_wrt_keys_of_other_image("batch") > 1e-4


def test_keys_are_detached_and_bad_input_named():
    q, k = unit(1, 5, 4, seed=5).requires_grad_(), unit(1, 5, 4, seed=6).requires_grad_()
    patch_nce_layer(InfoNCE(temperature=0.07), q, k).backward()
    assert k.grad is None and q.grad is not None
    with pytest.raises(ValueError, match="negatives"):
        patch_nce_layer(InfoNCE(), q, k, "queue")
    with pytest.raises(ValueError, match=r"\[B, S, D\]"):
        patch_nce_layer(InfoNCE(), q[0], k[0])
