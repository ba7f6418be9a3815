"""Feature Transformation (Zhu et al., "Improving Contrastive Learning by Visualizing Feature
Transformation", ICCV 2021, arXiv:2108.02982).

* Positive extrapolation, ``lambda+ = 1 + Beta(a+, a+)`` in ``[1, 2]``::

      q^ = lambda+ q + (1 - lambda+) k,     k^ = lambda+ k + (1 - lambda+) q

  pushes the pair apart along ``q - k`` (a harder positive: the positive score drops).
* Negative interpolation, ``lambda- ~ Beta(a-, a-)`` in ``(0, 1)``, ``pi`` a random permutation::

      n^_i = lambda- n_i + (1 - lambda-) n_pi(i)

  diversifies the negatives (queue entries, other ranks' keys, shuffled pairs).

Defaults follow the official README command: ``a+ = 2.0``, ``a- = 1.6``, one ``lambda`` per batch
(``--dim_mask none``), no renormalisation (``--postmix_norm`` off). ``per_sample=True`` draws one
``lambda`` per row; ``normalize=True`` L2-renormalises the mixed features. All draws come from the
``generator`` argument (Beta via Marsaglia-Tsang Gamma sampling on torch RNG). Gradients flow through
the mixing to whichever inputs carry them; in MoCo ``k`` and the queue are already detached. Keep
enqueueing the *un-mixed* keys (the official code's ``all_k``), so the memory stays clean.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def sample_gamma(concentration: float, shape: tuple[int, ...], generator: torch.Generator | None = None,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
    """``Gamma(concentration, 1)`` draws from torch's RNG (Marsaglia and Tsang 2000).

    For ``concentration < 1`` uses ``Gamma(a) = Gamma(a + 1) * U^(1/a)``.
    """
    if concentration <= 0:
        raise ValueError(f"Gamma concentration must be > 0, got {concentration}")
    a = concentration + 1.0 if concentration < 1 else concentration
    d = a - 1.0 / 3.0
    c = 1.0 / (9.0 * d) ** 0.5
    numel = 1
    for s in shape:
        numel *= s
    out = torch.empty(numel, dtype=torch.float64, device=device)
    todo = torch.arange(numel, device=device)
    while todo.numel() > 0:
        x = torch.randn(todo.numel(), generator=generator, dtype=torch.float64, device=device)
        u = torch.rand(todo.numel(), generator=generator, dtype=torch.float64, device=device)
        v = (1 + c * x) ** 3
        ok = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp_min(1e-300)))
        out[todo[ok]] = d * v[ok]
        todo = todo[~ok]
    if concentration < 1:
        u = torch.rand(numel, generator=generator, dtype=torch.float64, device=device)
        out = out * u ** (1.0 / concentration)
    return out.reshape(shape).to(dtype)


def sample_beta(alpha: float, shape: tuple[int, ...], generator: torch.Generator | None = None,
                dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
    """``Beta(alpha, alpha)`` draws as ``X / (X + Y)`` with ``X, Y ~ Gamma(alpha)``."""
    x = sample_gamma(alpha, shape, generator, torch.float64, device)
    y = sample_gamma(alpha, shape, generator, torch.float64, device)
    return (x / (x + y)).to(dtype)


def _lambdas(alpha: float, rows: int, per_sample: bool, like: Tensor, generator: torch.Generator | None) -> Tensor:
    lam = sample_beta(alpha, (rows if per_sample else 1,), generator, like.dtype, like.device)
    return lam[:, None]


def extrapolate_positive(q: Tensor, k: Tensor, alpha: float = 2.0, *, per_sample: bool = False,
                         normalize: bool = False, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(q^, k^, lambda+)`` with ``lambda+ = 1 + Beta(alpha, alpha)`` of shape ``[N or 1, 1]``."""
    if q.shape != k.shape or q.dim() != 2:
        raise ValueError(f"q and k must both be [N, D], got {tuple(q.shape)} and {tuple(k.shape)}")
    lam = 1 + _lambdas(alpha, q.shape[0], per_sample, q, generator)
    q_hat, k_hat = lam * q + (1 - lam) * k, lam * k + (1 - lam) * q
    if normalize:
        q_hat, k_hat = F.normalize(q_hat, dim=1), F.normalize(k_hat, dim=1)
    return q_hat, k_hat, lam


def interpolate_negatives(negatives: Tensor, alpha: float = 1.6, *, per_sample: bool = False, normalize: bool = False,
                          generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(n^, lambda-, pi)``: each negative mixed with a randomly permuted one, ``lambda- ~ Beta(alpha, alpha)``."""
    if negatives.dim() != 2:
        raise ValueError(f"negatives must be [K, D], got {tuple(negatives.shape)}")
    lam = _lambdas(alpha, negatives.shape[0], per_sample, negatives, generator)
    perm = torch.randperm(negatives.shape[0], generator=generator, device="cpu").to(negatives.device)
    mixed = lam * negatives + (1 - lam) * negatives[perm]
    return (F.normalize(mixed, dim=1) if normalize else mixed), lam, perm


@dataclass(frozen=True)
class Transformed:
    """Inputs for any objective: ``objective(anchors, candidates, pos_mask=pos_mask)``."""

    anchors: Tensor
    candidates: Tensor
    pos_mask: Tensor


class FeatureTransformation(nn.Module):
    """Positive extrapolation and negative interpolation in one call; see the module docstring.

    ``forward(q, k, negatives=None, generator=None)`` returns :class:`Transformed` with anchors
    ``q^``, candidates ``[k^; n^]`` and the diagonal ``pos_mask``. ``negatives=None`` skips the
    interpolation (the candidates are ``k^`` only, in-batch negatives).
    """

    def __init__(self, pos_alpha: float = 2.0, neg_alpha: float = 1.6, *, extrapolate: bool = True,
                 interpolate: bool = True, per_sample: bool = False, normalize: bool = False) -> None:
        super().__init__()
        if pos_alpha <= 0 or neg_alpha <= 0:
            raise ValueError(f"pos_alpha and neg_alpha must be > 0, got {pos_alpha}, {neg_alpha}")
        self.pos_alpha, self.neg_alpha = pos_alpha, neg_alpha
        self.extrapolate, self.interpolate = extrapolate, interpolate
        self.per_sample, self.normalize = per_sample, normalize

    def forward(self, q: Tensor, k: Tensor, negatives: Tensor | None = None,
                generator: torch.Generator | None = None) -> Transformed:
        if self.extrapolate:
            q, k, _ = extrapolate_positive(q, k, self.pos_alpha, per_sample=self.per_sample,
                                           normalize=self.normalize, generator=generator)
        candidates = k
        if negatives is not None:
            if self.interpolate:
                negatives, _, _ = interpolate_negatives(negatives.to(k.dtype), self.neg_alpha, per_sample=self.per_sample,
                                                        normalize=self.normalize, generator=generator)
            candidates = torch.cat([k, negatives.to(k.dtype)], dim=0)
        pos_mask = torch.eye(q.shape[0], candidates.shape[0], dtype=torch.bool, device=q.device)
        return Transformed(anchors=q, candidates=candidates, pos_mask=pos_mask)
