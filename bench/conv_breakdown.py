"""Conv2D float32 forward+backward against PyTorch outside the harness (issue 14).

Each side is timed in blocks of ``--block`` calls (the sides taking turns block
by block), so that the position of a call in its block shows what the other
library left running (PyTorch's OpenMP threads spin after its call). Then
xpml's parts on their own: the forward, the stride-1 backward, and the
pieces of work they are made of on NumPy at the block sizes the layer uses:
the kernel-row split's row-window copies and products (what this layer
runs since session 16; each product timed as a CBLAS call of its own, in
the layer's pieces of rows, where since session 21 the layer's backward
makes them in batches, one NumPy ``matmul`` per stack), and the window
matrix's copies and products. Same case as ``xpml bench nn``: 64 images of
28 x 28, 16 -> 32 channels, 3 x 3, padding 1.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/conv_breakdown.py
"""

import argparse
import statistics
import time

import numpy as np


def _median_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(1e3 * statistics.median(times), 2)


def _cases():
    import torch

    from xpml.nn import conv as C

    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 28, 28, 16)).astype(np.float32)
    W = rng.standard_normal((3, 3, 16, 32)).astype(np.float32)
    b = np.zeros(32, np.float32)
    dZ = rng.standard_normal((64, 28, 28, 32)).astype(np.float32)
    Xt = torch.tensor(np.transpose(X, (0, 3, 1, 2)).copy(), requires_grad=True)
    Wt = torch.tensor(np.transpose(W, (3, 2, 0, 1)).copy(), requires_grad=True)
    bt = torch.zeros(32, requires_grad=True)
    dZt = torch.tensor(np.transpose(dZ, (0, 3, 1, 2)).copy())

    def forward():
        return C.conv_forward(X, W, b, padding=(1, 1), xp=np)

    def backward():
        return C.conv_backward_s1(X, dZ, W, (1, 1), xp=np)

    def ours():
        forward()
        C.bias_grad(dZ, xp=np)
        return backward()

    def ref():
        for a in (Xt, Wt, bt):
            a.grad = None
        torch.nn.functional.conv2d(Xt, Wt, bt, padding=1).backward(dZt)

    return {"xpml": ours, "torch": ref}, {"forward": forward, "backward": backward}


def _parts(repeats):
    """xpml's NumPy work by kind, summed over the layer's blocks of images:
    the kernel-row split the layer takes here, and the window matrix it
    takes where the split does not apply."""
    out = _row_part("forward", 16, 32, repeats)
    out.update(_row_part("backward", 32, 16, repeats))
    out.update(_part("forward", 16, 32, repeats))
    out.update(_part("backward", 32, 16, repeats))
    return out


def _row_part(name, C_in, C_out, repeats):
    """The row-window copies and the k_h = 3 products per image of one pass
    of the kernel-row split (rows of ``3 * C_in`` values, ``C_out`` columns
    out; the backward's dW as ``B_iᵀ X``), as many blocks as the layer makes,
    each product in the pieces of rows the layer makes it in."""
    from xpml.linalg import numpy_gemm
    from xpml.nn import conv as C

    rng = np.random.default_rng(1)
    pad, gemm = ((1, 1), (1, 1)), numpy_gemm("f")
    step = max(1, C.BLOCK_BYTES // (30 * 28 * 3 * C_in * 4))
    data = rng.standard_normal((step, 28, 28, C_in)).astype(np.float32)
    win = C._RowWindows(step, data, (3, 3), pad)
    win.fill(0, step)
    K, rows, blocks = win.K, 28 * 28, range(-(-64 // step))  # copies: whole blocks
    Wm = rng.standard_normal((3, K, C_out)).astype(np.float32)
    out_ = np.empty((rows, C_out), dtype=np.float32)
    Xm = rng.standard_normal((rows, C_out)).astype(np.float32)
    G = np.zeros((3, K, C_out), dtype=np.float32)

    Bs = [[(a, K) for a in win.kernel_row_addresses(m)] for m in range(step)]
    Wi = [(Wm.ctypes.data + Wm[0].nbytes * i, C_out) for i in range(3)]
    Gi = [(G.ctypes.data + G[0].nbytes * i, C_out) for i in range(3)]
    Xa, Za = (Xm.ctypes.data, C_out), (out_.ctypes.data, C_out)

    pieces = gemm.row_pieces(rows, C_out, K)  # as the layer splits them

    def products(dW=False):
        for image in range(64):
            for r0, r in pieces:
                for i, (b, ld) in enumerate(Bs[image % step]):
                    B = (b + 4 * r0 * K, ld)
                    if dW:
                        X_r = (Xa[0] + 4 * r0 * C_out, C_out)
                        gemm((K, C_out, r), B, X_r, Gi[i], trans_a=True, beta=1.0)
                    else:
                        Z_r = (Za[0] + 4 * r0 * C_out, C_out)
                        gemm((r, C_out, K), B, Wi[i], Z_r, beta=float(i > 0))

    where = f"{name} (kernel-row split)"
    out = {
        f"{where}: row-window copies": _median_ms(
            lambda: [win.fill(0, step) for _ in blocks], repeats
        ),
        f"{where}: 3 products a image ({K}x{C_out}, {len(pieces)} pieces of rows)": (
            _median_ms(products, repeats)
        ),
    }
    if name == "backward":
        out[f"{where}: 3 products B_i^T X a image (dW)"] = _median_ms(
            lambda: products(dW=True), repeats
        )
    return out


def _part(name, C_in, C_out, repeats):
    """The window-matrix copies and products of one pass (windows of
    ``C_in`` channels, ``C_out`` columns out), as many blocks as the layer
    would make; at stride 1 the layer takes them only where the kernel-row
    split does not apply (thin or small layers, no OpenBLAS of NumPy's)."""
    from xpml.nn import conv as C

    rng = np.random.default_rng(1)
    step = max(1, C.BLOCK_BYTES // (28 * 28 * 9 * C_in * 4))
    data = rng.standard_normal((step, 28, 28, C_in)).astype(np.float32)
    win = C._BlockWindows(step, data, (3, 3), (1, 1), ((1, 1), (1, 1)))
    blocks = range(64 // step)
    A = win.fill(0, step)
    Wm = rng.standard_normal((A.shape[1], C_out)).astype(np.float32)
    out = {
        f"{name}: window copies": _median_ms(
            lambda: [win.fill(0, step) for _ in blocks], repeats
        ),
        f"{name}: product A W ({A.shape[1]}x{C_out})": _median_ms(
            lambda: [A @ Wm for _ in blocks], repeats
        ),
    }
    if name == "backward":
        Xm = rng.standard_normal((A.shape[0], 16)).astype(np.float32)
        out["backward: product X^T A (dW)"] = _median_ms(
            lambda: [Xm.T @ A for _ in blocks], repeats
        )
    return out


def main():
    import torch
    from threadpoolctl import threadpool_limits

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--block", type=int, default=6)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    sides, pieces = _cases()
    for threads in (None, 1):
        if threads:
            torch.set_num_threads(threads)
        with threadpool_limits(threads):
            times = {s: [[] for _ in range(args.block)] for s in sides}
            for _ in range(args.rounds):
                for side, fn in sides.items():
                    for j in range(args.block):
                        t0 = time.perf_counter()
                        fn()
                        times[side][j].append(time.perf_counter() - t0)
            where = "default threads" if threads is None else "1 thread"
            for side, cols in times.items():
                ms = [round(1e3 * statistics.median(c), 1) for c in cols]
                print(f"{where}: {side} ms by position in its block: {ms}")
            for name, fn in pieces.items():
                print(f"{where}: xpml {name} alone: {_median_ms(fn, 41)} ms")
            if threads == 1:  # the layer's own blocks, one thread each
                for name, ms in _parts(41).items():
                    print(f"{where}: xpml {name}: {ms} ms")


if __name__ == "__main__":
    main()
