"""Negative sources and negative weights."""

from contrasuite.core.negatives.cluster_weights import ClusterWeights, Clustering, disagreement_weights, kmeans
from contrasuite.core.negatives.learned_weights import LearnedNegativeWeights
