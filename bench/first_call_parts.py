"""What a call of a few milliseconds spends at its first call (issue 16).

Four bench cases stay over 1.2x their warm median at their first call in
a fresh process in most full runs: tree predict (20,000 x 20),
SVC.decision_function at n = 2,000, Conv2D's forward and backward (64
images, float32, the ``fold`` input gradient, default threads: its worker
thread is started at the first call) and the RBF Gram matrix at 2,000 x 20.
Three of them also come as a *plain NumPy* twin (session 25): the same
computation in a few lines of NumPy with no xpml code in it (no validation,
dispatch or heap preparation), checked against the xpml or scikit-learn
result when the case is built. The tree twin walks scikit-learn's tree of
the same data one level at a time over all rows; the SVC twin evaluates the
same support vectors in row blocks of one reused 2 MB buffer; the Gram twin
is one product of the RBF's augmented factors, clamped and exponentiated in
place. A twin's first call over its fourth (and the difference in ms) is
what this machine charges a fresh process for that work; xpml's excess over
the twin's is what xpml adds.

Each case is timed in new interpreters (model and data loaded from a pickle,
not timed; before each, 1 GiB touched and freed as ``xpml bench`` does)
after one of these untimed steps, the variants taking turns:

``nothing``
    as ``xpml bench`` times it;
``prepare_heap``
    :func:`xpml.utils.memory.prepare_heap` called first (what xpml's first
    public call does once per process);
``+ heap touched``
    and then 4 MB of the prepared heap written and freed (the pages a call's
    buffers will take are then faulted in already);
``+ one product``
    and then one BLAS product, 600 x d by d x 400 (about one block of
    SVC.decision_function's; OpenBLAS's own buffers mapped and touched; for
    the layer, its 64 images flattened, 64 x 12,544 by 12,544 x 64);
``5-row call``
    the same method on 5 rows of the input first (every line of the call's
    code run once, the process's one-time set-up done, little memory
    touched);
``20 ms pause``
    nothing but a 20 ms sleep (what ``xpml bench``'s spawned processes
    waited before their timed call until session 20);
``heap left alone``
    nothing, in a process with ``XPML_PREPARE_HEAP=0`` (the first call
    does not prepare the heap: what :func:`~xpml.utils.memory.prepare_heap`
    costs a call that has no large temporaries).

The timed call follows the step at once (until session 20 after a 0.1 s
sleep, which made every variant's first call slower); the product of ``+ one
product`` runs on one BLAS thread, so that no worker spins on after it.

It prints, per case and variant, the medians over ``--repeats`` processes of
the first call, the fourth, their ratio and difference and the first call's
page faults (``--out FILE``: the same table, with the machine, written to a
file). ``--case NAME`` and ``--variant NAME`` (each repeatable) choose a
subset; by default every case runs every variant.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/first_call_parts.py
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = (
    "nothing",
    "prepare_heap",
    "+ heap touched",
    "+ one product",
    "5-row call",
    "20 ms pause",
    "heap left alone",
)


def _tree_data():
    from sklearn.datasets import make_classification

    return make_classification(
        n_samples=40_000, n_features=20, n_informative=10, random_state=0
    )


def _tree_case():
    from xpml.tree import DecisionTreeClassifier

    X, y = _tree_data()
    tree = DecisionTreeClassifier().fit(X[:20_000], y[:20_000])
    return {"model": tree, "X": X[20_000:].copy(), "method": "predict", "blas": None}


def _svc_case():
    from sklearn.datasets import make_classification
    from sklearn.preprocessing import StandardScaler

    from xpml.svm import SVC

    X, y = make_classification(n_samples=2_000, n_features=20, random_state=0)
    X = StandardScaler().fit_transform(X)
    svc = SVC(gamma=0.05, C=1.0).fit(X, y)
    return {"model": svc, "X": X, "method": "decision_function", "blas": 1}


class _LayerStep:
    """A layer's forward and backward as one call on ``X`` (picklable); the
    output gradient's first ``len(X)`` images go back."""

    def __init__(self, layer, dZ):
        self.layer, self.dZ = layer, dZ

    def step(self, X):
        self.layer.forward(X)
        return self.layer.backward(self.dZ[: X.shape[0]])


def _conv_case():
    import numpy as np

    from xpml.nn import Conv2D

    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 28, 28, 16)).astype(np.float32)
    dZ = rng.standard_normal((64, 28, 28, 32)).astype(np.float32)
    conv = Conv2D(32, 3, padding=1, input_grad="fold", random_state=0)
    conv.forward(X)  # the parameters, as the bench builds them
    return {"model": _LayerStep(conv, dZ), "X": X, "method": "step", "blas": None}


class _Gram:
    """``xpml.kernels.gram(X, kernel="rbf", gamma=0.05)`` as a method (picklable;
    loading it imports xpml, as a script's imports would before the call)."""

    def __init__(self):
        from xpml.kernels import gram

        self.gram = gram

    def call(self, X):
        return self.gram(X, kernel="rbf", gamma=0.05)


def _gram_case():
    import numpy as np

    X = np.random.default_rng(0).standard_normal((2_000, 20))
    return {"model": _Gram(), "X": X, "method": "call", "blas": None}


# Plain NumPy twins: the same computation in a few lines of NumPy, with no
# validation, dispatch or heap preparation. Their first call over their fourth
# is what the machine charges a fresh process for that much work; xpml's
# excess over theirs (in ms) is what xpml adds.


class _PlainTree:
    """A fitted tree's arrays walked one level at a time over all rows (leaves
    point to themselves, so rows that reached one stay there)."""

    def __init__(self, sk_tree):
        import numpy as np

        t = sk_tree.tree_
        leaf = t.children_left < 0
        own = np.arange(t.node_count)
        self.left = np.where(leaf, own, t.children_left)
        self.right = np.where(leaf, own, t.children_right)
        self.feature = np.where(leaf, 0, t.feature)
        self.threshold = np.where(leaf, np.inf, t.threshold)
        self.label = sk_tree.classes_[np.argmax(t.value[:, 0, :], axis=1)]
        self.depth = int(t.max_depth)

    def predict(self, X):
        import numpy as np

        rows = np.arange(X.shape[0])
        node = np.zeros(X.shape[0], dtype=np.intp)
        for _ in range(self.depth):
            go_left = X[rows, self.feature[node]] <= self.threshold[node]
            node = np.where(go_left, self.left[node], self.right[node])
        return self.label[node]


def _plain_tree_case():
    from sklearn.tree import DecisionTreeClassifier

    X, y = _tree_data()
    sk = DecisionTreeClassifier(random_state=0).fit(X[:20_000], y[:20_000])
    plain, Xt = _PlainTree(sk), X[20_000:].copy()
    if not (plain.predict(Xt) == sk.predict(Xt)).all():
        raise AssertionError("the plain walk disagrees with scikit-learn's tree")
    return {"model": plain, "X": Xt, "method": "predict", "blas": None}


def _rbf_factors_np(X, Y, gamma):
    """RBF exponent factors, ``A @ B.T = -gamma * ||x - y||^2``."""
    import numpy as np

    sx, sy = (X * X).sum(axis=1)[:, None], (Y * Y).sum(axis=1)[:, None]
    A = np.concatenate([X, sx, np.ones_like(sx)], axis=1)
    B = np.concatenate([2 * gamma * Y, np.full_like(sy, -gamma), -gamma * sy], axis=1)
    return A, B


class _PlainRBFDecision:
    """``exp(min(0, A @ B.T)) @ w + b`` in row blocks of one reused 2 MB buffer."""

    def __init__(self, svc):
        import numpy as np

        self.SV = np.asarray(svc.support_vectors_)
        self.w = np.asarray(svc.dual_coef_)[0]
        self.b = float(np.asarray(svc.intercept_)[0])
        self.gamma = svc._gamma

    def decision_function(self, X):
        import numpy as np

        A, B = _rbf_factors_np(X, self.SV, self.gamma)
        rows = max(1, (2 << 20) // (8 * len(B)))
        buf = np.empty((min(rows, len(A)), len(B)))
        out = np.empty(len(A))
        for start in range(0, len(A), rows):
            stop = min(start + rows, len(A))
            E = np.matmul(A[start:stop], B.T, out=buf[: stop - start])
            np.exp(np.minimum(E, 0.0, out=E), out=E)
            np.matmul(E, self.w, out=out[start:stop])
        return out + self.b


def _plain_svc_case():
    import numpy as np

    case = _svc_case()
    plain = _PlainRBFDecision(case["model"])
    ref = np.asarray(case["model"].decision_function(case["X"]))
    if not np.allclose(plain.decision_function(case["X"]), ref):
        raise AssertionError("the plain decision function disagrees with SVC's")
    return {**case, "model": plain}


class _PlainGram:
    """The RBF Gram matrix as one product of the factors, clamped and
    exponentiated in place."""

    def call(self, X):
        import numpy as np

        A, B = _rbf_factors_np(X, X, 0.05)
        E = np.matmul(A, B.T)
        return np.exp(np.minimum(E, 0.0, out=E), out=E)


def _plain_gram_case():
    import numpy as np

    from xpml.kernels import gram

    case = _gram_case()
    if not np.allclose(_PlainGram().call(case["X"]), gram(case["X"], gamma=0.05)):
        raise AssertionError("the plain Gram matrix disagrees with xpml's")
    return {**case, "model": _PlainGram()}


CASES = {
    "tree predict 20k": _tree_case,
    "SVC.decision_function 2k": _svc_case,
    "Conv2D fold f32 64 images": _conv_case,
    "Gram 2k": _gram_case,
    "tree predict 20k, plain NumPy": _plain_tree_case,
    "SVC.decision_function 2k, plain NumPy": _plain_svc_case,
    "Gram 2k, plain NumPy": _plain_gram_case,
}


def _before(variant, case):
    """The untimed step ``variant`` in this fresh process."""
    import numpy as np

    from xpml.utils.memory import prepare_heap

    if variant == "5-row call":
        getattr(case["model"], case["method"])(case["X"][:5])
        return
    if variant in ("nothing", "heap left alone"):
        return
    if variant == "20 ms pause":
        time.sleep(0.02)
        return
    prepare_heap()
    if variant in ("+ heap touched", "+ one product"):
        block = np.ones(4 << 17)  # 4 MB, every page written, then freed
        del block
    if variant == "+ one product":
        from threadpoolctl import threadpool_limits

        X = np.reshape(case["X"], (case["X"].shape[0], -1))
        with threadpool_limits(1, user_api="blas"):  # no worker left spinning
            np.matmul(X[:600], X[:400].T)


def _child(path, variant):
    import contextlib

    with open(path, "rb") as fh:
        case = pickle.load(fh)
    limits = contextlib.nullcontext()
    if case["blas"] is not None:
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(case["blas"], user_api="blas")
    call = getattr(case["model"], case["method"])
    with limits:
        _before(variant, case)
        out = []
        for _ in range(4):
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            call(case["X"])
            took = time.perf_counter() - t0
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            out.append((1e3 * took, faults))
    print(json.dumps(out))


def _run(path, variant):
    from xpml.bench._cold import prefault

    prefault(1024)
    cmd = [sys.executable, __file__, "--child", path, variant]
    env = dict(os.environ)
    if variant == "heap left alone":
        env["XPML_PREPARE_HEAP"] = "0"
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", help="markdown file for the table")
    ap.add_argument(
        "--case", action="append", choices=list(CASES), help="only these (repeatable)"
    )
    ap.add_argument(
        "--variant", action="append", choices=VARIANTS, help="only these (repeatable)"
    )
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(*args.child)
        return
    from xpml.bench import machine_info

    machine = ", ".join(f"{k}={v}" for k, v in machine_info().items() if v)
    lines = [
        "# What a call of a few milliseconds spends at its first call",
        "",
        f"Machine: {machine}",
        "",
        f"`python bench/first_call_parts.py {shlex.join(argv or sys.argv[1:])}`: "
        f"medians over "
        f"{args.repeats} fresh processes per variant (see the script's docstring).",
        "",
        "| case | before the call | 1st (ms) | 4th (ms) | 1st / 4th | 1st - 4th (ms) "
        "| faults 1st |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines[-2:]), flush=True)
    variants = args.variant or VARIANTS
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.case or CASES:
            path = os.path.join(tmp, "case.pkl")
            with open(path, "wb") as fh:
                pickle.dump(CASES[name](), fh)
            runs = {v: [] for v in variants}
            for _ in range(args.repeats):
                for v in variants:
                    runs[v].append(_run(path, v))
            for v in variants:
                first = statistics.median(r[0][0] for r in runs[v])
                last = statistics.median(r[-1][0] for r in runs[v])
                faults = statistics.median(r[0][1] for r in runs[v])
                lines.append(
                    f"| {name} | {v} | {first:.2f} | {last:.2f} "
                    f"| {first / last:.2f} | {first - last:.2f} | {faults:.0f} |"
                )
                print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
