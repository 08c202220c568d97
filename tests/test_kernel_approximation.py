"""Random Fourier features and Nyström: Gram convergence, scikit-learn parity with
the same landmarks, identical features across backends."""

import numpy as np
import pytest

from xpml.kernel_approximation import Nystroem, RandomFourierFeatures

sk_ka = pytest.importorskip("sklearn.kernel_approximation")
sk_pw = pytest.importorskip("sklearn.metrics.pairwise")


def _X(n=100, d=5, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d))


def _rbf(A, B, gamma):
    return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


def test_rff_gram_converges_like_one_over_sqrt_D():
    """‖ZZᵀ − K‖: mean error < 0.02 and max < 0.08 at D = 10,000, and the mean
    error shrinks by > 5x from D = 100 to D = 10,000 (theory: 10x)."""
    X = _X()
    K = _rbf(X, X, 0.2)
    errs = []
    for D in (100, 1000, 10000):
        Z = RandomFourierFeatures(
            gamma=0.2, n_components=D, random_state=0
        ).fit_transform(X)
        E = np.abs(Z @ Z.T - K)
        errs.append((E.mean(), E.max()))
    means = [e[0] for e in errs]
    assert means[0] > means[1] > means[2]
    assert means[0] / means[2] > 5.0
    assert means[2] < 0.02 and errs[2][1] < 0.08


def test_rff_formula_and_gamma_scale():
    X = _X(n=30)
    rff = RandomFourierFeatures(gamma="scale", n_components=50, random_state=3).fit(X)
    assert abs(rff.gamma_ - 1.0 / (X.shape[1] * X.var())) < 1e-12
    W, b = rff.random_weights_, rff.random_offset_
    assert W.shape == (5, 50) and b.shape == (50,)
    assert np.all((b >= 0) & (b < 2 * np.pi))
    np.testing.assert_allclose(
        rff.transform(X), np.sqrt(2 / 50) * np.cos(X @ W + b), atol=1e-14
    )
    # same seed, same features; a different seed, different features
    again = RandomFourierFeatures(gamma="scale", n_components=50, random_state=3).fit(X)
    np.testing.assert_array_equal(again.transform(X), rff.transform(X))
    other = RandomFourierFeatures(gamma="scale", n_components=50, random_state=4).fit(X)
    assert not np.allclose(other.transform(X), rff.transform(X))


def test_rff_same_features_on_every_backend(xp):
    X = _X(n=40)
    ref = RandomFourierFeatures(
        gamma=0.3, n_components=64, random_state=0
    ).fit_transform(X)
    got = RandomFourierFeatures(
        gamma=0.3, n_components=64, random_state=0
    ).fit_transform(xp.asarray(X))
    assert xp.is_native(got)
    np.testing.assert_allclose(xp.to_numpy(got), ref, rtol=0, atol=1e-12)


def test_nystroem_exact_with_all_points_and_converges():
    """All n rows as landmarks reproduce K (1e-10); with m landmarks ZZᵀ equals
    K_nm K_mm⁻¹ K_mn, and its error falls as m grows."""
    X = _X(n=120)
    K = _rbf(X, X, 0.1)
    Z = Nystroem(gamma=0.1, n_components=120, random_state=0).fit_transform(X)
    assert np.abs(Z @ Z.T - K).max() < 1e-10
    errs = []
    for m in (5, 20, 80):
        ny = Nystroem(gamma=0.1, n_components=m, random_state=0).fit(X)
        Z = ny.transform(X)
        idx = np.asarray(ny.component_indices_)
        Knm = K[:, idx]
        expect = Knm @ np.linalg.solve(K[np.ix_(idx, idx)], Knm.T)
        assert np.abs(Z @ Z.T - expect).max() < 1e-8
        np.testing.assert_array_equal(ny.components_, X[idx])
        errs.append(np.abs(Z @ Z.T - K).mean())
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 1e-2


@pytest.mark.parametrize(
    "kernel,params,m",
    [
        ("rbf", {"gamma": 0.2}, 30),
        ("laplacian", {"gamma": 0.1}, 30),
        ("poly", {"gamma": 0.5, "degree": 2, "coef0": 1.0}, 15),
    ],
)
def test_nystroem_equals_sklearn_with_the_same_landmarks(kernel, params, m):
    """scikit-learn fitted on our landmarks alone (so it uses exactly them, in its
    own order) gives the same features up to that column order, to 1e-8."""
    X = _X(n=80)
    ours = Nystroem(kernel=kernel, n_components=m, random_state=0, **params).fit(X)
    idx = np.asarray(ours.component_indices_)
    ref = sk_ka.Nystroem(kernel=kernel, n_components=m, random_state=0, **params).fit(
        X[idx]
    )
    Z, Zs = ours.transform(X), ref.transform(X)
    order = np.asarray(ref.component_indices_)  # sklearn's basis = X[idx][order]
    np.testing.assert_allclose(Z[:, order], Zs, atol=1e-8 * np.abs(Zs).max())
    np.testing.assert_allclose(
        np.asarray(ours.normalization_)[np.ix_(order, order)],
        ref.normalization_,
        atol=1e-8 * np.abs(ref.normalization_).max(),
    )


def test_nystroem_same_features_on_every_backend_and_callable_kernel(xp):
    X = _X(n=60)
    ref = Nystroem(gamma=0.3, n_components=25, random_state=1).fit_transform(X)
    got = Nystroem(gamma=0.3, n_components=25, random_state=1).fit_transform(
        xp.asarray(X)
    )
    assert xp.is_native(got)
    np.testing.assert_allclose(xp.to_numpy(got), ref, atol=1e-10)

    def my_rbf(A, B, *, xp, g):
        sq = (
            xp.sum(A * A, axis=1)[:, None]
            + xp.sum(B * B, axis=1)[None, :]
            - 2.0 * (A @ B.T)
        )
        return xp.exp(-g * sq)

    cal = Nystroem(
        kernel=my_rbf, kernel_params={"g": 0.3}, n_components=25, random_state=1
    )
    np.testing.assert_allclose(
        xp.to_numpy(cal.fit_transform(xp.asarray(X))), ref, atol=1e-8
    )


def test_nystroem_cuts_small_eigenvalues_and_warns_on_too_many_components():
    X = _X(n=30, d=2)
    # linear kernel: K_LL has rank 2, the rest of its spectrum is cut, not inverted
    ny = Nystroem(kernel="linear", n_components=10, random_state=0).fit(X)
    Z = ny.transform(X)
    np.testing.assert_allclose(Z @ Z.T, X @ X.T, atol=1e-10)
    with pytest.warns(UserWarning, match="n_components=50 > n_samples=30"):
        ny = Nystroem(n_components=50, random_state=0).fit(X)
    assert ny.components_.shape == (30, 2)


def test_nystroem_transform_in_row_blocks_under_a_small_memory_budget(monkeypatch):

    X = _X(n=50)
    ny = Nystroem(gamma=0.3, n_components=20, random_state=0).fit(X)
    whole = ny.transform(X)
    monkeypatch.setenv("XPML_MEMORY_BUDGET", str(8 * 20 * 3 * 6))  # 6 rows a block
    np.testing.assert_allclose(ny.transform(X), whole, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("kernel", ["chi2", "additive_chi2", "cosine"])
def test_nystroem_extra_kernels_equal_sklearn(xp, kernel):
    """All landmarks: Z Zᵀ is scikit-learn's kernel (chi2's gamma=None means 1)."""
    X = np.random.default_rng(0).uniform(size=(25, 4))
    Z = Nystroem(kernel=kernel, n_components=25, random_state=0).fit_transform(
        xp.asarray(X)
    )
    Z = xp.to_numpy(Z)
    K = sk_pw.pairwise_kernels(X, metric=kernel)
    if kernel == "additive_chi2":  # not PSD: only the PSD part is reproduced
        w, V = np.linalg.eigh(K)
        K = (V * np.maximum(w, 0)) @ V.T
    np.testing.assert_allclose(Z @ Z.T, K, atol=1e-8)


def test_nystroem_precomputed_and_feature_names():
    X = np.random.default_rng(1).uniform(size=(12, 3))
    K = sk_pw.polynomial_kernel(X, degree=2, coef0=0.1)
    ny = Nystroem(kernel="precomputed", n_components=12, random_state=0)
    Z = ny.fit_transform(K)
    np.testing.assert_allclose(Z @ Z.T, K, atol=1e-8)
    np.testing.assert_allclose(ny.transform(K[:4]), Z[:4], atol=1e-10)
    with pytest.raises(ValueError, match="Don't pass gamma"):
        Nystroem(kernel="precomputed", gamma=1.0, n_components=12).fit(K)
    names = ny.get_feature_names_out()
    assert names.tolist() == [f"nystroem{i}" for i in range(12)]
    rff = RandomFourierFeatures(n_components=3, random_state=0).fit(X)
    assert rff.get_feature_names_out().tolist() == [
        f"randomfourierfeatures{i}" for i in range(3)
    ]
