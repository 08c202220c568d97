"""A small CNN learns scikit-learn's 8x8 handwritten digits: the learning curve, epoch by epoch."""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

NAME = "cnn"


def build(seed=0):
    """The demo network: conv 3x3 (16) → ReLU → max-pool 2 → dense 10 (logits)."""
    from xpml.nn import Conv2D, Dense, Flatten, MaxPool2D, ReLU, Sequential

    return Sequential(
        [Conv2D(16, 3, padding=1), ReLU(), MaxPool2D(2), Flatten(), Dense(10)],
        learning_rate=0.005,
        random_state=seed,
    )


def _load_digits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).reshape(-1, 8, 8, 1)  # NHWC, grey levels in [0, 1]
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


def _show_training(net, data, args):
    import xpml

    Xtr, Xte, ytr, yte = data
    t0 = time.perf_counter()
    with xpml.backend(args.backend, device=args.device):
        net.fit(
            Xtr,
            ytr,
            epochs=args.epochs,
            batch_size=args.batch_size,
            validation_data=(Xte, yte),
        )
        final = net.evaluate(Xte, yte)
    seconds = time.perf_counter() - t0
    h = net.history
    print(f"{'epoch':>5} {'train loss':>11} {'test loss':>10} {'test acc':>9}")
    for e, (lo, vl, va) in enumerate(
        zip(h["loss"], h["val_loss"], h["val_accuracy"]), 1
    ):
        print(f"{e:>5} {lo:>11.4f} {vl:>10.4f} {va:>9.2%}")
    print(
        f"final test accuracy {final['accuracy']:.2%} after {args.epochs} epochs "
        f"({seconds:.1f} s on {args.backend or 'numpy'})"
    )
    return final


def _plot_curves(h, final, out):
    from xpml.demos import out_dir, plt_or_none

    plt = plt_or_none()
    if plt is None:
        print("matplotlib is not installed: no figure (pip install 'xpml[plot]')")
        return
    epochs = np.arange(1, len(h["loss"]) + 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(epochs, h["loss"], marker="o", label="training loss")
    ax1.plot(epochs, h["val_loss"], marker="s", label="test loss")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("cross-entropy")
    ax1.set_yscale("log")
    ax1.legend()
    ax2.plot(epochs, np.array(h["val_accuracy"]) * 100, marker="s", color="C2")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("test accuracy (%)")
    ax2.set_title(f"final {final['accuracy']:.2%}")
    fig.suptitle("CNN on the 8x8 digits (conv 3x3x16, max-pool, dense)")
    fig.tight_layout()
    path = os.path.join(out_dir(out), "cnn_learning_curve.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"figure saved to {path}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="xpml demo cnn", description=__doc__)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default=None, help="numpy (default), torch, cupy, ...")
    p.add_argument("--device", default=None)
    p.add_argument("--out", default=None, help="folder for the PNG")
    args = p.parse_args(argv)

    data = _load_digits()
    net = build(args.seed)
    print(
        f"digits: {len(data[0])} training and {len(data[1])} test images of 8x8; "
        f"network {[type(layer).__name__ for layer in net.layers]}"
    )
    final = _show_training(net, data, args)
    _plot_curves(net.history, final, args.out)
    return 0
