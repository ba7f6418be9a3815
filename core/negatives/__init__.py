"""Negative sources and negative weights."""

from contrasuite.core.negatives.cluster_weights import ClusterWeights, Clustering, disagreement_weights, kmeans
from contrasuite.core.negatives.feature_transformation import (
    FeatureTransformation,
    extrapolate_positive,
    interpolate_negatives,
    sample_beta,
)
from contrasuite.core.negatives.learned_weights import LearnedNegativeWeights
from contrasuite.core.negatives.mochi import mochi, per_anchor_columns
from contrasuite.core.negatives.queue import NegativeQueue
from contrasuite.core.negatives.source import Inputs, Negatives, NegativeSource
from contrasuite.core.negatives.sources import (
    NEGATIVE_SOURCES,
    FeatureTransformationSource,
    MochiSource,
    QueueSource,
    TopKSource,
    build_negative_source,
    register_negative_source,
)
from contrasuite.core.negatives.topk import HardNegatives, hardest_negatives, mine_hard_negatives
