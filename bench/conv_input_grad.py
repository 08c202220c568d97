"""Conv2D's two ways of computing dX, timed against each other (the rule of
``input_grad="auto"``, :func:`xpml.nn.conv.choose_input_grad`).

For each shape (N, H, W, C_in -> C_out, stride; 3 x 3 kernel, padding 1) a
forward and backward of ``Conv2D(input_grad="correlate")`` and of
``input_grad="fold"`` are timed in turns (which goes first alternates), on
NumPy with default BLAS threads and with one, float32 and float64; then the
same on PyTorch's CPU (xpml's layer on torch tensors). Medians in ms, and
fold / correlate (above 1: "correlate" is faster), beside what "auto" takes.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/conv_input_grad.py
"""

import argparse
import statistics
import time

import numpy as np

SHAPES = [
    (64, 28, 28, 16, 32, 1),
    (64, 28, 28, 1, 16, 1),
    (32, 32, 32, 3, 16, 1),
    (64, 28, 28, 4, 16, 1),
    (64, 28, 28, 8, 16, 1),
    (64, 28, 28, 8, 32, 1),
    (64, 14, 14, 8, 64, 1),
    (32, 28, 28, 4, 64, 1),
    (64, 14, 14, 32, 64, 1),
    (64, 14, 14, 64, 64, 1),
    (64, 28, 28, 16, 8, 1),
    (16, 56, 56, 32, 32, 1),
    (64, 28, 28, 16, 32, 2),
]


def _pair(lib, shape, dtype, rng):
    """Forward+backward closures of the two methods on one batch."""
    from xpml.nn import Conv2D

    N, H, W, ci, co, s = shape
    X = rng.standard_normal((N, H, W, ci)).astype(dtype)
    if lib == "torch":
        import torch

        X = torch.from_numpy(X)
    calls = {}
    for method in ("correlate", "fold"):
        layer = Conv2D(co, 3, stride=s, padding=1, input_grad=method, random_state=0)
        Z = layer.forward(X)
        layer.params = {k: _like(v, X) for k, v in layer.params.items()}
        dZ = _like(rng.standard_normal(tuple(Z.shape)), X)
        calls[method] = lambda layer=layer, dZ=dZ: (
            layer.forward(X),
            layer.backward(dZ),
        )
    return calls, X


def _like(a, X):
    a = np.asarray(a, dtype=str(X.dtype).replace("torch.", ""))
    if type(X).__module__.startswith("torch"):
        import torch

        return torch.from_numpy(a)
    return a


def _time(calls, rounds):
    times = {k: [] for k in calls}
    for r in range(rounds):
        order = ("correlate", "fold") if r % 2 else ("fold", "correlate")
        for k in order:
            t0 = time.perf_counter()
            calls[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v[2:]) for k, v in times.items()}


def _rows(lib, threads, rounds):
    import array_api_compat
    from threadpoolctl import threadpool_limits

    from xpml.nn.conv import choose_input_grad

    rng = np.random.default_rng(0)
    with threadpool_limits(threads):
        if lib == "torch":
            import torch

            torch.set_num_threads(threads or torch.get_num_threads())
        for dtype in ("float32", "float64"):
            for shape in SHAPES:
                calls, X = _pair(lib, shape, dtype, rng)
                m = _time(calls, rounds)
                auto = choose_input_grad(
                    "auto",
                    array_api_compat.array_namespace(X),
                    (shape[5],) * 2,
                    shape[3],
                    shape[4],
                )
                where = "default" if threads is None else f"{threads} thread"
                yield (
                    f"| {lib} | {where} | {dtype} | {shape[:3]} | {shape[3]} -> "
                    f"{shape[4]} | {shape[5]} | {m['correlate']:.2f} | "
                    f"{m['fold']:.2f} | {m['fold'] / m['correlate']:.2f} | {auto} |"
                )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args()
    print(
        "| library | threads | dtype | N, H, W | C_in -> C_out | stride | "
        "correlate ms | fold ms | fold / correlate | auto |"
    )
    print("|---|---|---|---|---|---:|---:|---:|---:|---|")
    runs = [("numpy", None), ("numpy", 1)] + (
        [] if args.no_torch else [("torch", None)]
    )
    for lib, threads in runs:
        for row in _rows(lib, threads, args.rounds):
            print(row, flush=True)


if __name__ == "__main__":
    main()
