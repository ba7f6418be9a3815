"""Contrastive objectives sharing one call convention (see :mod:`contrasuite.core.objectives.base`)."""

from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.compose import OBJECTIVES, ObjectiveSum, build_objective_term
from contrasuite.core.objectives.infonce import InfoNCE, weighted_infonce

__all__ = [
    "OBJECTIVES",
    "ContrastiveObjective",
    "Distributed",
    "InfoNCE",
    "ObjectiveSum",
    "build_objective_term",
    "weighted_infonce",
]
