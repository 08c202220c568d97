"""Trees: depth and pruning against overfitting, and forests vs bagging vs one tree (bias and variance)."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import numpy as np

NAME = "trees"


def make_data(n, seed, noise=0.15, d_noise=3):
    """A curved boundary ``x₁ < sin(2 x₀)`` in [−2, 2]², ``d_noise`` useless
    features, and a fraction ``noise`` of flipped labels. Returns X, y and the
    noise-free labels."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2 + d_noise))
    clean = (X[:, 1] < np.sin(2 * X[:, 0])).astype(int)
    flip = rng.random(n) < noise
    return X, np.where(flip, 1 - clean, clean), clean


@dataclass(frozen=True)
class Split:
    """Training, validation and test sets of :func:`make_data`, with the test
    set's noise-free labels."""

    Xtr: np.ndarray
    ytr: np.ndarray
    Xv: np.ndarray
    yv: np.ndarray
    Xte: np.ndarray
    yte: np.ndarray
    clean_te: np.ndarray


def make_split(n_train):
    Xtr, ytr, _ = make_data(n_train, 0)
    Xv, yv, _ = make_data(n_train // 2, 1)
    Xte, yte, clean_te = make_data(4000, 2)
    return Split(Xtr, ytr, Xv, yv, Xte, yte, clean_te)


def depth_sweep(data, depths):
    """Train / test error for each max_depth, and for the full tree before and
    after reduced-error pruning on the validation set (``data`` a :class:`Split`)."""
    from xpml.tree import DecisionTreeClassifier

    rows = []
    for depth in depths:
        t = DecisionTreeClassifier(max_depth=depth).fit(data.Xtr, data.ytr)
        rows.append(
            (
                depth,
                1 - t.score(data.Xtr, data.ytr),
                1 - t.score(data.Xte, data.yte),
                t.n_leaves_,
            )
        )
    full = DecisionTreeClassifier().fit(data.Xtr, data.ytr)
    before = (
        1 - full.score(data.Xv, data.yv),
        1 - full.score(data.Xte, data.yte),
        full.n_leaves_,
    )
    full.prune(data.Xv, data.yv)
    after = (
        1 - full.score(data.Xv, data.yv),
        1 - full.score(data.Xte, data.yte),
        full.n_leaves_,
    )
    return rows, before, after


def bias_variance(models, Xte, clean_te, *, n_train, resamples, seed0=100):
    """Fit every model on ``resamples`` fresh training sets; for 0/1 loss on the
    test points report the mean error against the noise-free labels, the bias
    (error of the majority prediction across resamples) and the variance (how
    often a prediction disagrees with that majority)."""
    out = {}
    for name, make in models.items():
        preds = []
        for r in range(resamples):
            X, y, _ = make_data(n_train, seed0 + r)
            preds.append(make(r).fit(X, y).predict(Xte))
        P = np.stack(preds)
        majority = (P.mean(axis=0) > 0.5).astype(int)
        out[name] = {
            "error": float(np.mean(P != clean_te[None, :])),
            "bias": float(np.mean(majority != clean_te)),
            "variance": float(np.mean(P != majority[None, :])),
        }
    return out


def _show_data(data):
    print(
        f"data: x1 < sin(2 x0) in 2-D plus 3 noise features, 15% flipped labels; "
        f"{len(data.Xtr)} train, {len(data.Xv)} validation, {len(data.Xte)} test points "
        f"(Bayes error 0.15)"
    )


def _show_depths(data, depths):
    rows, before, after = depth_sweep(data, depths)
    print(f"\n{'depth':>5} {'train err':>9} {'test err':>8} {'leaves':>6}")
    for depth, tr, te, leaves in rows:
        print(f"{depth:>5} {tr:>9.3f} {te:>8.3f} {leaves:>6}")
    best = min(rows, key=lambda r: r[2])
    print(
        f"\nbest depth {best[0]}: test error {best[2]:.3f}; the full tree overfits: "
        f"test error {before[1]:.3f} with {before[2]} leaves"
    )
    print(
        f"reduced-error pruning on the validation set: validation error {before[0]:.3f} -> "
        f"{after[0]:.3f}, test error {before[1]:.3f} -> {after[1]:.3f}, leaves {before[2]} -> "
        f"{after[2]}"
    )
    return {"depths": depths, "rows": rows, "before": before, "after": after}


def _show_ensembles(data, args):
    from xpml.ensemble import BaggingClassifier, RandomForestClassifier
    from xpml.tree import DecisionTreeClassifier

    T = args.trees
    models = {
        "tree": lambda r: DecisionTreeClassifier(),
        f"bagging ({T})": lambda r: BaggingClassifier(n_estimators=T, random_state=r),
        f"forest ({T})": lambda r: RandomForestClassifier(
            T, max_features=2, random_state=r
        ),
    }
    bv = bias_variance(
        models,
        data.Xte,
        data.clean_te,
        n_train=args.n_train,
        resamples=args.resamples,
    )
    print(
        f"\nover {args.resamples} fresh training sets of {args.n_train} points "
        f"(0/1 loss against the noise-free labels):"
    )
    print(f"{'model':>14} {'error':>7} {'bias':>7} {'variance':>9}")
    for name, v in bv.items():
        print(f"{name:>14} {v['error']:>7.3f} {v['bias']:>7.3f} {v['variance']:>9.3f}")
    v = [bv[nm]["variance"] for nm in bv]
    e = [bv[nm]["error"] for nm in bv]
    print(
        f"variance: one tree {v[0]:.3f}, bagging {v[1]:.3f}, forest {v[2]:.3f}; error "
        f"{e[0]:.3f} -> {e[1]:.3f} -> {e[2]:.3f}. Averaging bootstrap trees removes variance "
        f"(a full tree's bias is already low); random feature subsets decorrelate the trees, "
        f"which helps most when many features are informative."
    )
    return bv


def _plot_depths(ax, sweep):
    rows, before, after = sweep["rows"], sweep["before"], sweep["after"]
    depths = sweep["depths"]
    ax.plot(depths, [r[1] for r in rows], marker="o", label="train error")
    ax.plot(depths, [r[2] for r in rows], marker="o", label="test error")
    ax.axhline(
        after[1], color="green", ls="--", label=f"full tree pruned ({after[2]} leaves)"
    )
    ax.axhline(before[1], color="red", ls=":", label=f"full tree ({before[2]} leaves)")
    ax.axhline(0.15, color="grey", lw=0.8, label="label noise")
    ax.set_xlabel("max_depth")
    ax.set_ylabel("0/1 error")
    ax.set_title("depth and pruning")
    ax.legend(fontsize=8)


def _plot_bias_variance(ax, bv, resamples):
    names = list(bv)
    x = np.arange(len(names))
    for i, key in enumerate(("error", "bias", "variance")):
        ax.bar(x + (i - 1) * 0.27, [bv[nm][key] for nm in names], width=0.27, label=key)
    ax.set_xticks(x, names)
    ax.set_title(f"bias and variance over {resamples} training sets")
    ax.legend(fontsize=8)


def _plot(found, args):
    from xpml.demos import out_dir, plt_or_none

    plt = plt_or_none()
    if plt is None:
        print("matplotlib is not installed: no figure (pip install 'xpml[plot]')")
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    _plot_depths(a, found["sweep"])
    _plot_bias_variance(b, found["bv"], args.resamples)
    fig.tight_layout()
    path = os.path.join(out_dir(args.out), "trees.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"figure: {path}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="xpml demo trees", description=__doc__)
    p.add_argument("--n-train", type=int, default=400)
    p.add_argument("--resamples", type=int, default=12)
    p.add_argument("--trees", type=int, default=50)
    p.add_argument("--quick", action="store_true", help="fewer resamples and trees")
    p.add_argument("--out", default=None, help="folder for the PNG")
    args = p.parse_args(argv)
    if args.quick:
        args.resamples, args.trees = 4, 15

    t0 = time.perf_counter()
    data = make_split(args.n_train)
    _show_data(data)
    found = {"sweep": _show_depths(data, list(range(1, 16)))}
    found["bv"] = _show_ensembles(data, args)
    print(f"({time.perf_counter() - t0:.1f} s)")
    _plot(found, args)
    return 0
