"""Least squares, Ridge and Newton (IRLS) logistic regression fits against
scikit-learn.

Same data, same penalty, both run in this process: LinearRegression against
``sklearn.linear_model.LinearRegression`` (``scipy.linalg.lstsq``), Ridge(alpha=1)
against ``sklearn.linear_model.Ridge`` (its default "auto" → Cholesky solver), and
``LogisticRegression(solver="newton", C=1)`` against scikit-learn's default
(lbfgs) at the same tolerance scale.
"""

import numpy as np

SUITE = "linear"
D = 50


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    w = rng.standard_normal(D) / np.sqrt(D)
    z = X @ w + 0.3
    y_reg = z + 0.5 * rng.standard_normal(n)
    y_clf = (rng.uniform(size=n) < 1 / (1 + np.exp(-3 * z))).astype(np.int64)
    return X, y_reg, y_clf


def run(bench):
    from sklearn import linear_model as sk

    from xpml.linear_model import LinearRegression, LogisticRegression, Ridge

    for n in bench.sizes([100_000], [10_000]):
        X, y_reg, y_clf = _data(n)
        Xb, yb_reg, yb_clf = bench.to_backend(X, y_reg, y_clf)
        bench.compare(
            "linear",
            f"LinearRegression d={D}",
            n,
            lambda: LinearRegression().fit(Xb, yb_reg),
            lambda: sk.LinearRegression().fit(X, y_reg),
            params={"d": D},
        )
        bench.compare(
            "linear",
            f"Ridge alpha=1 d={D}",
            n,
            lambda: Ridge(alpha=1.0).fit(Xb, yb_reg),
            lambda: sk.Ridge(alpha=1.0).fit(X, y_reg),
            params={"d": D, "alpha": 1.0},
        )
        bench.compare(
            "linear",
            f"LogisticRegression newton C=1 d={D}",
            n,
            lambda: LogisticRegression(C=1.0, solver="newton", tol=1e-6).fit(
                Xb, yb_clf
            ),
            lambda: sk.LogisticRegression(C=1.0, tol=1e-6, max_iter=1000).fit(X, y_clf),
            params={"d": D, "C": 1.0},
            note="reference: lbfgs",
        )
