"""The R factor of a tall matrix on NumPy: LAPACK's QR of the whole against
xpml's blocked (tall-skinny) QR, and LinearRegression against scikit-learn
(issue 14: least squares and PCA's full solver reduce a tall matrix to its R).

Variants, timed in turns (round-robin, ``--rounds`` rounds of one call each;
medians in ms):

* ``lapack``: ``np.linalg.qr(A, mode="r")`` with NumPy's default BLAS threads;
* ``lapack 1 thread``: the same under ``threadpool_limits(1)``;
* ``blocks, 1 thread``: xpml's path (:func:`xpml.linalg._r_factor_numpy`);
* ``blocks, default threads``: the same blocks with the BLAS threads free;
* ``blocks on 2 threads``: the blocks spread over two Python threads, each
  with one BLAS thread (:func:`xpml.linalg.map_row_blocks`).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/tsqr_breakdown.py
"""

import argparse
import statistics
import time

import numpy as np

SHAPES = ((100_000, 51), (50_000, 100), (100_000, 200), (200_000, 20))


def _variants(A):
    from threadpoolctl import threadpool_limits

    import xpml.linalg as L

    rows = L._tsqr_rows(int(A.shape[1]), A.dtype.itemsize)

    def blocks_free():  # xpml's path with its one-thread limit lifted
        limit = L._single_threaded_blas
        L._single_threaded_blas = lambda xp: None
        try:
            return L._r_factor_numpy(A, xp=np)
        finally:
            L._single_threaded_blas = limit

    def blocks_threaded():
        parts = L.map_row_blocks(
            lambda a, b: np.linalg.qr(A[a:b], mode="r"), int(A.shape[0]), rows, xp=np
        )
        return np.linalg.qr(np.concatenate(parts), mode="r")

    def lapack_one():
        with threadpool_limits(1):
            return np.linalg.qr(A, mode="r")

    return {
        "lapack": lambda: np.linalg.qr(A, mode="r"),
        "lapack 1 thread": lapack_one,
        "blocks, 1 thread (xpml)": lambda: L._r_factor_numpy(A, xp=np),
        "blocks, default threads": blocks_free,
        "blocks on 2 threads": blocks_threaded,
    }


def _round_robin(fns, rounds):
    times = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: round(1e3 * statistics.median(v), 1) for k, v in times.items()}


def _linear_regression(rounds):
    from sklearn.linear_model import LinearRegression as SkLR

    from xpml.bench.linear import _data
    from xpml.linear_model import LinearRegression

    X, y, _ = _data(100_000)
    return _round_robin(
        {
            "xpml LinearRegression": lambda: LinearRegression().fit(X, y),
            "scikit-learn LinearRegression": lambda: SkLR().fit(X, y),
        },
        rounds,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    names = None
    for n, d in SHAPES:
        ms = _round_robin(_variants(rng.standard_normal((n, d))), args.rounds)
        if names is None:
            names = list(ms)
            print("| shape | " + " | ".join(names) + " |")
            print("|---|" + "---:|" * len(names))
        print(f"| {n} x {d} | " + " | ".join(f"{ms[k]}" for k in names) + " |")
    lr = _linear_regression(args.rounds)
    print()
    print(
        "LinearRegression fit, 100,000 x 50 (the bench's case): "
        + ", ".join(f"{k} {v} ms" for k, v in lr.items())
    )


if __name__ == "__main__":
    main()
