"""What a call of a few milliseconds spends at its first call (issue 16).

Three bench cases stay over 1.2x their warm median at their first call in
a fresh process: tree predict (20,000 x 20), SVC.decision_function at
n = 2,000 and Conv2D's forward and backward (64 images, float32, the
``fold`` input gradient, default threads: its worker thread is started at
the first call). Here each is timed in new interpreters (model and data loaded
from a pickle, not timed; before each, 1 GiB touched and freed as ``xpml
bench`` does) after one of these untimed steps, the variants taking turns:

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
the first call, the fourth, their ratio and the first call's page faults
(``--out FILE``: the same table, with the machine, written to a file).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/first_call_parts.py
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
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


def _tree_case():
    from sklearn.datasets import make_classification

    from xpml.tree import DecisionTreeClassifier

    X, y = make_classification(
        n_samples=40_000, n_features=20, n_informative=10, random_state=0
    )
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


CASES = {
    "tree predict 20k": _tree_case,
    "SVC.decision_function 2k": _svc_case,
    "Conv2D fold f32 64 images": _conv_case,
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
        f"`python bench/first_call_parts.py --repeats {args.repeats}`: medians over "
        f"{args.repeats} fresh processes per variant (see the script's docstring).",
        "",
        "| case | before the call | 1st (ms) | 4th (ms) | 1st / 4th | faults 1st |",
        "|---|---|---:|---:|---:|---:|",
    ]
    print("\n".join(lines[-2:]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in CASES.items():
            path = os.path.join(tmp, "case.pkl")
            with open(path, "wb") as fh:
                pickle.dump(make(), fh)
            runs = {v: [] for v in VARIANTS}
            for _ in range(args.repeats):
                for v in VARIANTS:
                    runs[v].append(_run(path, v))
            for v in VARIANTS:
                first = statistics.median(r[0][0] for r in runs[v])
                last = statistics.median(r[-1][0] for r in runs[v])
                faults = statistics.median(r[0][1] for r in runs[v])
                lines.append(
                    f"| {name} | {v} | {first:.2f} | {last:.2f} "
                    f"| {first / last:.2f} | {faults:.0f} |"
                )
                print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
