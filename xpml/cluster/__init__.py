"""Clustering: k-means (Lloyd) and agglomerative clustering (Lance–Williams)."""

from xpml.cluster._agglomerative import AgglomerativeClustering, linkage_labels
from xpml.cluster._kmeans import KMeans

__all__ = ["KMeans", "AgglomerativeClustering", "linkage_labels"]
