"""KMeans fit (Lloyd) against scikit-learn's lloyd from the same initial centres,
and agglomerative linkage against SciPy."""

import numpy as np

SUITE = "cluster"


def run(bench):
    from sklearn.cluster import KMeans as SK

    from xpml.cluster import AgglomerativeClustering, KMeans

    d = 20
    for n in bench.sizes([50000], [5000]):
        rng = np.random.default_rng(0)
        centres = 3.0 * rng.standard_normal((64, d))
        X = centres[rng.integers(0, 64, size=n)] + rng.standard_normal((n, d))
        Xb = bench.to_backend(X)
        for k in (8, 64):
            init = X[rng.choice(n, size=k, replace=False)]
            initb = bench.to_backend(init)
            ours = KMeans(k, init=initb, max_iter=100)
            ref = SK(k, init=init, n_init=1, max_iter=100, algorithm="lloyd")
            n_iter = ours.fit(Xb).n_iter_
            bench.compare(
                SUITE,
                f"KMeans fit k={k} d={d}",
                n,
                lambda: ours.fit(Xb),
                lambda: ref.fit(X),
                params={"d": d, "k": k},
                note=f"{n_iter} iterations, same init",
                repeats=min(bench.repeats, 3),
            )

    for n in bench.sizes([2000], [500]):
        from scipy.cluster.hierarchy import linkage

        X = np.random.default_rng(1).standard_normal((n, 5))
        Xb = bench.to_backend(X)
        est = AgglomerativeClustering(linkage="average")
        bench.compare(
            SUITE,
            "agglomerative average d=5",
            n,
            lambda: est.fit(Xb),
            lambda: linkage(X, method="average"),
            ref_name="scipy linkage",
            params={"d": 5},
            repeats=min(bench.repeats, 3),
        )
