"""Kernel Contrastive Loss (Koromilas et al., ICML 2024, arXiv:2405.18045).

For L2-normalised anchors ``a_i`` and positives ``p_i`` (``i = 1..N``) and a kernel ``k`` of the
squared distance (:mod:`contrasuite.core.similarity.kernels`)::

    L = -A + gamma * E
    A = 2 * mean_i k(|a_i - p_i|^2)
    E = c * ( mean_{i<j} k(|a_i - a_j|^2) + mean_{i<j} k(|p_i - p_j|^2) )

``c = 1`` for the Gaussian kernel ``exp(-t d^2)`` and ``c = 1/2`` for the logarithmic kernel
``-log(1 + t d^2)``, as in the official ``utils.py``. Per anchor, ``L_i = -2 k(a_i, p_i) + gamma * c *
(mean_{j != i} k(a_i, a_j) + mean_{j != i} k(p_i, p_j))``; their mean is ``L`` exactly, since
``mean_{i<j} k_ij = mean_i mean_{j != i} k_ij`` for a symmetric kernel.

Contract mapping: ``anchors`` = first view ``[N, D]``, ``candidates`` = second view ``[N, D]`` with
diagonal positives (``pos_mask=None``). Extra candidate columns, labels and ``neg_weight`` raise an
error: KCL has no negatives to add or weight, only the two within-view energies.

Distributed: ``Distributed.GLOBAL_STATISTICS``: the energies are means over all pairs of the whole
batch, so a rank needs both views of every rank (gathered with gradient).
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.dhel import check_paired_views
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import normalize
from contrasuite.core.similarity.kernels import get_kernel, off_diagonal_kernel_sum, paired_squared_distance

ENERGY_SCALE = {"gaussian": 1.0, "log": 0.5}


def kcl(k_ap: Tensor, energy_a: Tensor, energy_p: Tensor, gamma: float, energy_scale: float = 1.0) -> Tensor:
    """Per-anchor KCL ``[N]`` from the anchor-positive kernel values ``[N]`` and the within-view energies
    ``sum_{j != i} k(x_i, x_j)`` ``[N]`` of each view."""
    n = k_ap.shape[0]
    return -2.0 * k_ap + gamma * energy_scale * (energy_a + energy_p) / (n - 1)


class KCL(ContrastiveObjective):
    """KCL; see the module docstring.

    Args:
        t: kernel parameter. Default 2.0 (official code).
        kernel: ``"gaussian"`` (default) or ``"log"``.
        gamma: weight of the energy term. Default 16.0 (official code).
    """

    distributed: ClassVar[Distributed] = Distributed.GLOBAL_STATISTICS
    paired_views: ClassVar[bool] = True

    def __init__(self, t: float = 2.0, kernel: str = "gaussian", gamma: float = 16.0) -> None:
        super().__init__()
        if t <= 0:
            raise ValueError(f"t must be > 0, got {t}")
        self._kernel = get_kernel(kernel)
        self.t = t
        self.kernel = kernel
        self.gamma = gamma

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        n = check_paired_views(pairs, "KCL")
        if candidates.shape[0] != n:
            raise ValueError(f"KCL takes no extra candidate columns: candidates must be [N={n}, D], got {tuple(candidates.shape)}")
        if neg_weight is not None:
            raise ValueError("KCL has no per-negative weights: neg_weight must be None")
        a, p = normalize(anchors), normalize(candidates)  # one view at a time: no stacked copy to split
        k_ap = self._kernel.value_(self.t * paired_squared_distance(a, p))
        energy_a, energy_p = (off_diagonal_kernel_sum(z, self._kernel, self.t) for z in (a, p))
        return kcl(k_ap, energy_a, energy_p, self.gamma, ENERGY_SCALE[self.kernel])
