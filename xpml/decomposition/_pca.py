"""Principal component analysis and truncated SVD, by the SVD of the data.

PCA takes the thin SVD of the *centred* data, ``X − x̄ = U D Vᵀ``, never the
eigen-decomposition of ``XᵀX`` (which squares the condition number). The
principal axes are the rows of ``Vᵀ``, the principal coordinates ``U D``, and the
variance along axis ``j`` is ``D_j² / (n − 1)``. Signs are made deterministic as
in scikit-learn: the largest-magnitude entry of each axis is positive.

TruncatedSVD does the same without centring (latent semantic analysis), exactly
(``algorithm="full"``) or by the randomized range finder of Halko, Martinsson &
Tropp (``algorithm="randomized"``).
"""

from __future__ import annotations

import dataclasses
from math import lgamma, log
from numbers import Integral, Real

import numpy as np
from array_api_compat import array_namespace

from xpml._backend import enter, to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, TransformerMixin
from xpml.linalg import CPU_TILE_BYTES, right_singular, svd_flip
from xpml.utils._array_api import (
    device,
    eps,
    is_numpy_namespace,
    itemsize,
    memory_budget,
)
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import (
    _assert_finite,
    check_array,
    check_is_fitted,
    check_random_state,
)

__all__ = ["PCA", "TruncatedSVD", "choose_svd_solver", "randomized_range"]


SVD_SOLVERS = ("auto", "full", "covariance_eigh", "randomized", "arpack")
NORMALIZERS = ("auto", "QR", "LU", "none")


def _n_components_for(n_components, ev_host, n_samples):
    """Resolve ``n_components`` of the full solvers (already checked): None →
    all, an int, "mle" → Minka's choice, or the smallest ``k`` whose cumulative
    explained-variance ratio exceeds the fraction."""
    max_k = int(ev_host.shape[0])
    if n_components is None:
        return max_k
    if n_components == "mle":
        return _minka_rank(ev_host, n_samples)
    if isinstance(n_components, Integral):
        return int(n_components)
    cum = np.cumsum(ev_host / ev_host.sum())
    return min(int(np.searchsorted(cum, n_components, side="right")) + 1, max_k)


def _check_full_k(n_components, solver, shape):
    """scikit-learn's checks of ``n_components`` for "full" / "covariance_eigh",
    made before any work."""
    n, d = shape
    if n_components == "mle":
        if n < d:
            raise ValueError(
                "n_components='mle' is only supported if n_samples >= n_features"
            )
    elif isinstance(n_components, Integral) and not 0 <= n_components <= min(n, d):
        raise ValueError(
            f"n_components={n_components} must be between 0 and min(n_samples, "
            f"n_features)={min(n, d)} with svd_solver={solver!r}"
        )


def _minka_log_likelihood(spectrum, rank, n):
    """Minka (2000), eq. 30: log-evidence of a rank-``rank`` signal in isotropic
    noise, for the (host, decreasing) variances ``spectrum`` of ``n`` samples."""
    d = spectrum.shape[0]
    tiny = 1e-15
    if spectrum[rank - 1] < tiny:  # a null direction kept: never the best
        return -np.inf
    i = np.arange(1, rank + 1)
    p_u = -rank * log(2.0) + sum(lgamma((d - j + 1) / 2.0) for j in i)
    p_u -= log(np.pi) * float(np.sum(d - i + 1)) / 2.0
    p_l = -float(np.sum(np.log(spectrum[:rank]))) * n / 2.0
    v = max(tiny, float(np.sum(spectrum[rank:])) / (d - rank))
    p_v = -log(v) * n * (d - rank) / 2.0
    m = d * rank - rank * (rank + 1.0) / 2.0
    p_p = log(2.0 * np.pi) * (m + rank) / 2.0
    held = np.where(np.arange(d) < rank, spectrum, v)  # the noise ones set to v
    gap = spectrum[:rank, None] - spectrum[None, :]
    inv_gap = 1.0 / held[None, :] - 1.0 / held[:rank, None]
    upper = np.arange(d)[None, :] > np.arange(rank)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        p_a = float(np.sum(np.log(gap * inv_gap)[upper])) + upper.sum() * log(n)
    return p_u + p_l + p_v + p_p - p_a / 2.0 - rank * log(n) / 2.0


def _minka_rank(spectrum, n):
    """The rank in ``[1, d − 1]`` of largest Minka evidence (0 never chosen)."""
    d = spectrum.shape[0]
    ll = [_minka_log_likelihood(spectrum, r, n) for r in range(1, d)]
    return int(np.argmax(ll)) + 1 if ll else 0


def _read_variances(ev, lost, /, *, xp):
    """The variances and the covariance's flags (:data:`_LOST` plus
    :data:`_NOT_FINITE`; 0 when there are none) on the host, in one read."""
    flag = xp.zeros((1,), dtype=ev.dtype, device=device(ev))
    if lost is not None:
        flag = flag + xp.astype(lost, ev.dtype)
    return to_numpy(xp.concat([ev, flag]))


def choose_svd_solver(svd_solver, shape, n_components):
    """scikit-learn 1.9's ``svd_solver="auto"``: "covariance_eigh" for tall data
    with at most 1000 features (``n ≥ 10 d``), "full" for small problems
    (``max(n, d) ≤ 500``), "randomized" for an int ``n_components`` below 80 %
    of ``min(n, d)``, "full" otherwise. Other values are returned unchanged."""
    if svd_solver != "auto":
        return svd_solver
    n, d = shape
    if d <= 1000 and n >= 10 * d:
        return "covariance_eigh"
    if max(n, d) <= 500 or n_components == "mle":
        return "full"
    k = min(n, d) if n_components is None else n_components
    if isinstance(k, Integral) and 1 <= k < 0.8 * min(n, d):
        return "randomized"
    return "full"


_MAX_MEAN_TO_SPREAD = 1e4
"""Largest ``max_j x̄_j² / max_j var_j`` at which the covariance is taken as
``XᵀX − n x̄x̄ᵀ`` (scikit-learn's, one GEMM on ``X`` itself): the subtraction
then loses at most about four of the sixteen digits. Beyond it the data is
centred first, in row blocks."""


def _centred_gram(X, mean, /, *, xp):
    """``(X − x̄)ᵀ(X − x̄)``, centred in row blocks (cache-sized tiles on NumPy,
    the memory budget elsewhere): no centred copy of ``X``."""
    n, d = X.shape
    budget = memory_budget()
    if is_numpy_namespace(xp):
        budget = min(budget, CPU_TILE_BYTES)
    rows = max(d, int(budget // (itemsize(X.dtype, xp) * d)))
    G = None
    for r0 in range(0, n, rows):
        B = X[r0 : min(r0 + rows, n), :] - mean  # the standard: stops in bounds
        G = B.T @ B if G is None else G + B.T @ B
    return G


_LOST, _NOT_FINITE = 1.0, 2.0
"""The covariance's device flags, read with the variances: the mean swamps
the spread (redo from centred data); ``X`` is not finite (or its sums
overflowed): validation's check decides."""


def _mean_and_finite(X, /, *, xp):
    """The column means and whether they are all finite (a device bool), which
    stands for validation's finiteness check of ``X`` (one pass over ``X``
    fewer, issue 16): a NaN or an infinity makes its column's mean NaN or
    infinite, so finite means prove every entry finite; where they are not
    (or finite values overflowed) :func:`_require_finite` checks entry by
    entry, with validation's message."""
    with np.errstate(invalid="ignore"):  # inf − inf: the check says what it is
        mean = xp.mean(X, axis=0)
    return mean, xp.all(xp.isfinite(mean))


def _require_finite(X, finite, /, *, xp):
    """Validation's finiteness check of ``X``, one host read when ``finite``."""
    if not bool(finite):
        _assert_finite(X, xp, "X")


def _covariance(X, mean, /, *, xp, centred=False, finite=None):
    """The sample covariance ``(X − x̄)ᵀ(X − x̄) / (n − 1)`` and device flags.

    By one GEMM on ``X`` less ``n x̄x̄ᵀ`` (``centred=False``; the flags say
    whether the mean is too large against the spread for that, see
    :data:`_MAX_MEAN_TO_SPREAD`, and, given ``finite`` (the means' device
    flag), whether ``X`` is not finite, in which case the covariance is zero:
    read later with the variances), else from the centred data in row blocks
    (no cancellation; no flags)."""
    n = X.shape[0]
    if centred:
        return _centred_gram(X, mean, xp=xp) / (n - 1), None
    G = X.T @ X - n * (mean[:, None] * mean[None, :])
    spread = xp.max(xp.linalg.diagonal(G)) / n
    lost = xp.max(mean * mean) > _MAX_MEAN_TO_SPREAD * spread
    flags = _LOST * xp.astype(lost, G.dtype)
    if finite is not None:  # no eigh of NaN: the read of the flags stops the fit
        flags = flags + _NOT_FINITE * xp.astype(xp.logical_not(finite), G.dtype)
        G = xp.where(finite, G, xp.zeros_like(G))
    return G / (n - 1), flags


@dataclasses.dataclass
class _Solution:
    """What a solver returns: variances ``ev``, singular values ``s``, axes
    ``Vt``; ``lost`` (covariance solver) a device flag "the mean swamped the
    spread, redo from centred data"; ``scores`` (randomized) the range
    finder's ``U_k D_k``, which scikit-learn's ``fit_transform`` returns."""

    ev: Array
    s: Array
    Vt: Array
    lost: Array | None = None
    scores: Array | None = None


def _solve_full(X, mean, k, params, /, *, xp):
    """Thin SVD of the centred data."""
    s, Vt = right_singular(X, xp=xp, shift=mean)  # never forms X − x̄ on NumPy
    return _Solution(s * s / (X.shape[0] - 1), s, Vt)


def _solve_covariance_eigh(X, mean, k, params, /, *, xp, centred=False, finite=None):
    """Eigen-decomposition of the ``d × d`` covariance: variances are its
    eigenvalues (clamped at 0, in decreasing order), axes its eigenvectors,
    ``s = √((n − 1) λ)``; last, the covariance's device flags."""
    G, lost = _covariance(X, mean, xp=xp, centred=centred, finite=finite)
    lam, V = xp.linalg.eigh(G)
    lam = xp.maximum(xp.flip(lam, axis=0), xp.zeros_like(lam))
    Vt = xp.flip(V, axis=1).T
    return _Solution(lam, xp.sqrt(lam * (X.shape[0] - 1)), Vt, lost)


def _solve_randomized(X, mean, k, params, /, *, xp):
    """Halko et al.'s randomized SVD of the centred data (scikit-learn's
    ``_randomized_svd``: ``k + n_oversamples`` columns, ``iterated_power``
    normalised power iterations, the transpose when ``n < d``)."""
    Xc = X - mean
    n, d = Xc.shape
    M = Xc.T if n < d else Xc
    size = min(k + params.n_oversamples, min(n, d))
    Q = randomized_range(M, size, params, xp=xp)
    Uh, s, Vt = xp.linalg.svd(Q.T @ M, full_matrices=False)
    U = Vt.T if n < d else Q @ Uh
    Vt = (Q @ Uh).T if n < d else Vt
    s = s[:k]
    return _Solution(s * s / (n - 1), s, Vt[:k, :], scores=U[:, :k] * s[None, :])


def _solve_arpack(X, mean, k, params, /, *, xp):
    """ARPACK's answer (the ``k`` leading singular triplets, converged to
    ``tol = 0``) is the truncated exact SVD: there is no ARPACK on the array
    API, so the thin SVD is taken and truncated."""
    full = _solve_full(X, mean, k, params, xp=xp)
    return _Solution(full.ev[:k], full.s[:k], full.Vt[:k, :])


_SOLVE = {
    "full": _solve_full,
    "covariance_eigh": _solve_covariance_eigh,
    "randomized": _solve_randomized,
    "arpack": _solve_arpack,
}


def _solve_exact(X, mean, finite, solver, params, /, *, xp):
    """An exact solver's solution and its variances on the host, with one read
    (and the covariance's flags in it): where ``X`` is not finite,
    validation's check (:func:`_require_finite`) raises, or (finite values
    whose sums overflowed) the covariance is made again without the flag;
    where the mean swamps the spread, from the centred data."""
    covariance = solver == "covariance_eigh"
    extra = {"finite": finite} if covariance else {}
    sol = _SOLVE[solver](X, mean, None, params, xp=xp, **extra)
    host = _read_variances(sol.ev, sol.lost, xp=xp)
    if host[-1] >= _NOT_FINITE:
        _require_finite(X, False, xp=xp)
        sol = _solve_covariance_eigh(X, mean, None, params, xp=xp)
        host = _read_variances(sol.ev, sol.lost, xp=xp)
    if host[-1]:  # the mean swamps the spread: covariance from centred data
        sol = _solve_covariance_eigh(X, mean, None, params, xp=xp, centred=True)
        host = _read_variances(sol.ev, None, xp=xp)
    return sol, host[:-1]


@dataclasses.dataclass
class _RandomizedParams:
    """The randomized solver's knobs, resolved (``n_iter`` an int)."""

    n_oversamples: int
    n_iter: int
    normalizer: str
    rng: object


def randomized_range(A, size, params, /, *, xp):
    """Orthonormal basis ``Q`` (n, size) of (approximately) the range of ``A``:
    a Gaussian test matrix drawn on the host (so every backend gets the same
    answer), ``params.n_iter`` power iterations normalised by QR (or not, with
    ``"none"``), a final QR (scikit-learn's ``_randomized_range_finder``)."""

    def normalise(Y):
        return Y if params.normalizer == "none" else xp.linalg.qr(Y)[0]

    Q = xp.asarray(
        params.rng.standard_normal((A.shape[1], size)), dtype=A.dtype, device=device(A)
    )
    for _ in range(params.n_iter):
        Q = normalise(A @ Q)
        Q = normalise(A.T @ Q)
    return xp.linalg.qr(A @ Q)[0]


def _truncated_k(n_components, svd_solver, max_k):
    """``n_components`` of the truncated solvers: an int in ``[1, min(n, d)]``
    (``< min(n, d)`` for "arpack"); None means ``min(n, d)`` ("arpack": minus 1)."""
    k = n_components
    if k is None:
        k = max_k - 1 if svd_solver == "arpack" else max_k
    if isinstance(k, str):
        raise ValueError(
            f"n_components={k!r} cannot be a string with svd_solver={svd_solver!r}"
        )
    if not isinstance(k, Integral) or not 1 <= k <= max_k:
        raise ValueError(
            f"n_components={n_components!r} must be between 1 and "
            f"min(n_samples, n_features)={max_k} with svd_solver={svd_solver!r} "
            f"(an int)"
        )
    if svd_solver == "arpack" and k == max_k:
        raise ValueError(
            f"n_components={k} must be strictly less than min(n_samples, "
            f"n_features)={max_k} with svd_solver='arpack'"
        )
    return int(k)


def _ppca_variances(ev, noise, whiten, /, *, xp):
    """Probabilistic PCA's covariance is ``Wᵀ diag(a) W + σ² I`` (``W`` the
    orthonormal ``components_``); ``a = max(ev − σ², 0)``, times ``ev`` when
    whitening (scikit-learn scales the whitened components by ``√ev``)."""
    diff = xp.where(ev > noise, ev - noise, xp.zeros_like(ev))
    return diff * ev if whiten else diff


def _whitening_scale(ev, /, *, xp):
    """``√ev`` floored at ``eps`` (scikit-learn's): a null variance (a rank-
    deficient ``X``) whitens to finite, not to ``inf``/NaN."""
    return xp.maximum(xp.sqrt(ev), xp.full_like(ev, eps(ev.dtype, xp)))


def _safe_inverse(a, /, *, xp):
    """``1/a`` where ``a > 0``, else 0 (the pseudo-inverse of ``diag(a)``)."""
    positive = a > 0
    return xp.where(positive, 1.0 / xp.where(positive, a, xp.ones_like(a)), 0.0 * a)


class PCA(TransformerMixin, BaseEstimator):
    """Principal component analysis with scikit-learn's solvers.

    Parameters
    ----------
    n_components : int, float in (0, 1), "mle" or None, default=None
        Number of components to keep (0 allowed with the full solvers); a float
        keeps the fewest components whose explained variance ratios add up to
        more than that fraction; "mle" (full solvers, ``n ≥ d``) Minka's
        evidence-maximising choice; None keeps ``min(n_samples, n_features)``.
    copy : bool, default=True
        Accepted for scikit-learn compatibility: xpml never writes into ``X``.
    whiten : bool, default=False
        Scale the projections to unit variance (divide by ``√explained_variance_``).
    svd_solver : {"auto", "full", "covariance_eigh", "randomized", "arpack"}, default="auto"
        As scikit-learn's. "full": thin SVD of the centred data (via the
        ``R`` of its QR for tall data). "covariance_eigh": eigen-decomposition
        of the ``d × d`` covariance (one GEMM, the fast path for ``n ≫ d``,
        also on a GPU; it squares the condition number, so variances far
        below ``eps · λ_max`` are lost). "randomized": Halko et al.'s
        randomized SVD. "arpack": the array API has no ARPACK; the exact thin
        SVD truncated to ``n_components`` (ARPACK's converged answer) with
        ARPACK's constraints (int ``n_components < min(n, d)``). "auto": see
        :func:`choose_svd_solver` (scikit-learn 1.9's rule).
    tol : float, default=0.0
        ARPACK's tolerance; unused (the "arpack" answer is exact).
    iterated_power : int or "auto", default="auto"
        Power iterations of "randomized"; "auto": 7 when ``n_components <
        0.1 min(n, d)``, else 4.
    n_oversamples : int, default=10
        Extra random columns of "randomized".
    power_iteration_normalizer : {"auto", "QR", "LU", "none"}, default="auto"
        Normalisation between power iterations. The array API has no LU: "LU"
        uses QR (the same subspace, hence the same answer). "auto": "none"
        for at most 2 iterations, QR otherwise.
    random_state : int, Generator or None
        Seed of "randomized" (drawn on the host with NumPy: its draws differ
        from scikit-learn's ``RandomState``, not its converged answer).

    Attributes
    ----------
    components_ : array (n_components, n_features)
        Principal axes (rows of ``Vᵀ``), largest-magnitude entry positive.
    explained_variance_ : array (n_components,)
        ``D_j² / (n − 1)``.
    explained_variance_ratio_ : array (n_components,)
        Fractions of the total variance.
    singular_values_ : array (n_components,)
    mean_ : array (n_features,)
    n_components_ : int
    noise_variance_ : float
        Mean of the discarded variances (0 when none is discarded).
    n_samples_, n_features_in_ : int

    Notes
    -----
    ``X − x̄ = U D Vᵀ``; ``transform(X) = (X − x̄) V_k`` (principal coordinates,
    ``= U_k D_k`` on the training data); ``inverse_transform(Z) = Z V_kᵀ + x̄``.
    Probabilistic PCA (:meth:`get_covariance`, :meth:`get_precision`,
    :meth:`score_samples`, :meth:`score`): ``x ~ N(x̄, Wᵀ diag(λ − σ²) W + σ² I)``
    with ``σ² = noise_variance_``, as scikit-learn.

    References
    ----------
    Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*, §14.5.1.
    Tipping & Bishop (1999), Probabilistic principal component analysis, JRSS B.
    Minka (2000), Automatic choice of dimensionality for PCA, NeurIPS.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[2.0, 0.0], [0.0, 1.0], [-2.0, 0.0], [0.0, -1.0]])
    >>> pca = PCA(n_components=1).fit(X)
    >>> pca.components_.tolist(), np.round(pca.explained_variance_ratio_, 3).tolist()
    ([[1.0, 0.0]], [0.8])
    >>> pca.transform(X)[:, 0].tolist()
    [2.0, 0.0, -2.0, 0.0]
    """

    _parameter_constraints = {
        "copy": ["boolean"],
        "iterated_power": [Options("auto"), Interval(Integral, 0, None, closed="left")],
        "n_components": [
            None,
            Interval(Integral, 0, None, closed="left"),
            Interval(Real, 0, 1, closed="neither"),
            Options("mle"),
        ],
        "n_oversamples": [Interval(Integral, 1, None, closed="left")],
        "power_iteration_normalizer": [Options(*NORMALIZERS)],
        "random_state": ["random_state"],
        "svd_solver": [Options(*SVD_SOLVERS)],
        "tol": [Interval(Real, 0, None, closed="left")],
        "whiten": ["boolean"],
    }
    _xpml_tags = {"data": "unsupervised"}

    def __init__(
        self,
        n_components=None,
        *,
        copy=True,
        whiten=False,
        svd_solver="auto",
        tol=0.0,
        iterated_power="auto",
        n_oversamples=10,
        power_iteration_normalizer="auto",
        random_state=None,
    ):
        self.n_components = n_components
        self.copy = copy
        self.whiten = whiten
        self.svd_solver = svd_solver
        self.tol = tol
        self.iterated_power = iterated_power
        self.n_oversamples = n_oversamples
        self.power_iteration_normalizer = power_iteration_normalizer
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Centre ``X`` and take its SVD; returns self."""
        self._fit(X)
        return self

    def fit_transform(self, X: ArrayLike, y: ArrayLike | None = None) -> Array:
        """Fit, and return the training data's principal coordinates ``U_k D_k``
        (``= (X − x̄) V_k`` for the exact solvers, where ``U`` is never formed;
        "randomized": the range finder's ``U_k D_k``, as scikit-learn, whose
        column variances are ``explained_variance_``)."""
        ctx, scores = self._fit(X)
        if scores is None:
            return self.transform(X)
        return ctx.out(scores)

    def _fit(self, X):
        # finiteness: read off the mean (_mean_and_finite), not a pass of its own
        ctx, X, _, _ = self._validate_fit_data(X, min_samples=2, ensure_finite=False)
        xp = ctx.xp
        mean, finite = _mean_and_finite(X, xp=xp)
        n, d = X.shape
        max_k = min(n, d)
        solver = choose_svd_solver(self.svd_solver, (n, d), self.n_components)
        truncated = solver in ("randomized", "arpack")
        if solver != "covariance_eigh":  # its check rides on the variances' read
            _require_finite(X, finite, xp=xp)
        k = _truncated_k(self.n_components, solver, max_k) if truncated else None
        if not truncated:
            try:
                _check_full_k(self.n_components, solver, (n, d))
            except ValueError:  # validation's error comes first, as it did
                _require_finite(X, finite, xp=xp)
                raise
        params = self._randomized_params(k, max_k)
        if truncated:  # scikit-learn's: the total from the data, the rest as noise
            sol = _SOLVE[solver](X, mean, k, params, xp=xp)
            ev = sol.ev
            total = xp.sum(xp.var(X, axis=0, correction=1))
            rest = float((total - xp.sum(ev)) / (max_k - k)) if k < max_k else 0.0
        else:  # one read: the variances (for k and the noise) and the flags
            sol, ev_host = _solve_exact(X, mean, finite, solver, params, xp=xp)
            ev = sol.ev
            k = _n_components_for(self.n_components, ev_host, n)
            rest = float(np.mean(ev_host[k:])) if k < max_k else 0.0
            total = xp.sum(ev)
        scores, Vt = svd_flip(sol.scores, sol.Vt, xp=xp)
        self._fit_svd_solver = solver
        self.n_samples_ = int(n)
        self.n_components_ = k
        self.mean_ = mean
        self.components_ = Vt[:k, :]
        self.explained_variance_ = ev[:k]
        self.explained_variance_ratio_ = ev[:k] / total
        self.singular_values_ = sol.s[:k]
        self.noise_variance_ = rest
        if scores is not None and self.whiten:
            scores = scores / _whitening_scale(ev[:k], xp=xp)[None, :]
        self._fitted(ctx)
        return ctx, scores

    def _randomized_params(self, k, max_k):
        n_iter = self.iterated_power
        if n_iter == "auto":
            n_iter = 7 if k is not None and k < 0.1 * max_k else 4
        normalizer = self.power_iteration_normalizer
        if normalizer == "auto":
            normalizer = "none" if n_iter <= 2 else "QR"
        return _RandomizedParams(
            self.n_oversamples,
            n_iter,
            "QR" if normalizer == "LU" else normalizer,
            check_random_state(self.random_state),
        )

    def transform(self, X: ArrayLike) -> Array:
        """Principal coordinates ``(X − x̄) V_k`` (divided by ``√variance`` when whitening)."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        Z = (X - ctx.take(self.mean_)) @ ctx.take(self.components_).T
        if self.whiten:
            Z = Z / _whitening_scale(ctx.take(self.explained_variance_), xp=xp)[None, :]
        return ctx.out(Z)

    def inverse_transform(self, X: ArrayLike) -> Array:
        """Back to feature space: ``Z V_kᵀ + x̄`` (undoing the whitening first)."""
        check_is_fitted(self)
        ctx, (Z,) = enter(X, names=("X",))
        xp = ctx.xp
        Z = check_array(Z, xp=xp, name="X", requested=ctx.dtype)
        if int(Z.shape[1]) != self.n_components_:
            raise ValueError(
                f"X has {int(Z.shape[1])} features, but inverse_transform of {type(self).__name__} "
                f"is expecting {self.n_components_} features (one per component)"
            )
        if self.whiten:
            Z = Z * xp.sqrt(ctx.take(self.explained_variance_))[None, :]
        return ctx.out(Z @ ctx.take(self.components_) + ctx.take(self.mean_))

    # ------------------------------------------- probabilistic PCA (Tipping & Bishop)
    def _model(self, take):
        """``(W, a, σ²)`` of the generative covariance ``Wᵀ diag(a) W + σ² I``,
        arrays through ``take`` (a context's, or the identity)."""
        W = take(self.components_)
        xp = array_namespace(W)
        noise = float(self.noise_variance_)
        a = _ppca_variances(take(self.explained_variance_), noise, self.whiten, xp=xp)
        return W, a, noise, xp

    def get_covariance(self) -> Array:
        """The data covariance of the generative model, ``Wᵀ diag(a) W + σ² I``
        (``a = explained_variance_ − σ²`` clipped at 0; ``σ² = noise_variance_``),
        in the fitted arrays' library."""
        check_is_fitted(self)
        W, a, noise, xp = self._model(lambda x: x)
        eye = xp.eye(W.shape[1], dtype=W.dtype, device=device(W))
        return (W.T * a[None, :]) @ W + noise * eye

    def get_precision(self) -> Array:
        """The inverse of :meth:`get_covariance` in closed form (``W`` has
        orthonormal rows): ``I/σ² + Wᵀ diag(1/(a + σ²) − 1/σ²) W``; no
        factorisation. With ``σ² = 0`` the pseudo-inverse ``Wᵀ diag(1/a) W``."""
        check_is_fitted(self)
        W, a, noise, xp = self._model(lambda x: x)
        if noise == 0.0:
            return (W.T * _safe_inverse(a, xp=xp)[None, :]) @ W
        eye = xp.eye(W.shape[1], dtype=W.dtype, device=device(W))
        return eye / noise + (W.T * (1.0 / (a + noise) - 1.0 / noise)[None, :]) @ W

    def _log_likelihood(self, X):
        ctx, X = self._validate_predict_data(X)
        W, a, noise, xp = self._model(ctx.take)
        Xr = X - ctx.take(self.mean_)
        Z2 = (Xr @ W.T) ** 2
        d, k = int(X.shape[1]), int(W.shape[0])
        if noise == 0.0:  # degenerate: the density on the span of the components
            quad = Z2 @ _safe_inverse(a, xp=xp)
            logdet = xp.sum(xp.log(xp.where(a > 0, a, xp.ones_like(a))))
        else:
            quad = xp.sum(Xr * Xr, axis=1) / noise + Z2 @ (
                1.0 / (a + noise) - 1.0 / noise
            )
            logdet = xp.sum(xp.log(a + noise)) + (d - k) * log(noise)
        return ctx, -0.5 * quad - 0.5 * (d * log(2.0 * np.pi) + logdet)

    def score_samples(self, X: ArrayLike) -> Array:
        """Log-likelihood of each sample under probabilistic PCA (Tipping &
        Bishop 1999; Bishop, *PRML* §12.2.1): ``N(x̄, get_covariance())``."""
        ctx, ll = self._log_likelihood(X)
        return ctx.out(ll)

    def score(self, X: ArrayLike, y: ArrayLike | None = None) -> float:
        """Average log-likelihood of the samples (:meth:`score_samples`)."""
        ctx, ll = self._log_likelihood(X)
        return float(ctx.xp.mean(ll))

    def get_feature_names_out(self, input_features=None):
        """``pca0``, ``pca1``, ... one per component."""
        from xpml.kernel_approximation import _class_prefix_names

        return _class_prefix_names(self, "components_")


class TruncatedSVD(TransformerMixin, BaseEstimator):
    """Rank-k SVD of uncentred data (latent semantic analysis).

    Parameters
    ----------
    n_components : int, default=2
    algorithm : {"randomized", "arpack", "full"}, default="randomized"
        "full": the exact thin SVD. "randomized": Halko et al.'s range finder
        with ``n_iter`` power iterations and ``n_oversamples`` extra columns
        (random draws on the host, so every backend gets the same answer).
        "arpack": the array API has no ARPACK; served by the exact thin SVD
        truncated to ``n_components`` (ARPACK's converged answer, at ``tol=0``
        to rounding), with ARPACK's constraint ``n_components < min(n, d)``.
    n_iter : int, default=5
    n_oversamples : int, default=10
    power_iteration_normalizer : {"auto", "QR", "LU", "none"}, default="auto"
        Normalisation between the power iterations of "randomized"; "auto":
        "none" for at most 2 iterations, else "LU". The array API has no LU:
        "LU" uses QR (the same subspace, hence the same answer to rounding).
    random_state : int, Generator or None
    tol : float >= 0, default=0.0
        ARPACK's tolerance; unused (the "arpack" answer is exact).

    Attributes
    ----------
    components_ : array (n_components, n_features)
        Right singular vectors, largest-magnitude entry positive.
    singular_values_ : array (n_components,)
    explained_variance_ : array (n_components,)
        Variance of each column of the training projections ``U_k D_k``.
    explained_variance_ratio_ : array (n_components,)
        Over the total variance of ``X``'s columns.
    n_features_in_ : int

    Notes
    -----
    ``X ≈ U_k D_k V_kᵀ``; ``transform(X) = X V_k``.

    References
    ----------
    Halko, Martinsson & Tropp (2011), *Finding structure with randomness*, SIAM Review.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[3.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
    >>> svd = TruncatedSVD(n_components=1, algorithm="full").fit(X)
    >>> np.round(svd.singular_values_, 6).tolist(), svd.components_.tolist()
    ([4.242641], [[1.0, 0.0]])
    """

    _parameter_constraints = {
        "algorithm": [Options("randomized", "arpack", "full")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "n_oversamples": [Interval(Integral, 0, None, closed="left")],
        "power_iteration_normalizer": [Options(*NORMALIZERS)],
        "random_state": ["random_state"],
        "tol": [Interval(Real, 0, None, closed="left")],
    }
    _xpml_tags = {"data": "unsupervised", "test_params": {"random_state": 0}}

    def __init__(
        self,
        n_components=2,
        *,
        algorithm="randomized",
        n_iter=5,
        n_oversamples=10,
        power_iteration_normalizer="auto",
        random_state=None,
        tol=0.0,
    ):
        self.n_components = n_components
        self.algorithm = algorithm
        self.n_iter = n_iter
        self.n_oversamples = n_oversamples
        self.power_iteration_normalizer = power_iteration_normalizer
        self.random_state = random_state
        self.tol = tol

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Compute the rank-``n_components`` SVD; returns self."""
        self._fit(X)
        return self

    def fit_transform(self, X: ArrayLike, y: ArrayLike | None = None) -> Array:
        """Fit, and return the projection: ``U_k D_k`` for "full", ``X V_k``
        for "randomized" (as scikit-learn: the range finder's ``U_k D_k`` is
        only approximately ``X V_k``, so ``fit_transform(X)`` equals
        ``fit(X).transform(X)`` to rounding)."""
        ctx, Z = self._fit(X)
        return ctx.out(Z)

    def _fit(self, X):
        ctx, X, _, _ = self._validate_fit_data(X)
        xp = ctx.xp
        n, d = X.shape
        k = self.n_components
        if k > d:
            raise ValueError(
                f"n_components={k} must be at most n_features={d} for TruncatedSVD"
            )
        exact = self.algorithm != "randomized"
        if self.algorithm == "arpack" and k >= min(n, d):
            raise ValueError(
                f"n_components={k} must be strictly less than min(n_samples, "
                f"n_features)={min(n, d)} with algorithm='arpack'"
            )
        if exact:
            U, s, Vt = xp.linalg.svd(X, full_matrices=False)
        else:
            normalizer = self.power_iteration_normalizer
            if normalizer == "auto":
                normalizer = "none" if self.n_iter <= 2 else "LU"
            rng = check_random_state(self.random_state)
            size = min(k + self.n_oversamples, n, d)
            params = _RandomizedParams(
                self.n_oversamples,
                self.n_iter,
                "QR" if normalizer == "LU" else normalizer,
                rng,
            )
            Q = randomized_range(X, size, params, xp=xp)
            Ub, s, Vt = xp.linalg.svd(Q.T @ X, full_matrices=False)
            U = Q @ Ub
        U, Vt = svd_flip(U[:, :k], Vt[:k, :], xp=xp)
        s = s[:k]
        # randomized: U_k D_k = Q Qᵀ X V_k ≠ X V_k; scikit-learn returns X V_k
        Z = U * s[None, :] if exact else X @ Vt.T
        ev = xp.var(Z, axis=0)
        self.components_ = Vt
        self.singular_values_ = s
        self.explained_variance_ = ev
        self.explained_variance_ratio_ = ev / xp.sum(xp.var(X, axis=0))
        self._fitted(ctx)
        return ctx, Z

    def transform(self, X: ArrayLike) -> Array:
        """Project onto the right singular vectors: ``X V_k``."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(X @ ctx.take(self.components_).T)

    def inverse_transform(self, X: ArrayLike) -> Array:
        """``Z V_kᵀ``: back to feature space."""
        check_is_fitted(self)
        ctx, (Z,) = enter(X, names=("X",))
        Z = check_array(Z, xp=ctx.xp, name="X", requested=ctx.dtype)
        return ctx.out(Z @ ctx.take(self.components_))
