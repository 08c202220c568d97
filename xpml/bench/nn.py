"""Neural networks: Conv2D forward+backward against PyTorch autograd on the CPU, and
the digits CNN's training time against the same network in PyTorch.

The Conv2D case follows the issue: N=64 images of 28×28, 16 → 32 channels, a 3×3
kernel with padding 1, in float32 and float64. xpml computes in NHWC through its
window tensor; PyTorch runs ``torch.nn.functional.conv2d`` (NCHW, its native
layout) with autograd for ``dX``, ``dW`` and ``db``. Each case runs twice: with
both libraries' default thread counts, and with both limited to one thread
(NumPy's BLAS through threadpoolctl, ``torch.set_num_threads(1)``), which is the
steadier comparison on a shared machine. Both ways of computing ``dX``
(``input_grad="correlate"`` and ``"fold"``) are timed; the layer's default
(``"auto"``) takes "correlate" for this case on NumPy. The digits case trains the
demo network for 5 epochs against the same network, optimiser and batch size in
``torch.nn``. Inputs are made with NumPy and moved outside the timed region.
"""

from __future__ import annotations

import contextlib

import numpy as np

SUITE = "nn"
REQUIRES = ("torch",)  # the reference; the suite is skipped without it


@contextlib.contextmanager
def _threads(n):
    """Limit NumPy's BLAS and PyTorch to ``n`` threads (None: leave the defaults)."""
    import torch

    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(n)
    try:
        with limits:
            yield
    finally:
        torch.set_num_threads(old)


def _conv_case(bench, dtype, input_grad, threads):
    import torch

    from xpml._backend import to_numpy
    from xpml.nn import Conv2D

    N, H, W, ci, co = (64, 28, 28, 16, 32) if not bench.quick else (8, 28, 28, 16, 32)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, H, W, ci)).astype(dtype)
    dZ = rng.standard_normal((N, H, W, co)).astype(dtype)
    conv = Conv2D(co, 3, padding=1, input_grad=input_grad, random_state=0)
    Xb, dZb = bench.to_backend(X, dZ)
    conv.forward(Xb)  # build the parameters once

    def ours():
        conv.forward(Xb)
        return conv.backward(dZb)

    tdt = torch.float32 if dtype == np.float32 else torch.float64
    W_host = np.transpose(to_numpy(conv.params["W"]), (3, 2, 0, 1)).copy()
    Xt = torch.tensor(
        np.transpose(X, (0, 3, 1, 2)).copy(), dtype=tdt, requires_grad=True
    )
    Wt = torch.tensor(W_host, dtype=tdt, requires_grad=True)
    bt = torch.zeros(co, dtype=tdt, requires_grad=True)
    dZt = torch.tensor(np.transpose(dZ, (0, 3, 1, 2)).copy(), dtype=tdt)

    def ref():
        for a in (Xt, Wt, bt):
            a.grad = None
        torch.nn.functional.conv2d(Xt, Wt, bt, padding=1).backward(dZt)
        return Xt.grad

    name = np.dtype(dtype).name
    where = "default threads" if threads is None else f"{threads} thread"
    with _threads(threads):
        bench.compare(
            "nn",
            f"conv2d fwd+bwd {name} dX={input_grad} {where}",
            N,
            ours,
            ref,
            ref_name="torch.conv2d+autograd",
            params={
                "H": H,
                "W": W,
                "C_in": ci,
                "C_out": co,
                "k": 3,
                "padding": 1,
                "dtype": name,
                "input_grad": input_grad,
                "threads": threads,
            },
            note=f"3x3 {ci}->{co} pad 1, {H}x{W}",
        )


def _digits_case(bench):
    import torch
    from sklearn.datasets import load_digits

    from xpml.nn import Conv2D, Dense, Flatten, MaxPool2D, ReLU, Sequential

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).reshape(-1, 8, 8, 1)
    epochs = 1 if bench.quick else 5
    Xb, yb = bench.to_backend(X, y)

    def ours():
        net = Sequential(
            [Conv2D(16, 3, padding=1), ReLU(), MaxPool2D(2), Flatten(), Dense(10)],
            learning_rate=0.005,
            random_state=0,
        )
        return net.fit(Xb, yb, epochs=epochs, batch_size=32)

    Xt = torch.tensor(np.transpose(X, (0, 3, 1, 2)).copy())
    yt = torch.tensor(y)

    def ref():
        torch.manual_seed(0)
        nn = torch.nn
        net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(256, 10),
        ).double()
        opt = torch.optim.Adam(net.parameters(), lr=0.005)
        g = torch.Generator().manual_seed(0)
        for _ in range(epochs):
            order = torch.randperm(len(Xt), generator=g)
            for s in range(0, len(Xt), 32):
                idx = order[s : s + 32]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(Xt[idx]), yt[idx]).backward()
                opt.step()
        return net

    with _threads(1):
        bench.compare(
            "nn",
            f"digits CNN train {epochs} epochs float64 1 thread",
            len(X),
            ours,
            ref,
            ref_name="torch.nn (same net, Adam)",
            repeats=3,
            params={"epochs": epochs, "batch_size": 32, "threads": 1},
        )


def run(bench):
    threads = [1] if bench.quick else [None, 1]
    for t in threads:
        for dtype in (np.float32, np.float64):
            for input_grad in ("correlate", "fold"):
                _conv_case(bench, dtype, input_grad, t)
    _digits_case(bench)
