"""Shared machinery of the ensembles: parallel map, progress bar, members of any library."""

from __future__ import annotations

import abc
import dataclasses
import inspect
import sys
from typing import Any

import numpy as np

from xpml._backend import to_numpy
from xpml.utils.validation import check_is_fitted

__all__ = [
    "Members",
    "FitPredict",
    "Training",
    "fit_member",
    "member_predict",
    "joblib_for",
    "parallel_map",
    "progress_bar",
    "takes_sample_weight",
]


def joblib_for(n_jobs):
    """The ``joblib`` module where ``n_jobs`` asks for it, else None (the
    work then runs here, one task after another): not for ``n_jobs=1``, nor
    where joblib is not installed, nor for ``n_jobs=None`` (an active joblib
    backend's count, else one) before anything imported joblib, since no
    backend can be active then. Issue 16: importing joblib (with
    multiprocessing and asyncio) took 34-44 ms of a forest's first fit in a
    fresh process, a fit that then ran on one job anyway."""
    if n_jobs == 1 or (n_jobs is None and "joblib" not in sys.modules):
        return None
    try:
        import joblib
    except ImportError:  # joblib is optional: sequential fitting
        return None
    return joblib


def parallel_map(fn, tasks, *, n_jobs=None, progress=None, weights=None):
    """``[fn(t) for t in tasks]``, through joblib (threads, or the active
    joblib backend) where :func:`joblib_for` gives it, else one after another.

    ``progress`` (from :func:`progress_bar`) advances by ``weights[i]`` as task
    ``i`` finishes.
    """
    weights = weights if weights is not None else [1] * len(tasks)
    # n_jobs=None defers to joblib: one job, or the active backend's (e.g. the
    # dask backend of ``joblib.parallel_backend("dask")``, whose workers then
    # fit the members); ``prefer`` is only a hint where no backend is active
    joblib = joblib_for(n_jobs) if len(tasks) > 1 else None
    if joblib is None:
        out = []
        for t, w in zip(tasks, weights):
            out.append(fn(t))
            if progress is not None:
                progress.update(w)
        return out
    gen = joblib.Parallel(n_jobs=n_jobs, prefer="threads", return_as="generator")(
        joblib.delayed(fn)(t) for t in tasks
    )
    out = []
    for r, w in zip(gen, weights):
        out.append(r)
        if progress is not None:
            progress.update(w)
    return out


class _TextProgress:
    """A minimal progress line on stderr (used when tqdm is not installed)."""

    def __init__(self, total, desc):
        self.total, self.desc, self.n = total, desc, 0

    def update(self, k=1):
        self.n += k
        sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total}")
        sys.stderr.flush()

    def close(self):
        sys.stderr.write("\n")


def progress_bar(enabled, total, desc):
    """A tqdm bar (or a plain stderr counter without tqdm); None when disabled."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _TextProgress(total, desc)
    return tqdm(total=total, desc=desc)


# ----------------------------------------------------------- any member
class FitPredict(abc.ABC):  # noqa: B024 (a structural check, no methods to declare)
    """Any estimator with ``fit`` and ``predict`` methods: xpml's,
    scikit-learn's, a ``Pipeline`` (a constraint for ``estimator=``)."""

    @classmethod
    def __subclasshook__(cls, C):
        if all(callable(getattr(C, m, None)) for m in ("fit", "predict")):
            return True
        return NotImplemented


FitPredict.__name__ = "estimator with fit and predict methods"


def takes_sample_weight(est) -> bool:
    """Whether ``est.fit`` has a ``sample_weight`` parameter."""
    try:
        return "sample_weight" in inspect.signature(est.fit).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


@dataclasses.dataclass
class Training:
    """A call's arrays in the compute namespace, and (made once, when a
    member from another library needs them) their host NumPy copies."""

    ctx: Any
    X: Any
    y: Any = None
    _host: tuple | None = None

    def host(self):
        if self._host is None:
            y = None if self.y is None else to_numpy(self.y)
            self._host = (to_numpy(self.X), y)
        return self._host


def _is_xpml(est):
    from xpml.base import BaseEstimator

    return isinstance(est, BaseEstimator)


def fit_member(est, data, *, weight=None, rows=None):
    """Fit ``est``: with ``sample_weight=weight`` (device array), or on the
    rows ``rows`` (host indices, repeats allowed) when it has no sample
    weights. xpml members get the compute-namespace arrays, others NumPy."""
    if _is_xpml(est):
        X, y = data.X, data.y
        if rows is not None:
            idx = data.ctx.xp.asarray(rows, device=data.ctx.device)
            X, y = data.ctx.xp.take(X, idx, axis=0), data.ctx.xp.take(y, idx)
    else:
        X, y = data.host()
        if rows is not None:
            X, y = X[rows], y[rows]
        if weight is not None:
            weight = to_numpy(weight)
    if weight is None:
        return est.fit(X, y)
    return est.fit(X, y, sample_weight=weight)


def member_predict(est, data, method="predict"):
    """``est.predict`` (or another method) on ``data.X``, in the compute namespace."""
    if _is_xpml(est):
        return getattr(est, method)(data.X)
    out = np.asarray(getattr(est, method)(data.host()[0]))
    return data.ctx.xp.asarray(out, device=data.ctx.device)


class Members:
    """scikit-learn's ensemble container API over ``estimators_``: ``len``,
    indexing and iteration, each refused before ``fit``."""

    def __len__(self) -> int:
        """Number of fitted members (``len(ensemble)``, as scikit-learn)."""
        check_is_fitted(self, "estimators_")
        return len(self.estimators_)

    def __getitem__(self, index):
        """Fitted member(s) ``estimators_[index]``."""
        check_is_fitted(self, "estimators_")
        return self.estimators_[index]

    def __iter__(self):
        """The fitted members, in order."""
        check_is_fitted(self, "estimators_")
        return iter(self.estimators_)
