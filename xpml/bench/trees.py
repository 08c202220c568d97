"""Decision tree and random forest (100 trees) fit and predict against scikit-learn.

Data: ``make_classification(n, 20 features, 10 informative)``; both libraries
grow full trees (gini), the forests use ``max_features="sqrt"`` and bootstrap,
single-threaded on both sides (``n_jobs=None``). The note records the test
accuracy of both on a held-out copy of the same generator.
"""

import numpy as np

SUITE = "trees"


def _data(n, d, seed):
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=2 * n, n_features=d, n_informative=10, random_state=seed
    )
    return X[:n], y[:n], X[n:], y[n:]


def run(bench):
    from sklearn.ensemble import RandomForestClassifier as SkForest
    from sklearn.tree import DecisionTreeClassifier as SkTree

    import xpml
    from xpml._backend import to_numpy
    from xpml.ensemble import RandomForestClassifier
    from xpml.tree import DecisionTreeClassifier

    d = 20
    for n in bench.sizes([20000], [2000]):
        X, y, Xt, yt = _data(n, d, 0)
        Xb, yb, Xtb = bench.to_backend(X, y, Xt)
        with xpml.backend(bench.backend, device=bench.device, output="backend"):
            tree = DecisionTreeClassifier().fit(Xb, yb)
            acc = np.mean(to_numpy(tree.predict(Xtb)) == yt)
        ref = SkTree(random_state=0).fit(X, y)
        note = f"test acc xpml {acc:.4f} sklearn {ref.score(Xt, yt):.4f}"
        bench.compare(
            SUITE,
            f"tree fit d={d}",
            n,
            lambda: DecisionTreeClassifier().fit(Xb, yb),
            lambda: SkTree(random_state=0).fit(X, y),
            params={"d": d},
            note=note,
            repeats=min(bench.repeats, 3),
        )
        bench.compare(
            SUITE,
            f"tree predict d={d}",
            n,
            lambda: tree.predict(Xtb),
            lambda: ref.predict(Xt),
            params={"d": d},
            repeats=3 * bench.repeats,  # calls of a few ms: a steadier median
        )

        T = 100
        with xpml.backend(bench.backend, device=bench.device, output="backend"):
            forest = RandomForestClassifier(T, random_state=0).fit(Xb, yb)
            acc = np.mean(to_numpy(forest.predict(Xtb)) == yt)
        ref_f = SkForest(T, random_state=0).fit(X, y)
        note = f"test acc xpml {acc:.4f} sklearn {ref_f.score(Xt, yt):.4f}"
        bench.compare(
            SUITE,
            f"forest fit {T} trees d={d}",
            n,
            lambda: RandomForestClassifier(T, random_state=0).fit(Xb, yb),
            lambda: SkForest(T, random_state=0).fit(X, y),
            params={"d": d, "n_estimators": T},
            note=note,
            repeats=1,
        )
        bench.compare(
            SUITE,
            f"forest predict_proba {T} trees d={d}",
            n,
            lambda: forest.predict_proba(Xtb),
            lambda: ref_f.predict_proba(Xt),
            params={"d": d, "n_estimators": T},
            repeats=bench.repeats,
        )
