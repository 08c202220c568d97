"""Matrix decompositions: PCA and truncated SVD by the SVD of the data."""

from xpml.decomposition._pca import PCA, TruncatedSVD

__all__ = ["PCA", "TruncatedSVD"]
