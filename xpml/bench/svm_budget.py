"""SVC under a kernel-cache budget at n = 50,000 (run only when named:
``xpml bench svm-budget``; about three minutes on 2 cores).

Fits ``SVC(rbf, gamma=0.05, C=1, cache_size=256)`` once and reports the kernel
row cache's peak against the budget, the process's peak resident memory and
the fit time. The n × n kernel matrix (20 GB in float64) never exists: rows
are computed in blocks through the Gram engine and evicted least recently
used. No reference is timed (LIBSVM needs well over ten minutes here).
"""

import resource

SUITE = "svm-budget"
DEFAULT = False  # long: only when asked for by name

BUDGET_MB = 256


def run(bench):
    from xpml.bench.svm import _blas_threads, _data
    from xpml.svm import SVC

    n = 5000 if bench.quick else 50000
    X, y = _data(n)
    Xb, yb = bench.to_backend(X, y)
    model = SVC(gamma=0.05, C=1.0, cache_size=BUDGET_MB)
    with _blas_threads():
        r = bench.compare(
            "svm-budget",
            f"SVC.fit rbf cache_size={BUDGET_MB}MB",
            n,
            lambda: model.fit(Xb, yb),
            None,
            ref_name="-",
            repeats=1,
            warmup=0,
            params={"cache_size_mb": BUDGET_MB, "gamma": 0.05, "C": 1.0},
        )
    peak = model.cache_peak_bytes_
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    r.note = (
        f"cache peak {peak / 2**20:.0f} MB <= budget {BUDGET_MB} MB: "
        f"{peak <= BUDGET_MB * 2**20}; process peak RSS {rss_mb:.0f} MB; "
        f"{int(model.support_.shape[0])} SVs, n_iter {model.n_iter_}"
    )
    bench.echo(f"{'':>10} {r.note}")
