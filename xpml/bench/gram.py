"""RBF Gram matrix against ``sklearn.metrics.pairwise.rbf_kernel``."""

import numpy as np

SUITE = "gram"


def run(bench):
    from sklearn.metrics.pairwise import rbf_kernel

    from xpml.kernels import gram

    for n in bench.sizes([2000, 5000, 10000], [500, 1000]):
        X = np.random.default_rng(0).standard_normal((n, 20))
        Xb = bench.to_backend(X)
        bench.compare(
            "gram",
            "rbf gamma=0.05 d=20",
            n,
            lambda: gram(Xb, kernel="rbf", gamma=0.05),
            lambda: rbf_kernel(X, gamma=0.05),
            params={"d": 20, "gamma": 0.05},
        )
