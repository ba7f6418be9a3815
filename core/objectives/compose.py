"""Objectives by name, and a weighted sum of terms built from config.

A config lists loss terms, so any objective can be swapped into any task from the command line::

    objective:
      terms:
        - {name: infonce, weight: 1.0, temperature: 0.5}

Registration is explicit: each objective module is imported here and added to ``OBJECTIVES``. A
domain with loss terms of its own (e.g. a library's reference implementation) passes them as
``extra`` instead of changing this registry, and declares them on its task class as
``extra_objectives`` so the engine's config check knows the names.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from torch import Tensor, nn

from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.objectives.circle import CircleLoss
from contrasuite.core.objectives.clip import CLIPLoss
from contrasuite.core.objectives.dcl import DCL, DCLW
from contrasuite.core.objectives.dhel import DHEL
from contrasuite.core.objectives.focal_infonce import FocalInfoNCE
from contrasuite.core.objectives.hyperbolic import HyperbolicPairwiseCE
from contrasuite.core.objectives.infonce import InfoNCE
from contrasuite.core.objectives.kcl import KCL
from contrasuite.core.objectives.multi_similarity import MultiSimilarityLoss
from contrasuite.core.objectives.siglip import SigLIP
from contrasuite.core.objectives.soft_infonce import SoftInfoNCE
from contrasuite.core.objectives.weince import WEINCE, WEINCERepro

OBJECTIVES: dict[str, type[ContrastiveObjective]] = {
    "infonce": InfoNCE,
    "circle": CircleLoss,
    "multi_similarity": MultiSimilarityLoss,
    "hyperbolic_pairwise_ce": HyperbolicPairwiseCE,
    "siglip": SigLIP,
    "clip": CLIPLoss,
    "dcl": DCL,
    "dclw": DCLW,
    "dhel": DHEL,
    "kcl": KCL,
    "soft_infonce": SoftInfoNCE,
    "focal_infonce": FocalInfoNCE,
    "weince": WEINCE,
    "weince_repro": WEINCERepro,
}


def build_objective_term(
    spec: Mapping[str, Any], extra: Mapping[str, type[nn.Module]] | None = None
) -> tuple[float, nn.Module]:
    """``{name: ..., weight: ..., **kwargs}`` -> ``(weight, objective)``; errors name the bad key.

    ``extra`` adds names (a domain's own terms) on top of ``OBJECTIVES``.
    """
    registry = {**OBJECTIVES, **(extra or {})}
    spec = dict(spec)
    name = spec.pop("name", None)
    weight = float(spec.pop("weight", 1.0))
    if name not in registry:
        raise ValueError(f"unknown objective {name!r}; known: {sorted(registry)}")
    try:
        return weight, registry[name](**spec)
    except TypeError as err:
        raise ValueError(f"objective {name!r}: {err}") from None


class ObjectiveSum(nn.Module):
    """``sum_k weight_k * objective_k(...)``, each term called with the same arguments."""

    def __init__(
        self, terms: Sequence[Mapping[str, Any]], extra: Mapping[str, type[nn.Module]] | None = None
    ) -> None:
        super().__init__()
        if not terms:
            raise ValueError("objective.terms is empty: give at least one {name: ...} term")
        built = [build_objective_term(t, extra) for t in terms]
        self.weights = [w for w, _ in built]
        self.terms = nn.ModuleList(obj for _, obj in built)
        self.names = [f"{i}:{t.get('name')}" for i, t in enumerate(terms)]
        """Each term's name in messages and logs: ``<index>:<objective name>``, e.g. ``0:infonce``."""

    def parts(self, anchors: Tensor, candidates: Tensor | None = None, *, prior: Tensor | None = None,
              via: Callable[..., Tensor] | None = None, **kwargs: Any) -> dict[str, Tensor]:
        """``{name: weight_k * objective_k(...)}``: the weighted terms whose sum is :meth:`forward`.

        ``prior`` (a similarity prior ``[N, M]``) goes only to the terms that declare ``takes_prior``.
        ``via(term, anchors, candidates, **kwargs)`` calls each term instead of ``term(...)`` (e.g.
        :func:`~contrasuite.core.distributed.distributed_objective` across ranks). A term's
        ``ValueError`` is raised again with the term's name in front."""
        out = {}
        for name, weight, term in zip(self.names, self.weights, self.terms):
            extra = {"prior": prior} if prior is not None and getattr(term, "takes_prior", False) else {}
            try:
                value = via(term, anchors, candidates, **kwargs, **extra) if via else term(anchors, candidates, **kwargs, **extra)
            except ValueError as err:
                raise ValueError(f"{name} ({type(term).__name__}): {err}") from err
            out[name] = weight * value
        return out

    @property
    def takes_prior(self) -> bool:
        """Whether any term uses a similarity prior (Soft-InfoNCE)."""
        return any(getattr(term, "takes_prior", False) for term in self.terms)

    def forward(self, anchors: Tensor, candidates: Tensor | None = None, **kwargs: Any) -> Tensor:
        return sum(self.parts(anchors, candidates, **kwargs).values())
