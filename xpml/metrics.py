"""Evaluation metrics, on every backend.

Scores come back as Python floats; :func:`confusion_matrix` returns an array in
the caller's library.
"""

from __future__ import annotations

import numpy as np

from xpml._backend import enter, to_numpy
from xpml.exceptions import UndefinedMetricWarning, warn
from xpml.utils._array_api import device as array_device
from xpml.utils.validation import check_consistent_length

__all__ = [
    "accuracy_score",
    "log_loss",
    "mean_squared_error",
    "r2_score",
    "expected_calibration_error",
    "confusion_matrix",
]


def _is_numeric(a):
    if isinstance(a, np.ndarray):
        return a.dtype.kind in "biuf"
    return True


def _as_1d(a, name):
    if not hasattr(a, "shape"):
        a = np.asarray(a)
    if len(a.shape) == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if len(a.shape) != 1:
        raise ValueError(f"{name} must be 1-D; got shape {tuple(a.shape)}")
    return a


def _weights(sample_weight, n, xp, dtype, device):
    if sample_weight is None:
        return None
    w = (
        xp.asarray(sample_weight, dtype=dtype, device=device)
        if not hasattr(sample_weight, "shape")
        else sample_weight
    )
    w = xp.astype(w, dtype)
    if w.shape != (n,):
        raise ValueError(f"sample_weight must have shape ({n},); got {tuple(w.shape)}")
    return w


def _mean(v, w, xp):
    if w is None:
        return xp.mean(v)
    return xp.sum(v * w) / xp.sum(w)


def accuracy_score(y_true, y_pred, *, sample_weight=None):
    """Fraction (or weighted fraction) of exact label matches.

    >>> accuracy_score([0, 1, 1, 0], [0, 1, 0, 0])
    0.75
    """
    y_true, y_pred = _as_1d(y_true, "y_true"), _as_1d(y_pred, "y_pred")
    check_consistent_length(y_true, y_pred, names=("y_true", "y_pred"))
    if not (_is_numeric(y_true) and _is_numeric(y_pred)):
        y_true, y_pred = to_numpy(y_true), to_numpy(y_pred)
        sample_weight = None if sample_weight is None else to_numpy(sample_weight)
    ctx, (t, p, w) = enter(
        y_true, y_pred, sample_weight, names=("y_true", "y_pred", "sample_weight")
    )
    xp = ctx.xp
    dtype = xp.float64 if _f64(xp, ctx.device) else xp.float32
    hits = xp.astype(t == p, dtype)
    return float(_mean(hits, _weights(w, hits.shape[0], xp, dtype, ctx.device), xp))


def _f64(xp, device):
    from xpml._backend import _has_float64

    return _has_float64(xp, device)


def _real_targets(y_true, y_pred, sample_weight):
    """Targets and predictions as float arrays of one namespace, same shape."""
    check_consistent_length(y_true, y_pred, names=("y_true", "y_pred"))
    ctx, (t, p, w) = enter(
        y_true, y_pred, sample_weight, names=("y_true", "y_pred", "sample_weight")
    )
    xp = ctx.xp
    dtype = xp.float64 if _f64(xp, ctx.device) else xp.float32
    t, p = xp.astype(t, dtype), xp.astype(p, dtype)
    if t.shape != p.shape:
        raise ValueError(
            f"y_true has shape {tuple(t.shape)} but y_pred has {tuple(p.shape)}"
        )
    return xp, t, p, _weights(w, t.shape[0], xp, dtype, ctx.device)


def mean_squared_error(y_true, y_pred, *, sample_weight=None):
    """Mean of squared errors, averaged over outputs too for 2-D targets.

    >>> mean_squared_error([1.0, 2.0], [1.0, 4.0])
    2.0
    """
    xp, t, p, w = _real_targets(y_true, y_pred, sample_weight)
    err = (t - p) ** 2
    if len(err.shape) == 2:
        err = xp.mean(err, axis=1)
    return float(_mean(err, w, xp))


def r2_score(y_true, y_pred, *, sample_weight=None):
    """Coefficient of determination ``1 − SS_res / SS_tot`` (uniform average
    over outputs)."""
    xp, t, p, w = _real_targets(y_true, y_pred, sample_weight)
    if len(t.shape) == 1:
        t, p = t[:, None], p[:, None]
    n = t.shape[0]
    if n < 2:  # as scikit-learn: undefined, not 0 or a huge negative number
        warn(
            UndefinedMetricWarning,
            "R^2 score is not well-defined with less than two samples.",
        )
        return float("nan")
    w = xp.ones((n,), dtype=t.dtype, device=array_device(t)) if w is None else w
    mean = xp.sum(w[:, None] * t, axis=0) / xp.sum(w)
    ss_res = xp.sum(w[:, None] * (t - p) ** 2, axis=0)
    ss_tot = xp.sum(w[:, None] * (t - mean) ** 2, axis=0)
    ss_res, ss_tot = to_numpy(ss_res), to_numpy(ss_tot)
    scores = np.where(
        ss_tot > 0,
        1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0),
        np.where(ss_res > 0, 0.0, 1.0),
    )
    return float(np.mean(scores))


def _codes(y, labels, name):
    """Integer codes of ``y`` against the sorted ``labels`` (host NumPy)."""
    y = to_numpy(y)
    pos = np.searchsorted(labels, y)
    pos = np.clip(pos, 0, len(labels) - 1)
    if not np.all(labels[pos] == y):
        bad = np.unique(y[labels[pos] != y])[:5]
        raise ValueError(
            f"{name} contains labels {bad.tolist()!r} not in labels {labels.tolist()!r}"
        )
    return pos


def log_loss(y_true, y_prob, *, labels=None, eps=None, sample_weight=None):
    """Cross-entropy ``−mean Σ_k [y = k] log p_k``.

    ``y_prob`` is ``(n, k)`` with columns in sorted label order, or ``(n,)``
    for the probability of the larger of two labels. Probabilities are clipped
    to ``[eps, 1 − eps]`` (default: the dtype's machine epsilon).

    >>> round(log_loss([0, 1], [[0.9, 0.1], [0.2, 0.8]]), 6)
    0.164252
    """
    y_true = _as_1d(y_true, "y_true")
    check_consistent_length(y_true, y_prob, names=("y_true", "y_prob"))
    labels = np.unique(to_numpy(y_true)) if labels is None else np.asarray(labels)
    codes = _codes(y_true, labels, "y_true")
    ctx, (P, w) = enter(y_prob, sample_weight, names=("y_prob", "sample_weight"))
    c = ctx.take(codes)
    xp = ctx.xp
    dtype = P.dtype if xp.isdtype(P.dtype, "real floating") else xp.float64
    P = xp.astype(P, dtype)
    if len(P.shape) == 1:
        P = xp.stack([1.0 - P, P], axis=1)
    k = P.shape[1]
    if k != len(labels) and not (len(labels) == 1 and k == 2):
        raise ValueError(
            f"y_prob has {k} columns but there are {len(labels)} labels {labels.tolist()!r}"
        )
    if eps is None:
        eps = float(np.finfo(np.float32 if dtype == xp.float32 else np.float64).eps)
    P = xp.clip(P, eps, 1.0 - eps)
    onehot = xp.astype(c[:, None] == xp.arange(k, device=ctx.device)[None, :], dtype)
    nll = -xp.sum(onehot * xp.log(P), axis=1)
    return float(_mean(nll, _weights(w, nll.shape[0], xp, dtype, ctx.device), xp))


def expected_calibration_error(y_true, y_prob, *, n_bins=10, pos_label=None):
    """Expected calibration error with ``n_bins`` equal-width bins.

    ``ECE = Σ_b (|B_b| / n) · |acc(B_b) − conf(B_b)|``.

    * ``y_prob`` of shape ``(n,)``: probabilities of the positive class
      (``pos_label``, default the larger label); a bin's accuracy is the
      fraction of positives in it and its confidence the mean probability.
    * ``y_prob`` of shape ``(n, k)``: top-label calibration; confidence is
      the largest probability and accuracy whether that class is right.

    >>> expected_calibration_error([0, 1, 1, 1], [0.0, 1.0, 1.0, 1.0])
    0.0
    """
    if int(n_bins) < 1:
        raise ValueError(f"n_bins must be a positive int; got {n_bins!r}")
    y_true = _as_1d(y_true, "y_true")
    check_consistent_length(y_true, y_prob, names=("y_true", "y_prob"))
    labels = np.unique(to_numpy(y_true))
    ctx0, (P0,) = enter(y_prob, names=("y_prob",))
    if len(P0.shape) == 1:
        if pos_label is None:
            if len(labels) > 2:
                raise ValueError("y_prob is 1-D but y_true has more than two labels")
            pos_label = labels[-1]
        hit = (to_numpy(y_true) == pos_label).astype(np.float64)
    else:
        k = P0.shape[1]
        if k < len(labels):
            raise ValueError(
                f"y_prob has {k} columns but y_true has {len(labels)} labels"
            )
        codes = _codes(y_true, labels, "y_true")
        hit = codes.astype(np.int64)
    ctx, (P,) = enter(y_prob, names=("y_prob",))
    h = ctx.take(hit)
    xp = ctx.xp
    dtype = P.dtype if xp.isdtype(P.dtype, "real floating") else xp.float64
    P = xp.astype(P, dtype)
    if len(P.shape) == 2:
        conf = xp.max(P, axis=1)
        acc = xp.astype(xp.argmax(P, axis=1) == h, dtype)
    else:
        conf, acc = P, xp.astype(h, dtype)
    idx = xp.astype(xp.floor(conf * n_bins), xp.int64)
    idx = xp.clip(idx, 0, n_bins - 1)
    member = xp.astype(
        idx[:, None] == xp.arange(n_bins, device=ctx.device)[None, :], dtype
    )
    gap = xp.abs(
        xp.sum(member * acc[:, None], axis=0) - xp.sum(member * conf[:, None], axis=0)
    )
    return float(xp.sum(gap) / conf.shape[0])


def confusion_matrix(y_true, y_pred, *, labels=None, sample_weight=None):
    """``C[i, j]`` = number of samples of true label ``labels[i]`` predicted as
    ``labels[j]`` (labels sorted; default: all labels seen).

    >>> confusion_matrix([0, 1, 1], [0, 0, 1]).tolist()
    [[1, 0], [1, 1]]
    """
    y_true, y_pred = _as_1d(y_true, "y_true"), _as_1d(y_pred, "y_pred")
    check_consistent_length(y_true, y_pred, names=("y_true", "y_pred"))
    if labels is None:
        labels = np.unique(np.concatenate([to_numpy(y_true), to_numpy(y_pred)]))
    else:
        labels = np.asarray(labels)
        order = np.argsort(labels)
        labels = labels[order]
    t, p = _codes(y_true, labels, "y_true"), _codes(y_pred, labels, "y_pred")
    numeric = _is_numeric(y_true) and _is_numeric(y_pred)
    ctx, (_, w) = enter(
        y_true if numeric else t, sample_weight, names=("y_true", "sample_weight")
    )
    t, p = ctx.take(t), ctx.take(p)
    xp = ctx.xp
    k = len(labels)
    dtype = xp.float64 if _f64(xp, ctx.device) else xp.float32
    ar = xp.arange(k, device=ctx.device)[None, :]
    A = xp.astype(t[:, None] == ar, dtype)
    B = xp.astype(p[:, None] == ar, dtype)
    if w is not None:
        A = A * xp.astype(w, dtype)[:, None]
        return ctx.out(A.T @ B)
    return ctx.out(xp.astype(xp.round(A.T @ B), xp.int64))
