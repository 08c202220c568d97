"""k-means initialisations compared, and dendrograms for four linkages."""

from __future__ import annotations

import argparse
import os

import numpy as np

NAME = "clustering"


def _blobs(n, k, d, seed, spread=1.0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(k, d))
    y = rng.integers(0, k, size=n)
    return centres[y] + spread * rng.standard_normal((n, d)), y


def compare_inits(X, k, seeds=20):
    """Inertia and iterations of single k-means runs from each initialisation."""
    from xpml.cluster import KMeans

    rows = {}
    for init in ("k-means++", "forgy", "random-partition"):
        runs = [
            KMeans(k, init=init, n_init=1, random_state=s).fit(X) for s in range(seeds)
        ]
        rows[init] = (
            np.array([r.inertia_ for r in runs]),
            np.array([r.n_iter_ for r in runs]),
        )
    return rows


def _show_inits(X, k, seeds):
    from xpml.cluster import KMeans

    print(
        f"k-means on {len(X)} points in 2-D drawn around {k} centres; "
        f"{seeds} single runs (n_init=1) per initialisation:"
    )
    rows = compare_inits(X, k, seeds)
    best = min(v[0].min() for v in rows.values())
    print(
        f"  {'init':<17} {'mean inertia':>13} {'worst':>10} {'within 1% of best':>18} "
        f"{'mean iters':>10} {'n_init=10':>10}"
    )
    for init, (inertia, iters) in rows.items():
        near = np.mean(inertia <= best * 1.01)
        multi = KMeans(k, init=init, n_init=10, random_state=0).fit(X)
        if init == "k-means++":
            restarts = multi
        print(
            f"  {init:<17} {inertia.mean():13.1f} {inertia.max():10.1f} {near:18.0%} "
            f"{iters.mean():10.1f} {multi.inertia_:10.1f}"
        )
    print(
        f"  (best single run: {best:.1f}; the last column keeps the best of 10 restarts)"
    )
    return {"X": X, "rows": rows, "restarts": restarts}


def _show_linkages(linkages):
    from xpml.cluster import AgglomerativeClustering

    pts, _ = _blobs(40, 4, 2, seed=7, spread=1.5)
    trees = {}
    print(
        "\nagglomerative clustering of 40 points, last three merge heights "
        "(a jump marks a natural cut):"
    )
    for linkage in linkages:
        est = AgglomerativeClustering(n_clusters=4, linkage=linkage).fit(pts)
        Z = np.asarray(est.linkage_matrix_)
        trees[linkage] = Z
        inversions = int(np.sum(np.diff(Z[:, 2]) < 0))
        note = f", {inversions} inversion(s)" if inversions else ""
        print(
            f"  {linkage:<9} {np.round(Z[-3:, 2], 2).tolist()}  cluster sizes "
            f"{np.bincount(np.asarray(est.labels_)).tolist()}{note}"
        )
    return trees


def _plot_inits(plt, found, seeds, folder):
    rows, restarts, X = found["rows"], found["restarts"], found["X"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    names = list(rows)
    axes[0].boxplot([rows[n][0] for n in names])
    axes[0].set_xticks(range(1, len(names) + 1), names)
    axes[0].set_ylabel("inertia (single run)")
    axes[0].set_title(f"k-means inits, {seeds} seeds each")
    labels = np.asarray(restarts.labels_)
    axes[1].scatter(X[:, 0], X[:, 1], c=labels, s=4, cmap="tab10")
    C = np.asarray(restarts.cluster_centers_)
    axes[1].scatter(C[:, 0], C[:, 1], c="k", marker="x", s=60)
    axes[1].set_title("k-means++, best of 10 restarts")
    fig.tight_layout()
    p1 = os.path.join(folder, "clustering-kmeans-inits.png")
    fig.savefig(p1, dpi=100)
    plt.close(fig)
    print(f"\nsaved {p1}")


def _plot_dendrograms(plt, trees, folder):
    try:
        from scipy.cluster.hierarchy import dendrogram
    except ImportError:
        print("scipy is not installed: no dendrograms (pip install scipy)")
        return
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, linkage in zip(axes.ravel(), trees):
        dendrogram(trees[linkage], ax=ax, no_labels=True, color_threshold=None)
        ax.set_title(f"{linkage} linkage")
        ax.set_ylabel("merge height")
    fig.tight_layout()
    p2 = os.path.join(folder, "clustering-dendrograms.png")
    fig.savefig(p2, dpi=100)
    plt.close(fig)
    print(f"saved {p2}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="xpml demo clustering", description=__doc__)
    parser.add_argument("--out", default=None, help="folder for the PNGs")
    parser.add_argument("--seeds", type=int, default=20, help="k-means runs per init")
    args = parser.parse_args(argv)

    k = 8
    X, _ = _blobs(2000, k, 2, seed=3)
    found = _show_inits(X, k, args.seeds)
    trees = _show_linkages(("single", "complete", "average", "centroid"))

    from xpml.demos import out_dir, plt_or_none

    plt = plt_or_none()
    if plt is None:
        print("\nmatplotlib is not installed: no figures (pip install 'xpml[plot]')")
        return 0
    folder = out_dir(args.out)
    _plot_inits(plt, found, args.seeds, folder)
    _plot_dendrograms(plt, trees, folder)
    return 0
