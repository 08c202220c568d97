"""SVMs on concentric circles: kernels, the RBF width, C, support vectors, primal = dual."""

from __future__ import annotations

import argparse
import os

import numpy as np

NAME = "svm"


def circles(n=400, noise=0.1, factor=0.5, seed=0):
    """Two noisy concentric circles (radius 1 and ``factor``), labels 0 (outer)
    and 1 (inner), centred slightly off the origin so no kernel gets symmetry
    for free."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    angle = rng.uniform(0, 2 * np.pi, n)
    radius = np.where(y == 0, 1.0, factor)
    X = np.c_[radius * np.cos(angle), radius * np.sin(angle)] + noise * rng.normal(
        size=(n, 2)
    )
    return X + np.array([0.3, -0.2]), y


def margin_width(est):
    """Geometric margin ``1/‖w‖``, with ``‖w‖² = αᵀQα = 2(Σα − D(α))`` read off
    the dual (no explicit feature map needed)."""
    w2 = 2.0 * (np.abs(est.dual_coef_).sum() - est.dual_objective_[0])
    return 1.0 / np.sqrt(w2)


def kernel_table(Xtr, ytr, Xte, yte):
    from xpml.svm import SVC

    models = {
        "linear": SVC(kernel="linear"),
        "poly degree 2": SVC(kernel="poly", degree=2, gamma=1.0, coef0=1.0),
    }
    for sigma in (0.01, 0.1, 0.5, 2.0, 100.0):
        models[f"rbf sigma={sigma:g}"] = SVC(kernel="rbf", gamma=1.0 / (2 * sigma**2))
    rows = []
    for name, est in models.items():
        est.fit(Xtr, ytr)
        rows.append(
            (
                name,
                est.score(Xtr, ytr),
                est.score(Xte, yte),
                int(est.n_support_.sum()),
                est,
            )
        )
    return rows


def c_sweep(Xtr, ytr, Cs=(0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)):
    from xpml.svm import SVC

    rows = []
    for C in Cs:
        est = SVC(kernel="poly", degree=2, gamma=1.0, coef0=1.0, C=C, tol=1e-4).fit(
            Xtr, ytr
        )
        rows.append(
            (
                C,
                margin_width(est),
                int(est.n_support_.sum()),
                int(est.n_iter_[0]),
                est.score(Xtr, ytr),
            )
        )
    return rows


def _plot(plt, rows, X, y, path):
    fig, axes = plt.subplots(2, 4, figsize=(16, 8))
    g = np.linspace(X.min() - 0.3, X.max() + 0.3, 200)
    xx, yy = np.meshgrid(g, g)
    grid = np.c_[xx.ravel(), yy.ravel()]
    for ax, (name, _, te, nsv, est) in zip(axes.ravel(), rows):
        f = est.decision_function(grid).reshape(xx.shape)
        ax.contourf(
            xx, yy, f, levels=[-1e9, 0, 1e9], colors=["#c6d4f4", "#f4c6c6"], alpha=0.6
        )
        ax.contour(
            xx,
            yy,
            f,
            levels=[-1, 0, 1],
            colors="k",
            linestyles=["--", "-", "--"],
            linewidths=[0.7, 1.2, 0.7],
        )
        ax.scatter(X[:, 0], X[:, 1], c=y, cmap="coolwarm", s=6)
        sv = est.support_vectors_
        ax.scatter(
            sv[:, 0], sv[:, 1], s=22, facecolors="none", edgecolors="k", linewidths=0.5
        )
        ax.set_title(f"{name}\ntest acc {te:.2f}, {nsv} SVs", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes.ravel()[len(rows) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _show_kernels(Xtr, ytr, Xte, yte):
    print("Concentric circles: kernels and the RBF width sigma (gamma = 1/(2 sigma^2))")
    print(f"{'model':<20} {'train acc':>9} {'test acc':>9} {'SVs':>6}")
    rows = kernel_table(Xtr, ytr, Xte, yte)
    for name, tr, te, nsv, _ in rows:
        print(f"{name:<20} {tr:9.3f} {te:9.3f} {nsv:6d}")
    acc = {name: te for name, _, te, _, _ in rows}
    nsv = {name: k for name, _, _, k, _ in rows}
    print(
        f"-> a line cannot separate circles (test acc {acc['linear']:.2f}); the degree-2 "
        f"polynomial kernel does with {nsv['poly degree 2']} of {len(Xtr)} points as SVs; "
        f"tiny sigma memorises ({nsv['rbf sigma=0.01']} SVs, test acc "
        f"{acc['rbf sigma=0.01']:.2f}); huge sigma underfits (test acc "
        f"{acc['rbf sigma=100']:.2f})."
    )
    return rows


def _show_c_sweep(n):
    for noise, what in ((0.1, "overlapping"), (0.05, "separable")):
        Xc, yc = circles(n, noise=noise, seed=0)
        print(
            f"\nC sweep, degree-2 polynomial kernel, {what} circles (noise {noise}): "
            f"margin 1/||w||, SVs, SMO steps"
        )
        print(f"{'C':>8} {'margin':>9} {'SVs':>6} {'steps':>7} {'train acc':>9}")
        for C, m, k, it, tr in c_sweep(Xc, yc):
            print(f"{C:8g} {m:9.4f} {k:6d} {it:7d} {tr:9.3f}")
    print(
        "-> larger C narrows the margin and leaves fewer SVs; on overlapping data the "
        "solver needs many more steps at large C; on separable data the margin stops "
        "changing once C exceeds the largest alpha of the hard-margin solution."
    )


def _show_support_vectors(Xtr, ytr, Xte):
    from xpml.svm import SVC

    est = SVC(kernel="poly", degree=2, gamma=1.0, coef0=1.0, tol=1e-8).fit(Xtr, ytr)
    sv = SVC(kernel="poly", degree=2, gamma=1.0, coef0=1.0, tol=1e-8).fit(
        Xtr[est.support_], ytr[est.support_]
    )
    diff = np.max(np.abs(est.decision_function(Xte) - sv.decision_function(Xte)))
    print(
        f"\nRetraining on the {len(est.support_)} support vectors alone: max |f_all - f_SV| "
        f"on test points = {diff:.2e}"
    )
    p, d = est.primal_objective_[0], est.dual_objective_[0]
    print(
        f"Primal = dual at the optimum: P = {p:.8f}, D = {d:.8f}, gap = {p - d:.2e}; "
        f"sum alpha_i y_i = {est.dual_coef_.sum():.1e}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="xpml demo svm", description=__doc__)
    parser.add_argument("--out", default=None, help="folder for the PNG")
    parser.add_argument("--n", type=int, default=400, help="training points")
    args = parser.parse_args(argv)

    from xpml.demos import out_dir, plt_or_none

    Xtr, ytr = circles(args.n, seed=0)
    Xte, yte = circles(1000, seed=1)
    rows = _show_kernels(Xtr, ytr, Xte, yte)
    _show_c_sweep(args.n)
    _show_support_vectors(Xtr, ytr, Xte)

    plt = plt_or_none()
    if plt is not None:
        path = os.path.join(out_dir(args.out), "svm_circles.png")
        _plot(plt, rows, Xtr, ytr, path)
        print(
            f"\nDecision boundaries (solid) and margins (dashed), SVs circled: {path}"
        )
    else:
        print("\n(matplotlib is not installed: no PNG)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
