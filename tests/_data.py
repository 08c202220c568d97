"""Small synthetic data sets for the tests (made here, no downloads)."""

import numpy as np


def blobs(n=60, d=4, k=3, seed=0, spread=1.0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    y = np.arange(n) % k
    X = centres[y] + spread * rng.normal(size=(n, d))
    return X, y


def linear(n=50, d=4, seed=0, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    return X, X @ w + 0.5 + noise * rng.normal(size=n)
