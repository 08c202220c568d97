"""KMeans fit against scikit-learn's lloyd on several data shapes (issue 14).

``xpml bench cluster`` times one data set (64 Gaussian blobs, d = 20) at k = 8
and 64. Here: blobs and structureless Gaussian data, d = 5, 20, 100, several k,
the same initial centres on both sides and a fixed number of iterations
(``--max-iter``; the Gaussian data rarely converges before it). xpml is timed
as it runs (on NumPy float64 its switch uses Hamerly's bounds while a
bounded step is no slower than a plain one), with the bounds at every step,
and without them (every row scored each iteration). Medians of
``--repeats`` fits, the three variants in turns.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/kmeans_shapes.py
"""

import argparse
import statistics
import time

import numpy as np

#: (n, d, ks)
SHAPES = (
    (50_000, 20, (8, 16, 32, 64)),
    (100_000, 5, (16, 32, 64)),
    (50_000, 100, (8, 32)),
)


def _data(kind, n, d, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return rng.standard_normal((n, d)), rng
    centres = 3.0 * rng.standard_normal((64, d))
    return centres[rng.integers(0, 64, size=n)] + rng.standard_normal((n, d)), rng


def _timed(fns, repeats):
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def _variants(ours, ref, X):
    """The timed fits of one case: xpml as it runs (its switch decides when
    the bounds are used), xpml with the bounds at every step after the first,
    xpml without them, scikit-learn."""
    import xpml.cluster._kmeans as K

    def patched(name, value):
        def fit():
            saved = getattr(K._BoundsSwitch, name)
            setattr(K._BoundsSwitch, name, value)
            try:
                ours.fit(X)
            finally:
                setattr(K._BoundsSwitch, name, saved)

        return fit

    def always(self, data, first):
        return K.dataclasses.replace(data, bounds=None if first else self.bounds)

    def never(self, data, first):
        return K.dataclasses.replace(data, bounds=None)

    return {
        "xpml": lambda: ours.fit(X),
        "always": patched("data", always),
        "plain": patched("data", never),
        "ref": lambda: ref.fit(X),
    }


def _case(kind, n, d, k, *, max_iter, repeats):
    from sklearn.cluster import KMeans as SK

    from xpml.cluster import KMeans

    X, rng = _data(kind, n, d)
    init = X[rng.choice(n, size=k, replace=False)]
    ours = KMeans(k, init=init, max_iter=max_iter)
    ref = SK(k, init=init, n_init=1, max_iter=max_iter, algorithm="lloyd")
    ms = _timed(_variants(ours, ref, X), repeats)
    cells = [ms[v] for v in ("xpml", "always", "plain", "ref")]
    cells += [ms[v] / ms["ref"] for v in ("xpml", "always", "plain")]
    return (
        f"| {kind} | {n} | {d} | {k} | {ours.n_iter_} | "
        + " | ".join(f"{c:.1f}" if i < 4 else f"{c:.2f}" for i, c in enumerate(cells))
        + " |"
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-iter", type=int, default=50)
    args = p.parse_args(argv)
    print(
        "| data | n | d | k | iterations | xpml (ms) | bounds always (ms) "
        "| no bounds (ms) | scikit-learn (ms) | ratio | ratio, bounds always "
        "| ratio, no bounds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, d, ks in SHAPES:
        for kind in ("blobs", "gaussian"):
            for k in ks:
                print(
                    _case(kind, n, d, k, max_iter=args.max_iter, repeats=args.repeats)
                )


if __name__ == "__main__":
    main()
