"""Our CUT networks and PatchNCE loss against numbers computed once with the official CUT code.

Procedure (run once, outside this repository): ``build()`` below makes our generator, discriminator and
patch head and fills their weights from a seed; a one-off script exported those state dicts, renamed
to the official modules' keys (``body`` -> ``conv_block`` in the residual blocks, ``mlps.<l>`` ->
``mlp_<l>`` in the head; the fixed blur filters are buffers the official modules make themselves), into
``models/networks.py`` of taesungp/contrastive-unpaired-translation at commit
b3ac297708dfb6f7589d04662277e53c0d579c27 (``ResnetGenerator`` with its defaults, anti-aliased down- and
up-sampling; ``NLayerDiscriminator`` with and without ``no_antialias``; ``PatchSampleF(use_mlp=True)``
given our patch ids) and ``models/patchnce.py`` (``PatchNCELoss``, ``nce_T`` 0.07, per-image negatives,
``CUTModel.calculate_NCE_loss``'s mean over layers), fed them the inputs below on the CPU in fp32, and
printed the values pinned here. Only the numbers were copied, no code. The same script measured the
largest elementwise differences between the official modules and ours: see docs/domains/translation.md.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from contrasuite.domains.translation.networks import PatchDiscriminator, PatchHead, ResnetGenerator, sample_locations
from contrasuite.domains.translation.patchnce import objective_terms
from contrasuite.domains.translation.task import NCEConfig, TranslationConfig, TranslationTask, lsgan
from contrasuite.core.objectives import ObjectiveSum

NGF, NDF, N_BLOCKS, LAYERS, NUM_PATCHES, HEAD_DIM, SIZE = 8, 8, 5, [0, 4, 8, 12, 16], 256, 256, 64
PATCH_SEED = 7
TINY_HEAD = 1e-6
"""Scale of the head's last layer in the second PatchNCE case: ``|z| ~ 1e-7``, where ``+ 1e-7`` matters."""


def seeded_fill(module: torch.nn.Module, seed: int) -> None:
    """Every parameter from one seeded stream, in ``named_parameters`` order: weights ``N(0, 1 / fan_in)``,
    biases ``N(0, 0.1^2)``, so activations stay of order 1 (CUT's init, gain 0.02, leaves them tiny)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in module.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def build(antialias: bool = True) -> tuple[ResnetGenerator, PatchDiscriminator, PatchHead]:
    g = ResnetGenerator(NGF, N_BLOCKS, antialias=antialias)
    d = PatchDiscriminator(NDF, 3, antialias=antialias)
    head = PatchHead([g.channels[i] for i in LAYERS], HEAD_DIM)
    for seed, module in enumerate((g, d, head)):
        seeded_fill(module, seed)
    return g, d, head


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (domain A) and ``y`` (domain B): ``[2, 3, 64, 64]`` uniform in [-1, 1]."""
    gen = torch.Generator().manual_seed(123)
    return torch.rand(2, 3, SIZE, SIZE, generator=gen) * 2 - 1, torch.rand(2, 3, SIZE, SIZE, generator=gen) * 2 - 1


def our_nce(g: ResnetGenerator, head: PatchHead, x: torch.Tensor, patch_norm: str = "official") -> torch.Tensor:
    """``NCE(x, G(x))`` through the task's own ``nce_loss`` and the default objective; patch ids drawn after
    ``torch.manual_seed(PATCH_SEED)`` (the official side was given the same ids)."""
    cfg = SimpleNamespace(nce=NCEConfig(layers=LAYERS, num_patches=NUM_PATCHES, patch_norm=patch_norm))
    objective = ObjectiveSum(objective_terms(TranslationConfig().objective.terms, patch_norm))
    task = SimpleNamespace(generator=g, layers=LAYERS, cfg=cfg, head=head, objective=objective)
    torch.manual_seed(PATCH_SEED)
    return TranslationTask.nce_loss(task, x, g(x), False)


def patch_ids(g: ResnetGenerator, x: torch.Tensor) -> list[torch.Tensor]:
    """The ids :func:`our_nce` samples (for the export script)."""
    feats = g.encode(x, LAYERS)
    torch.manual_seed(PATCH_SEED)
    return [sample_locations(f, NUM_PATCHES) for f in feats]


# Official values (fp32, CPU), see the module docstring.
OFFICIAL = {
    "g_sum": -726.7492065429688,
    "g_sq": 5020.76220703125,
    "g_at": [-0.15620394051074982, 0.3422951102256775, 0.3052462339401245],
    "d_shape": [2, 1, 6, 6],
    "d_sum": 16.403043746948242,
    "d_sq": 26.2716007232666,
    "d_at": [0.12156718969345093, 1.0545333623886108, 1.0375313758850098],
    "d_no_antialias_sum": 17.9404239654541,
    "d_no_antialias_sq": 35.987483978271484,
    "loss_d": 0.6800645589828491,
    "loss_g_gan": 1.2078913450241089,
    "nce": 7.221683502197266,
    "nce_tiny_head": 7.147702217102051,
}
ELEMENTS = [(0, 0, 0, 0), (1, 2, 31, 17), (0, 1, 63, 63)]
D_ELEMENTS = [(0, 0, 0, 0), (1, 0, 3, 2), (1, 0, 5, 5)]


def close(value: torch.Tensor | float, expected: float, rtol: float = 1e-5) -> None:
    """Relative 1e-5 (fp32), with a 1e-5 floor for elements of order 0.1-1.

    The pinned values came from an AVX-512 CPU, where ours equal them to 6e-8. fp32 convolutions sum in
    another order on an AVX2-only CPU (``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`` shows it
    here): a generator element then moves by up to 1.8e-6 and a sum by 9e-7 relative. A wrong padding
    or the other discriminator form moves them by 1e-2 and more."""
    assert float(value) == pytest.approx(expected, rel=rtol, abs=1e-5)


def test_generator_matches_official():
    g, _, _ = build()
    x, _ = inputs()
    with torch.no_grad():
        out = g(x)
    close(out.sum(), OFFICIAL["g_sum"])
    close(out.pow(2).sum(), OFFICIAL["g_sq"])
    for at, expected in zip(ELEMENTS, OFFICIAL["g_at"]):
        close(out[at], expected)


def test_discriminator_matches_official_in_both_forms():
    g, d, _ = build()
    x, y = inputs()
    with torch.no_grad():
        fake = g(x)
        pred_fake, pred_real = d(fake), d(y)
        plain = build(antialias=False)[1](y)
    assert list(pred_real.shape) == OFFICIAL["d_shape"]
    close(pred_real.sum(), OFFICIAL["d_sum"])
    close(pred_real.pow(2).sum(), OFFICIAL["d_sq"])
    for at, expected in zip(D_ELEMENTS, OFFICIAL["d_at"]):
        close(pred_real[at], expected)
    close(plain.sum(), OFFICIAL["d_no_antialias_sum"])
    close(plain.pow(2).sum(), OFFICIAL["d_no_antialias_sq"])
    # LSGAN as in CUTModel.compute_D_loss / compute_G_loss
    close(0.5 * (lsgan(pred_fake, 0.0) + lsgan(pred_real, 1.0)), OFFICIAL["loss_d"])
    close(lsgan(pred_fake, 1.0), OFFICIAL["loss_g_gan"])


def test_patchnce_matches_official_and_unit_norm_does_not_where_it_matters():
    g, _, head = build()
    x, _ = inputs()
    with torch.no_grad():
        close(our_nce(g, head, x), OFFICIAL["nce"])
        # The old renormalisation agrees where |z| >> 1e-7 ...
        close(our_nce(g, head, x, "unit"), OFFICIAL["nce"], rtol=1e-4)
        for mlp in head.mlps:
            mlp[2].weight.mul_(TINY_HEAD)
            mlp[2].bias.mul_(TINY_HEAD)
        close(our_nce(g, head, x), OFFICIAL["nce_tiny_head"])
        # ... and not where the official + 1e-7 shrinks the vectors.
        assert abs(float(our_nce(g, head, x, "unit")) - OFFICIAL["nce_tiny_head"]) > 1e-2


def test_official_patch_norm_refuses_a_renormalising_similarity():
    with pytest.raises(ValueError, match="patch_norm"):
        objective_terms([{"name": "infonce", "temperature": 0.07, "similarity": "cosine"}], "official")
    assert objective_terms([{"name": "infonce"}], "official") == [{"name": "infonce", "similarity": "dot"}]
    assert objective_terms([{"name": "dhel"}], "official") == [{"name": "dhel"}]
    assert objective_terms([{"name": "infonce"}], "unit") == [{"name": "infonce"}]
