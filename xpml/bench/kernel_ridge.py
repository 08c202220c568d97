"""KernelRidge fit (RBF, d=20) against ``sklearn.kernel_ridge.KernelRidge``.

Two xpml cases per size: the default (``compute_dof="lazy"``) does the same
work as scikit-learn (Gram matrix, Cholesky in place, two triangular solves;
``effective_dof_`` waits for its first read); ``compute_dof=True`` also computes
``effective_dof_`` in ``fit`` (one triangular inversion more).
"""

import numpy as np

SUITE = "kernel_ridge"


def run(bench):
    from sklearn.kernel_ridge import KernelRidge as SK

    from xpml.kernel_ridge import KernelRidge

    d, gamma, alpha = 20, 0.05, 1.0
    for n in bench.sizes([2000, 5000, 10000], [500, 1000]):
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n, d))
        y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
        Xb, yb = bench.to_backend(X, y)
        params = {"d": d, "gamma": gamma, "alpha": alpha}
        fast = KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma)
        full = KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma, compute_dof=True)
        ref = SK(alpha=alpha, kernel="rbf", gamma=gamma)
        bench.compare(
            SUITE,
            "fit rbf d=20",
            n,
            lambda: fast.fit(Xb, yb),
            lambda: ref.fit(X, y),
            params=params,
            note="default (dof lazy)",
        )
        bench.compare(
            SUITE,
            "fit rbf d=20 +effective_dof_",
            n,
            lambda: full.fit(Xb, yb),
            lambda: ref.fit(X, y),
            params=params,
            note="compute_dof=True",
        )
