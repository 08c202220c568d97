"""k-NN predict against scikit-learn (brute force, and k-d trees in low dimension).

The approximate k-d tree's recall@k against the exact neighbours is measured in
the same run and written in the case's note.
"""

import numpy as np

SUITE = "neighbors"


def run(bench):
    from sklearn.neighbors import KNeighborsClassifier as SK

    from xpml._backend import to_numpy
    from xpml.neighbors import KNeighborsClassifier, NearestNeighbors, recall_at_k

    d, k = 20, 5
    for n in bench.sizes([20000, 50000], [2000, 5000]):
        rng = np.random.default_rng(0)
        X, Q = rng.standard_normal((n, d)), rng.standard_normal((n, d))
        y = rng.integers(0, 5, size=n)
        Xb, yb, Qb = bench.to_backend(X, y, Q)
        ours = KNeighborsClassifier(n_neighbors=k).fit(Xb, yb)
        ref = SK(n_neighbors=k, algorithm="brute").fit(X, y)
        same = np.array_equal(to_numpy(ours.predict(Qb)), ref.predict(Q))
        bench.compare(
            SUITE,
            f"kNN predict brute k={k} d={d}",
            n,
            lambda: ours.predict(Qb),
            lambda: ref.predict(Q),
            params={"d": d, "k": k, "n_queries": n},
            note="" if same else "predictions differ",
            repeats=min(bench.repeats, 3),
        )

    d = 3
    for n in bench.sizes([20000, 50000], [2000, 5000]):
        rng = np.random.default_rng(1)
        X, Q = rng.standard_normal((n, d)), rng.standard_normal((n, d))
        y = rng.integers(0, 5, size=n)
        ref = SK(n_neighbors=k, algorithm="kd_tree").fit(X, y)
        for algorithm in ("kd_tree", "approx_kd_tree"):
            ours = KNeighborsClassifier(n_neighbors=k, algorithm=algorithm).fit(X, y)
            note = ""
            if algorithm == "approx_kd_tree":
                _, exact = NearestNeighbors(n_neighbors=k).fit(X).kneighbors(Q[:2000])
                _, approx = ours.kneighbors(Q[:2000])
                note = f"recall@{k}={recall_at_k(approx, exact):.4f} (max_leaves=16, leaf_size=64)"
            bench.compare(
                SUITE,
                f"kNN predict {algorithm} k={k} d={d}",
                n,
                lambda: ours.predict(Q),
                lambda: ref.predict(Q),
                ref_name="scikit-learn kd_tree",
                params={"d": d, "k": k},
                note=note,
                repeats=min(bench.repeats, 3),
            )
