"""Trees: depth and pruning against overfitting, and forests vs bagging vs one tree (bias and variance)."""

from __future__ import annotations

import argparse
import os
import time

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


def depth_sweep(Xtr, ytr, Xv, yv, Xte, yte, depths):
    """Train / test error for each max_depth, and for the full tree before and
    after reduced-error pruning on the validation set."""
    from xpml.tree import DecisionTreeClassifier

    rows = []
    for depth in depths:
        t = DecisionTreeClassifier(max_depth=depth).fit(Xtr, ytr)
        rows.append((depth, 1 - t.score(Xtr, ytr), 1 - t.score(Xte, yte), t.n_leaves_))
    full = DecisionTreeClassifier().fit(Xtr, ytr)
    before = (1 - full.score(Xv, yv), 1 - full.score(Xte, yte), full.n_leaves_)
    full.prune(Xv, yv)
    after = (1 - full.score(Xv, yv), 1 - full.score(Xte, yte), full.n_leaves_)
    return rows, before, after


def bias_variance(models, n_train, resamples, Xte, clean_te, seed0=100):
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

    from xpml.ensemble import BaggingClassifier, RandomForestClassifier
    from xpml.tree import DecisionTreeClassifier

    t0 = time.perf_counter()
    Xtr, ytr, _ = make_data(args.n_train, 0)
    Xv, yv, _ = make_data(args.n_train // 2, 1)
    Xte, yte, clean_te = make_data(4000, 2)
    print(
        f"data: x1 < sin(2 x0) in 2-D plus 3 noise features, 15% flipped labels; "
        f"{len(Xtr)} train, {len(Xv)} validation, {len(Xte)} test points "
        f"(Bayes error 0.15)"
    )
    depths = list(range(1, 16))
    rows, before, after = depth_sweep(Xtr, ytr, Xv, yv, Xte, yte, depths)
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

    T = args.trees
    models = {
        "tree": lambda r: DecisionTreeClassifier(),
        f"bagging ({T})": lambda r: BaggingClassifier(n_estimators=T, random_state=r),
        f"forest ({T})": lambda r: RandomForestClassifier(
            T, max_features=2, random_state=r
        ),
    }
    bv = bias_variance(models, args.n_train, args.resamples, Xte, clean_te)
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
    print(f"({time.perf_counter() - t0:.1f} s)")

    from xpml.demos import out_dir, plt_or_none

    plt = plt_or_none()
    if plt is None:
        print("matplotlib is not installed: no figure (pip install 'xpml[plot]')")
        return 0
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.plot(depths, [r[1] for r in rows], marker="o", label="train error")
    a.plot(depths, [r[2] for r in rows], marker="o", label="test error")
    a.axhline(
        after[1], color="green", ls="--", label=f"full tree pruned ({after[2]} leaves)"
    )
    a.axhline(before[1], color="red", ls=":", label=f"full tree ({before[2]} leaves)")
    a.axhline(0.15, color="grey", lw=0.8, label="label noise")
    a.set_xlabel("max_depth")
    a.set_ylabel("0/1 error")
    a.set_title("depth and pruning")
    a.legend(fontsize=8)
    names = list(bv)
    x = np.arange(len(names))
    for i, key in enumerate(("error", "bias", "variance")):
        b.bar(x + (i - 1) * 0.27, [bv[nm][key] for nm in names], width=0.27, label=key)
    b.set_xticks(x, names)
    b.set_title(f"bias and variance over {args.resamples} training sets")
    b.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir(args.out), "trees.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"figure: {path}")
    return 0
