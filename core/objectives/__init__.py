"""Contrastive objectives sharing one call convention (see :mod:`contrasuite.core.objectives.base`)."""

from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.circle import CircleLoss, circle_loss
from contrasuite.core.objectives.clip import CLIPLoss, clip_loss
from contrasuite.core.objectives.compose import OBJECTIVES, ObjectiveSum, build_objective_term
from contrasuite.core.objectives.dcl import DCL, DCLW, decoupled_infonce, vmf_weights
from contrasuite.core.objectives.dhel import DHEL, dhel
from contrasuite.core.objectives.focal_infonce import FocalInfoNCE, focal_logits
from contrasuite.core.objectives.hyperbolic import HyperbolicPairwiseCE
from contrasuite.core.objectives.infonce import InfoNCE, weighted_infonce
from contrasuite.core.objectives.kcl import KCL, kcl
from contrasuite.core.objectives.multi_similarity import (
    MultiSimilarityLoss,
    multi_similarity_loss,
    multi_similarity_mine,
)
from contrasuite.core.objectives.siglip import SigLIP, sigmoid_pair_loss
from contrasuite.core.objectives.soft_infonce import SoftInfoNCE, soft_infonce_weights
from contrasuite.core.objectives.weince import WEINCE, WEINCERepro, weince
from contrasuite.core.objectives.weince_gate import weince_gate

__all__ = [
    "DCL",
    "DCLW",
    "DHEL",
    "FocalInfoNCE",
    "KCL",
    "SoftInfoNCE",
    "WEINCE",
    "WEINCERepro",
    "decoupled_infonce",
    "dhel",
    "focal_logits",
    "kcl",
    "soft_infonce_weights",
    "vmf_weights",
    "weince",
    "weince_gate",
    "CLIPLoss",
    "CircleLoss",
    "HyperbolicPairwiseCE",
    "MultiSimilarityLoss",
    "SigLIP",
    "circle_loss",
    "clip_loss",
    "multi_similarity_loss",
    "multi_similarity_mine",
    "sigmoid_pair_loss",
    "OBJECTIVES",
    "ContrastiveObjective",
    "Distributed",
    "InfoNCE",
    "ObjectiveSum",
    "build_objective_term",
    "weighted_infonce",
]
