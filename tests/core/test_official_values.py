"""DHEL, KCL, Soft-InfoNCE, WEINCE and Feature Transformation against numbers computed once with the official code.

Procedure (run once, outside this repository, on the CPU; records in docs/results/records/official/):

* DHEL and KCL: pakoromilas/DHEL-KCL at commit dc5a4779561c5b2d56e835117c6f9b1e3c27dc9a, ``losses.py``
  (``DHEL.forward``, ``KCL.forward``) with ``utils.py``. Nothing patched: ``utils.py`` was only placed
  as ``utils/utils.py`` so that ``from utils import utils`` imports as written. Each loss got
  ``z = cat([a, p])`` from :func:`paired_inputs` in fp64; the loss and ``dL/dz`` were printed.
* Soft-InfoNCE: Alex-HaochenLi/Soft-InfoNCE at commit 5b7496b21b499e65cfc2a9e0afd7290bd09e35cb,
  ``CodeBERT/models.py`` (``ModelContra.forward``, the ``--softinfonce`` branch, the same lines as in
  ``GraphCodeBERT/run.py`` and ``UniXCoder/run.py``). Nothing patched: the encoder was a stand-in lookup
  table whose output ``[1]`` is the pooled vector (code rows then query rows, as ``ModelContra``
  concatenates them), ``labels = ones(N)`` (so ``loss_mask = labels.diag()`` is the identity, as in the
  two ``run.py``), ``sim_matrix`` the prior of :func:`code_search_inputs` (a SimCSE-style query-query
  cosine, as the official ``--simcse`` builds it). Gradients are those of the query vectors
  (anchors) and the code vectors (candidates).
* WEINCE: hsme98/weince at commit 49485f3, ``simclr/modules/nt_xent_hard_select.py`` (``NT_Xent.forward``,
  policy ``tlambda_select``), unpatched, each case a fresh module (``batch_size=64, temperature=0.5``), on
  ``a, p [64, 16]`` of :func:`paired_inputs`; the script and its output are in docs/results/records/official/weince/.
* Feature Transformation: DTennant/CL-Visualizing-Feature-Transformation at commit
  c53d1befa31d27fc6db63009174355f3095009f5, ``memory/mem_moco.py`` (``RGBMoCo_dropmix_norm.forward``),
  the only patch the removal of ``.cuda()`` from its source text. Built as the README's training
  command: ``mix_target='posneg'``, ``sep_alpha``, ``pos_alpha 2.0``, ``neg_alpha 1.6``, ``beta`` masks,
  ``expolation_mask``, ``dim_mask`` at its default ``'none'`` (one scalar per batch), ``postmix_norm``
  off, ``T = 0.07``; its memory set to the queue of :func:`moco_inputs`. Its Beta draws came from
  ``np.random.seed(0)`` (recorded: :data:`FT_POS_BETA`, :data:`FT_NEG_BETA`) and ``torch.randperm`` was
  replaced by the fixed permutation of :func:`moco_inputs`; the loss is ``cross_entropy(logits, 0)`` on
  the logits it returns, the gradient that of ``q``. Our side is fed the same draws (monkeypatched).

Only the numbers were copied, no code. DHEL, KCL, Soft-InfoNCE and the WEINCE blend matched to ~1e-14 in fp64
(WEINCE-repro to 3e-9: the official ``beta_t`` of an EMA-updating batch is a double, ours its float32 buffer), and Feature
Transformation to ~1e-6 in fp32 (the official values are fp32 there), with the settings below; the
differences in defaults and options are in docs/objectives/{dhel,kcl,soft_infonce}.md and
docs/negatives.md ("Against the official code"), docs/results/records/official/weince.md.
"""

import pytest
import torch
import torch.nn.functional as F

import contrasuite.core.negatives.feature_transformation as ft_module
from contrasuite.core.negatives import FeatureTransformation
from contrasuite.core.objectives import DHEL, KCL, OBJECTIVES, InfoNCE, SoftInfoNCE
from contrasuite.core.pairs import two_view

N, D = 8, 16


def checksum_weights(rows: int, dtype: torch.dtype) -> torch.Tensor:
    """Fixed weights for a checksum ``sum(grad * c)`` that sees every gradient entry."""
    return torch.randn(rows, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)


def paired_inputs(dtype: torch.dtype, n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    """Two views ``a, p [n, 16]`` (unnormalised; the losses normalise), ``p`` correlated with ``a``."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, D, generator=g, dtype=torch.float64)
    p = a + 0.7 * torch.randn(n, D, generator=g, dtype=torch.float64)
    return a.to(dtype), p.to(dtype)


def code_search_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query vectors (anchors), code vectors (candidates), and a query-query cosine prior ``[8, 8]``."""
    g = torch.Generator().manual_seed(0)
    nl = 0.3 * torch.randn(N, D, generator=g, dtype=torch.float64)
    code = nl + 0.2 * torch.randn(N, D, generator=g, dtype=torch.float64)
    emb = F.normalize(torch.randn(N, 12, generator=g, dtype=torch.float64), dim=1)
    return nl.to(dtype), code.to(dtype), (emb @ emb.T).to(dtype)


def moco_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 ``q, k [8, 16]`` and ``queue [32, 16]`` (unit rows), and the permutation of the queue."""
    g = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(N, D, generator=g), dim=1)
    k = F.normalize(q + 0.5 * torch.randn(N, D, generator=g), dim=1)
    queue = F.normalize(torch.randn(32, D, generator=g), dim=1)
    return q, k, queue, torch.randperm(32, generator=torch.Generator().manual_seed(2))


# Official values (fp64): loss, |dL/da|^2, |dL/dp|^2, sum(dL/d[a; p] * c), dL/da[0, 0], dL/dp[3, 5].
PAIRED = {
    "dhel_default": (DHEL(), (1.8786975867631506, 0.10893471385697523, 0.07799614089025379,
                              0.11391218168811756, -0.031405833123817055, 0.002670271342028496)),
    "dhel_no_augs": (DHEL(include_augs=False), (-0.43320358557809924, 0.10893471385697524, 0.026767535605857283,
                                                0.33375337727701276, -0.03140583312381706, 0.00342459659917492)),
    "dhel_t0.1": (DHEL(temperature=0.1), (0.34432443953612246, 1.625711452506547, 1.2141765342683557,
                                         1.2716304642955134, -0.050446359849969695, 0.0026046382512073707)),
    "kcl_default": (KCL(), (0.013935667695306075, 0.0731746526545868, 0.04559350999524242,
                            0.1745013879224329, -0.01731639969389634, 0.005912101061149758)),
    "kcl_log_t1_gamma4": (KCL(t=1.0, kernel="log", gamma=4.0), (-3.6735204497448315, 0.03355132326197119,
                                                               0.02454262905251267, -0.01877796491415854,
                                                               -0.01899919232052102, 0.0030583081589963257)),
    "kcl_t0.5_gamma1": (KCL(t=0.5, gamma=1.0), (-0.8811279576277721, 0.00901781129009771, 0.006376022137501282,
                                               0.008945567400177101, -0.006067523789079042, 0.0017954555690251443)),
}

# Official values (fp64), (t, alpha, beta) = (--t, --weight_kl, --weight_unif): loss, |dL/dq|^2, |dL/dc|^2,
# sum(dL/d[q; c] * c), dL/dq[0, 0], dL/dc[3, 5]. "floor": t = 0.1 puts 2 of the 56 weights at 0.1.
SOFT = {
    "default": ((1.0, 1.0, 1.0), (1.0584300339560355, 0.09426084519153477, 0.06523753402416335,
                                  0.011979075771640701, 0.019339884924978634, -0.016258469294171306)),
    "floor": ((0.1, 1.0, 1.0), (1.0384151631433738, 0.10072654721703152, 0.06760363910309161,
                                -0.053769037954574994, 0.019886206226240967, -0.013100784410642542)),
    "t0.5_a0.5_b1.5": ((0.5, 0.5, 1.5), (1.0592209636571581, 0.0940969219254488, 0.06516909890542089,
                                         0.015476441376639824, 0.019350675312737233, -0.016545378215441418)),
}

WEINCE_N = 64
"""Pairs in the WEINCE batch: enough negatives (126 an anchor) for the per-anchor and pooled tail fits' defaults."""
# Official values (fp64), name: (registry name, our keys), then as PAIRED's.
WEINCE = {
    "weince_default": ("weince", {}, (3.328319405144692, 0.0032178683104841658, 0.0022259701710001297,
                                     -0.10970705962080442, -0.0026192998236921105, 0.0021486372028527993)),
    "weince_margin0_rho5_aic2": ("weince", dict(aic_margin=0.0, kappa_rho=5.0, kappa_aic=2.0),
                                 (3.3103426802249363, 0.003706990695371507, 0.00257090637606037,
                                  -0.12650828141593162, -0.0026415188265680803, 0.002415575867256671)),
    "weince_repro_default": ("weince_repro", {}, (4.952868766794212, 0.017971783626611993, 0.012359459770494992,
                                                 -0.15785422643566827, -0.008553826749236458, 0.002832404467682584)),
}


FT_POS_BETA = 0.4014028764965108
"""The official ``np.random.beta(2.0, 2.0)`` draw (``lambda+ = 1 + FT_POS_BETA``)."""
FT_NEG_BETA = 0.5023130933862939
"""The official ``np.random.beta(1.6, 1.6)`` draw (``lambda-``)."""
FT_T = 0.07
# Official values (fp32): sum and sum of squares of the [8, 33] logits, logits[:3, 0] (positives),
# logits[0, 1:4] (negatives), the loss, |dL/dq|^2, sum(dL/dq * c), dL/dq[0, 0].
FT_DEFAULT = dict(logit_sum=13.374408721923828, logit_sq=2477.2705078125,
                  pos=[1.9955360889434814, 3.597466468811035, 1.1932251453399658],
                  neg=[-3.500920057296753, -2.1300101280212402, -0.13854092359542847],
                  loss=5.431532382965088, grad_sq=89.2046890258789, grad_dot_c=-16.903268814086914, grad00=0.36082160472869873)
FT_POSTMIX_NORM_POS = [1.3710592985153198, 2.5767927169799805, 0.803408682346344]
"""logits[:3, 0] of the official ``--postmix_norm`` run (which renormalises ``q^, k^`` only)."""


def summary(loss: torch.Tensor, ga: torch.Tensor, gp: torch.Tensor, c: torch.Tensor) -> list[float]:
    g = torch.cat([ga, gp])
    return [loss.item(), ga.pow(2).sum().item(), gp.pow(2).sum().item(), (g * c).sum().item(),
            ga[0, 0].item(), gp[3, 5].item()]


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    return dict(rel=1e-9, abs=1e-12) if dtype == torch.float64 else dict(rel=2e-5, abs=2e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(PAIRED))
def test_dhel_kcl_equal_official(name, dtype):
    objective, official = PAIRED[name]
    a, p = (x.requires_grad_(True) for x in paired_inputs(dtype))
    loss = objective(a, p)
    ga, gp = torch.autograd.grad(loss, (a, p))
    assert summary(loss, ga, gp, checksum_weights(2 * N, dtype)) == pytest.approx(official, **tolerance(dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(WEINCE))
def test_weince_equals_official(name, dtype):
    """The SimCLR two-view call image_ssl makes; the repro's fp64 tolerance is its float32 ``beta_t`` (module docstring)."""
    registry, keys, official = WEINCE[name]
    a, p = (x.requires_grad_(True) for x in paired_inputs(dtype, WEINCE_N))
    z, labels = two_view(a, p)
    loss = OBJECTIVES[registry](temperature=0.5, **keys)(z, labels=labels)
    ga, gp = torch.autograd.grad(loss, (a, p))
    tol = dict(rel=1e-7, abs=1e-10) if registry == "weince_repro" and dtype == torch.float64 else tolerance(dtype)
    assert summary(loss, ga, gp, checksum_weights(2 * WEINCE_N, dtype)) == pytest.approx(official, **tol)


def test_dhel_general_path_equals_official():
    """All-ones ``neg_weight`` takes the masked log-sum-exp path instead of the fused same-view energy."""
    official = PAIRED["dhel_default"][1]
    a, p = (x.requires_grad_(True) for x in paired_inputs(torch.float64))
    loss = DHEL()(a, p, neg_weight=torch.ones(N, N, dtype=torch.float64))
    ga, gp = torch.autograd.grad(loss, (a, p))
    assert summary(loss, ga, gp, checksum_weights(2 * N, torch.float64)) == pytest.approx(official, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("tile_size", [None, 3])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(SOFT))
def test_soft_infonce_equals_official(name, dtype, tile_size):
    (t, alpha, beta), official = SOFT[name]
    nl, code, prior = code_search_inputs(dtype)
    nl.requires_grad_(True)
    code.requires_grad_(True)
    loss = SoftInfoNCE(t=t, alpha=alpha, beta=beta, tile_size=tile_size)(nl, code, prior=prior)
    gq, gc = torch.autograd.grad(loss, (nl, code))
    assert summary(loss, gq, gc, checksum_weights(2 * N, dtype)) == pytest.approx(official, **tolerance(dtype))


def test_soft_infonce_floor_case_clips():
    """The ``floor`` case does exercise the 0.1 floor (2 of the 56 weights, as the official code gives)."""
    from contrasuite.core.objectives.soft_infonce import soft_infonce_weights

    _, _, prior = code_search_inputs(torch.float64)
    w = soft_infonce_weights(prior, t=0.1)
    off = ~torch.eye(N, dtype=torch.bool)
    assert int((w[off] <= 0.1 + 1e-12).sum()) == 2


def run_feature_transformation(monkeypatch, normalize: bool):
    """Our Feature Transformation fed the official draws; MoCo logits ``[q^.k^, q^.n^] / T`` and ``q``."""

    def fixed_beta(alpha, shape, generator=None, dtype=torch.float32, device=None):
        assert alpha in (2.0, 1.6)
        return torch.full(shape, FT_POS_BETA if alpha == 2.0 else FT_NEG_BETA, dtype=dtype, device=device)

    q, k, queue, perm = moco_inputs()
    monkeypatch.setattr(ft_module, "sample_beta", fixed_beta)
    monkeypatch.setattr(ft_module.torch, "randperm", lambda n, *args, **kwargs: perm.clone())
    q.requires_grad_(True)
    out = FeatureTransformation(normalize=normalize)(q, k, queue)
    monkeypatch.undo()
    return q, out


def test_feature_transformation_equals_official(monkeypatch):
    q, out = run_feature_transformation(monkeypatch, normalize=False)
    a, cand = out.anchors, out.candidates
    logits = torch.cat([(a * cand[:N]).sum(1, keepdim=True), a @ cand[N:].T], dim=1) / FT_T
    loss = F.cross_entropy(logits, torch.zeros(N, dtype=torch.long))
    (grad,) = torch.autograd.grad(loss, q, retain_graph=True)
    c = torch.randn(N, D, generator=torch.Generator().manual_seed(1))  # drawn in fp32, as in the official run
    ours = dict(logit_sum=logits.sum().item(), logit_sq=logits.pow(2).sum().item(), pos=logits[:3, 0].tolist(),
                neg=logits[0, 1:4].tolist(), loss=loss.item(), grad_sq=grad.pow(2).sum().item(),
                grad_dot_c=(grad * c).sum().item(), grad00=grad[0, 0].item())
    for key, want in FT_DEFAULT.items():
        assert ours[key] == pytest.approx(want, rel=1e-5, abs=1e-5), key
    # the same loss through our objective: dot logits at T, the other anchors' k^ weighted out (MoCo's logits)
    weight = torch.ones(N, cand.shape[0])
    weight[:, :N] = torch.eye(N)
    loss_ours = InfoNCE(temperature=FT_T, similarity="dot")(a, cand, pos_mask=out.pos_mask, neg_weight=weight)
    (grad_ours,) = torch.autograd.grad(loss_ours, q)
    assert loss_ours.item() == pytest.approx(FT_DEFAULT["loss"], rel=1e-5)
    assert grad_ours.pow(2).sum().item() == pytest.approx(FT_DEFAULT["grad_sq"], rel=1e-5)


def test_feature_transformation_normalize_matches_postmix_norm_on_positives(monkeypatch):
    """``normalize=True`` renormalises ``q^, k^`` as the official ``--postmix_norm`` does; it also
    renormalises the mixed negatives, which the official code does not (its ``norm_target`` is fixed to
    ``'pos'`` in the constructor), so only the positive logits are compared."""
    _, out = run_feature_transformation(monkeypatch, normalize=True)
    pos = (out.anchors * out.candidates[:N]).sum(1) / FT_T
    assert pos[:3].tolist() == pytest.approx(FT_POSTMIX_NORM_POS, rel=1e-5)
    assert torch.allclose(out.candidates[N:].norm(dim=1), torch.ones(32))
