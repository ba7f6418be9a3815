"""Contrastive objectives sharing one call convention (see :mod:`contrasuite.core.objectives.base`)."""

from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import InfoNCE, weighted_infonce

__all__ = ["ContrastiveObjective", "Distributed", "InfoNCE", "weighted_infonce"]
