"""PCA and TruncatedSVD against scikit-learn on digits, and across array libraries."""

import numpy as np
import pytest

from xpml.decomposition import PCA, TruncatedSVD


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    return load_digits().data


def _match_up_to_sign(A, B, atol):
    signs = np.sign(np.sum(A * B, axis=1))
    np.testing.assert_allclose(A * signs[:, None], B, rtol=0, atol=atol)


@pytest.mark.parametrize("solver", ["full", "covariance_eigh"])
def test_pca_equals_sklearn_on_digits(digits, solver):
    from sklearn.decomposition import PCA as SK

    ours = PCA(svd_solver=solver).fit(digits)
    ref = SK(svd_solver=solver).fit(digits)
    # the covariance route knows variances only to about eps * the largest
    floor = 1e-10 * ref.explained_variance_[0] if solver != "full" else 0
    np.testing.assert_allclose(
        ours.explained_variance_ratio_,
        ref.explained_variance_ratio_,
        rtol=0,
        atol=1e-10,
    )
    np.testing.assert_allclose(
        ours.explained_variance_, ref.explained_variance_, rtol=1e-10, atol=floor
    )
    s_floor = np.sqrt(floor * (len(digits) - 1))
    np.testing.assert_allclose(
        ours.singular_values_, ref.singular_values_, rtol=1e-10, atol=s_floor
    )
    # components with distinct, non-zero variances are defined up to sign
    ev = ours.explained_variance_
    distinct = ev > 1e-8 * ev[0]
    _match_up_to_sign(ours.components_[distinct], ref.components_[distinct], 1e-8)
    # the sign convention is scikit-learn's: largest-magnitude entry positive
    C = ours.components_[distinct]
    assert np.all(C[np.arange(len(C)), np.argmax(np.abs(C), axis=1)] > 0)
    np.testing.assert_allclose(ours.mean_, ref.mean_, rtol=1e-12)


def _tall(rng, n=3000, d=40, shift=0.0):
    X = rng.standard_normal((n, d)) @ rng.standard_normal((d, d))
    return X * np.logspace(0, -1, d) + shift


@pytest.mark.parametrize(
    "solver,k", [("full", 10), ("covariance_eigh", 10), ("arpack", 10), ("full", 0.9)]
)
def test_each_solver_equals_sklearns(rng, solver, k):
    from sklearn.decomposition import PCA as SK

    X = _tall(rng)
    ours = PCA(k, svd_solver=solver).fit(X)
    ref = SK(k, svd_solver=solver, random_state=0).fit(X)
    assert ours.n_components_ == ref.n_components_
    # components equal scikit-learn's, signs included (its svd_flip convention)
    np.testing.assert_allclose(ours.components_, ref.components_, atol=1e-10)
    for name in ("explained_variance_", "explained_variance_ratio_", "noise_variance_"):
        np.testing.assert_allclose(
            getattr(ours, name), getattr(ref, name), rtol=1e-10, err_msg=name
        )
    np.testing.assert_allclose(ours.singular_values_, ref.singular_values_, rtol=1e-10)


@pytest.mark.parametrize("normalizer", ["auto", "QR", "LU", "none"])
def test_randomized_converges_to_the_exact_answer(rng, normalizer):
    from sklearn.decomposition import PCA as SK

    # a decaying spectrum: the randomized range finder is then accurate
    X = rng.standard_normal((2000, 60)) * np.logspace(0, -3, 60)
    exact = SK(8, svd_solver="full").fit(X)
    params = {"svd_solver": "randomized", "power_iteration_normalizer": normalizer}
    ours = PCA(8, random_state=0, **params).fit(X)
    ref = SK(8, random_state=0, **params).fit(X)
    err = np.max(np.abs(ours.explained_variance_ / exact.explained_variance_ - 1))
    ref_err = np.max(np.abs(ref.explained_variance_ / exact.explained_variance_ - 1))
    assert err <= max(10 * ref_err, 1e-10), (err, ref_err)
    np.testing.assert_allclose(ours.components_, exact.components_, atol=1e-4)
    np.testing.assert_allclose(ours.noise_variance_, ref.noise_variance_, rtol=1e-4)


@pytest.mark.parametrize(
    "shape,k",
    [
        ((3000, 40), 10),
        ((400, 300), 5),
        ((800, 700), 10),
        ((800, 700), 600),
        ((800, 700), 0.5),
        ((800, 700), None),
        ((100, 2000), 3),
    ],
)
def test_auto_solver_is_sklearns_choice(shape, k):
    from sklearn.decomposition import PCA as SK

    X = np.random.default_rng(0).standard_normal(shape)
    ours = PCA(k, random_state=0).fit(X)
    ref = SK(k, random_state=0).fit(X)
    assert ours._fit_svd_solver == ref._fit_svd_solver


def test_covariance_route_keeps_accuracy_with_a_large_mean(xp, rng):
    X = _tall(rng, shift=1e6)  # X'X - n m m' would lose every digit
    ours = PCA(5, svd_solver="covariance_eigh").fit(xp.asarray(X))
    exact = PCA(5, svd_solver="full").fit(X)
    np.testing.assert_allclose(
        xp.to_numpy(ours.explained_variance_), exact.explained_variance_, rtol=1e-8
    )


def test_truncated_solver_errors(digits):
    with pytest.raises(ValueError, match="strictly less than.*'arpack'"):
        PCA(64, svd_solver="arpack").fit(digits)
    with pytest.raises(
        ValueError, match=r"n_components=0.5 must be between 1 and min.*'randomized'"
    ):
        PCA(0.5, svd_solver="randomized").fit(digits)
    assert PCA(svd_solver="arpack").fit(digits[:, :10]).n_components_ == 9


@pytest.mark.parametrize("n_components", [0.5, 0.9, 0.95, 0.999, 10])
def test_variance_fraction_chooses_k_like_sklearn(digits, n_components):
    from sklearn.decomposition import PCA as SK

    ours = PCA(n_components).fit(digits)
    ref = SK(n_components, svd_solver="full").fit(digits)
    assert ours.n_components_ == ref.n_components_
    if isinstance(n_components, float):
        assert ours.explained_variance_ratio_.sum() >= n_components
        assert ours.explained_variance_ratio_[:-1].sum() < n_components
    np.testing.assert_allclose(ours.noise_variance_, ref.noise_variance_, rtol=1e-10)


@pytest.mark.parametrize("whiten", [False, True])
def test_transform_inverse_transform(digits, whiten):
    from sklearn.decomposition import PCA as SK

    ours = PCA(20, whiten=whiten).fit(digits)
    ref = SK(20, whiten=whiten, svd_solver="full").fit(digits)
    Z, R = ours.transform(digits), ref.transform(digits)
    signs = np.sign(np.sum(Z * R, axis=0))
    np.testing.assert_allclose(Z * signs, R, atol=1e-9)
    np.testing.assert_allclose(ours.fit_transform(digits) * signs, R, atol=1e-9)
    np.testing.assert_allclose(
        ours.inverse_transform(Z), ref.inverse_transform(R), atol=1e-9
    )
    if whiten:
        np.testing.assert_allclose(np.var(Z, axis=0, ddof=1), 1.0, rtol=1e-10)
    # all components: the round trip is exact
    full = PCA(whiten=whiten, svd_solver="full").fit(digits)
    np.testing.assert_allclose(
        full.inverse_transform(full.transform(digits)), digits, atol=1e-9
    )


def test_pca_errors(digits):
    with pytest.raises(
        ValueError, match=r"n_components=100 must be between 0 and min\(n_samples"
    ):
        PCA(100).fit(digits[:50, :10])
    with pytest.raises(ValueError, match="1 sample"):
        PCA().fit(digits[:1])
    with pytest.raises(ValueError, match="expecting 3 features"):
        PCA(3).fit(digits).inverse_transform(np.zeros((2, 4)))


@pytest.mark.parametrize("solver", ["full", "covariance_eigh", "randomized", "arpack"])
@pytest.mark.parametrize(
    "bad,message",
    [
        ([np.nan], "contains NaN"),
        ([np.inf], "contains infinity"),
        ([-np.inf], "contains infinity"),
        ([np.inf, -np.inf], "contains NaN|contains infinity"),  # the mean: NaN
        ([np.nan, np.inf], "contains NaN"),
    ],
)
def test_pca_refuses_what_validation_refuses(xp, digits, solver, bad, message):
    # the finiteness check is read off the column means: every kind of
    # non-finite entry must still be refused, with validation's message, by
    # every solver and in every array library; finite data whose column sums
    # overflow passes the check as validation's (what the solver then makes of
    # it is another matter)
    X = digits[:200].copy()
    for i, v in enumerate(bad):
        X[3 + 5 * i, 7] = v
    with pytest.raises(ValueError, match=f"Input X (?:{message})"):
        PCA(5, svd_solver=solver).fit(xp.asarray(X))
    big = digits[:200, :8].copy()
    big[:, 2] = np.finfo(np.float64).max / 4  # finite; its column sum overflows
    with np.errstate(all="ignore"):
        try:
            PCA(2, svd_solver=solver).fit(xp.asarray(big))
        except Exception as e:  # noqa: BLE001 - only the finiteness message is wrong
            assert "Input X contains" not in str(e)


def test_truncated_svd_equals_sklearn(digits):
    from sklearn.decomposition import TruncatedSVD as SK

    ours = TruncatedSVD(10, algorithm="full").fit(digits)
    ref = SK(10, algorithm="arpack").fit(digits)
    _match_up_to_sign(ours.components_, ref.components_, 1e-8)
    np.testing.assert_allclose(ours.singular_values_, ref.singular_values_, rtol=1e-10)
    np.testing.assert_allclose(
        ours.explained_variance_ratio_, ref.explained_variance_ratio_, atol=1e-10
    )
    # the randomized range finder (5 power iterations) is close to the exact SVD
    rand = TruncatedSVD(10, random_state=0).fit(digits)
    np.testing.assert_allclose(rand.singular_values_, ours.singular_values_, rtol=1e-5)
    np.testing.assert_allclose(
        np.abs(rand.transform(digits)),
        np.abs(ours.transform(digits)),
        rtol=1e-3,
        atol=1e-2,
    )


@pytest.mark.parametrize(
    "Est,params",
    [
        (PCA, {"n_components": 0.9, "whiten": True}),
        (TruncatedSVD, {"n_components": 5, "random_state": 0}),
        (TruncatedSVD, {"n_components": 5, "algorithm": "full"}),
    ],
)
def test_backends_give_numpy_results(xp, digits, Est, params):
    X = digits[:300]
    ref = Est(**params).fit(X)
    est = Est(**params).fit(xp.asarray(X))
    for name in ("components_", "explained_variance_ratio_", "singular_values_"):
        a = getattr(est, name)
        assert xp.is_native(a)
        np.testing.assert_allclose(xp.to_numpy(a), getattr(ref, name), atol=1e-8)
    Z = est.transform(xp.asarray(X))
    assert xp.is_native(Z)
    np.testing.assert_allclose(xp.to_numpy(Z), ref.transform(X), atol=1e-7)
    back = est.inverse_transform(Z)
    np.testing.assert_allclose(
        xp.to_numpy(back), ref.inverse_transform(ref.transform(X)), atol=1e-7
    )


@pytest.mark.parametrize("algorithm", ["randomized", "full"])
def test_truncated_svd_fit_transform_is_transform(xp, digits, algorithm):
    # scikit-learn: randomized fit_transform returns X V_k (not the range
    # finder's U_k D_k), so it equals fit(X).transform(X) to rounding
    X = xp.asarray(digits[:300])
    est = TruncatedSVD(5, algorithm=algorithm, random_state=0)
    Z = xp.to_numpy(est.fit_transform(X))
    np.testing.assert_allclose(Z, xp.to_numpy(est.transform(X)), atol=1e-9)
    np.testing.assert_allclose(
        xp.to_numpy(est.explained_variance_), Z.var(axis=0), rtol=1e-10
    )


def _ppca_data(n=120, d=7, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3)) @ rng.standard_normal((3, d)) * 2.0
    return X + 0.3 * rng.standard_normal((n, d)) + rng.standard_normal(d) * 5


@pytest.mark.parametrize(
    "params",
    [
        {"n_components": 3},
        {"n_components": 3, "whiten": True},
        {"n_components": 0, "svd_solver": "full"},
        {"n_components": 7, "svd_solver": "full"},
        {"n_components": 2, "svd_solver": "randomized", "random_state": 0},
        {"n_components": 2, "svd_solver": "arpack"},
    ],
)
def test_probabilistic_pca_equals_sklearn(xp, params):
    """get_covariance / get_precision / score_samples / score: Tipping & Bishop's
    model, scikit-learn's formulas (it inverts by the matrix inversion lemma,
    xpml in closed form on the orthonormal components: equal to rounding)."""
    from sklearn.decomposition import PCA as SK

    X, Xt = _ppca_data(), _ppca_data(seed=1)
    ref = SK(**params).fit(X)
    est = PCA(**params).fit(xp.asarray(X))
    C, P = est.get_covariance(), est.get_precision()
    assert xp.is_native(C) and xp.is_native(P)
    scale = np.abs(ref.get_precision()).max()
    np.testing.assert_allclose(xp.to_numpy(C), ref.get_covariance(), atol=1e-10)
    np.testing.assert_allclose(xp.to_numpy(P), ref.get_precision(), atol=1e-10 * scale)
    ll = est.score_samples(xp.asarray(Xt))
    assert xp.is_native(ll)
    np.testing.assert_allclose(xp.to_numpy(ll), ref.score_samples(Xt), rtol=1e-10)
    assert est.score(xp.asarray(Xt)) == pytest.approx(ref.score(Xt), rel=1e-10)


def test_probabilistic_pca_without_noise_is_finite():
    # all components kept: σ² = 0; fewer samples than features: a singular
    # covariance, its density on the components' span (no division by zero)
    X = _ppca_data(n=40, d=4)
    with np.errstate(all="raise"):
        full = PCA(4, svd_solver="full").fit(X)
        assert full.noise_variance_ == 0 and np.isfinite(full.score(X))
        np.testing.assert_allclose(
            full.get_precision() @ full.get_covariance(), np.eye(4), atol=1e-8
        )
        wide = PCA(3, svd_solver="full").fit(X[:3].T)
        assert wide.noise_variance_ == 0 and np.isfinite(wide.score(X[:3].T))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mle_chooses_k_like_sklearn(seed):
    from sklearn.decomposition import PCA as SK

    X = _ppca_data(n=200, d=8, seed=seed)
    ours, ref = PCA("mle").fit(X), SK("mle").fit(X)
    assert ours.n_components_ == ref.n_components_ == 3
    np.testing.assert_allclose(ours.noise_variance_, ref.noise_variance_, rtol=1e-10)
    with pytest.raises(ValueError, match="only supported if n_samples >= n_features"):
        PCA("mle").fit(X[:5])
    with pytest.raises(ValueError, match="cannot be a string with svd_solver='arpack'"):
        PCA("mle", svd_solver="arpack").fit(X)


@pytest.mark.parametrize("normalizer", ["auto", "QR", "LU", "none"])
@pytest.mark.parametrize("algorithm", ["arpack", "randomized"])
def test_truncated_svd_algorithms_equal_sklearn(digits, algorithm, normalizer):
    from sklearn.decomposition import TruncatedSVD as SK

    kw = {"algorithm": algorithm, "power_iteration_normalizer": normalizer}
    ours = TruncatedSVD(8, n_iter=7, random_state=0, **kw).fit(digits)
    ref = SK(8, n_iter=7, random_state=0, **kw).fit(digits)
    # randomized: different random draws, the same converged leading triplets
    rtol = 1e-10 if algorithm == "arpack" else 1e-4
    np.testing.assert_allclose(ours.singular_values_, ref.singular_values_, rtol=rtol)
    atol = 1e-8 if algorithm == "arpack" else 1e-3
    _match_up_to_sign(ours.components_[:4], ref.components_[:4], atol)
    with pytest.raises(ValueError, match="strictly less than"):
        TruncatedSVD(64, algorithm="arpack").fit(digits)


def test_feature_names_out():
    assert PCA(2).fit(_ppca_data()).get_feature_names_out().tolist() == ["pca0", "pca1"]


@pytest.mark.parametrize("solver", ["full", "covariance_eigh"])
def test_whitening_a_null_variance_stays_finite(solver):
    # rank 15 of 30 features: covariance_eigh's trailing variances are 0; the
    # whitening scale is floored at eps as scikit-learn's (not inf / NaN)
    from sklearn.decomposition import PCA as SK

    rng = np.random.default_rng(42)
    X = rng.standard_normal((100, 15)) @ rng.standard_normal((15, 30))
    ours = PCA(svd_solver=solver, whiten=True)
    Z = ours.fit_transform(X)
    assert np.isfinite(Z).all() and np.isfinite(ours.transform(X)).all()
    ref = SK(svd_solver=solver, whiten=True).fit_transform(X)
    np.testing.assert_allclose(np.abs(Z[:, :15]), np.abs(ref[:, :15]), atol=1e-8)
