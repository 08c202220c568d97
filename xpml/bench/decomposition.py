"""PCA fit against scikit-learn: the same algorithm (full SVD of the centred data)
and scikit-learn's default solver (which, for n >> d, eigen-decomposes the
covariance matrix instead)."""

import numpy as np

SUITE = "decomposition"


def run(bench):
    from sklearn.decomposition import PCA as SK

    from xpml.decomposition import PCA

    d, k = 100, 10
    for n in bench.sizes([50000], [5000]):
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n, d)) @ rng.standard_normal((d, d))
        Xb = bench.to_backend(X)
        ours = PCA(k)
        bench.compare(
            SUITE,
            f"PCA fit d={d} k={k} vs svd_solver=full",
            n,
            lambda: ours.fit(Xb),
            lambda: SK(k, svd_solver="full").fit(X),
            params={"d": d, "k": k},
        )
        bench.compare(
            SUITE,
            f"PCA fit d={d} k={k} vs default solver",
            n,
            lambda: ours.fit(Xb),
            lambda: SK(k).fit(X),
            ref_name="scikit-learn (auto: covariance_eigh)",
            params={"d": d, "k": k},
        )
