"""Backend parity: fit one estimator on several backends and compare everything.

>>> import numpy as np
>>> from xpml.linear_model import LinearRegression
>>> X = np.random.default_rng(0).normal(size=(30, 3)); y = X @ np.array([1.0, -2.0, 0.5])
>>> report = compare(LinearRegression(), X, y, backends=("numpy", "array_api_strict"))
>>> report.max_rel_diff() < 1e-10
True
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from xpml._backend import backend, to_numpy
from xpml.base import clone
from xpml.utils._tree import tree_leaves

__all__ = ["compare", "ParityReport", "fitted_arrays", "DEFAULT_METHODS"]

DEFAULT_METHODS = (
    "predict",
    "predict_proba",
    "decision_function",
    "transform",
    "score_samples",
)


def _parse(spec):
    name, _, device = spec.partition(":")
    if name == "torch" and device.startswith("cuda"):
        return name, device
    if name == "cupy":
        return name, int(device) if device else None
    return name, device or None


_ATTR = re.compile(r"(?:^|\.)([A-Za-z_][A-Za-z0-9_]*)")


def _is_fitted_path(path):
    """Every attribute named on the path is a fitted one (``name_``, not
    ``_private``); numbers count only as attributes, not inside containers."""
    names = _ATTR.findall(path)
    return all(n.endswith("_") and not n.startswith("_") for n in names)


def fitted_arrays(est, prefix=""):
    """Every learned array (and number) of a fitted estimator, as NumPy, by
    attribute path; nested estimators and containers are walked by
    :func:`xpml.utils._tree.tree_leaves` (one rule for what is state)."""
    out = {}
    for path, leaf in tree_leaves(est, prefix=prefix, numbers_too=True):
        if not _is_fitted_path(path):
            continue
        if isinstance(leaf, (int, float, np.number)):
            if path.endswith("]"):
                continue
            out[path] = np.asarray(leaf)
            continue
        a = to_numpy(leaf)
        if a.dtype.kind in "biuf":
            out[path] = np.asarray(a)
    return out


@dataclasses.dataclass
class ParityReport:
    """Differences of each backend's results from the reference backend's.

    ``diffs[backend][item] = (max_abs, max_rel)``; items are
    ``"predict"``-style method outputs and ``"attr:<name>"`` fitted arrays.
    ``missing`` lists items present on one side only.
    """

    reference: str
    diffs: dict
    missing: dict
    results: dict

    def max_abs_diff(self):
        return max((a for d in self.diffs.values() for a, _ in d.values()), default=0.0)

    def max_rel_diff(self):
        return max((r for d in self.diffs.values() for _, r in d.values()), default=0.0)

    def assert_close(self, rtol=1e-8, atol=0.0, exact=("predict",)):
        """Raise AssertionError naming each item beyond ``atol + rtol·|ref|``;
        items in ``exact`` must be equal (e.g. class predictions)."""
        problems = [
            f"{b}: {item} missing"
            for b, items in self.missing.items()
            for item in items
        ]
        ref = self.results[self.reference]
        for b, d in self.diffs.items():
            for item, (a, _) in d.items():
                r = ref[item]
                if item in exact and r.dtype.kind not in "f":
                    if not np.array_equal(self.results[b][item], r):
                        problems.append(f"{b}: {item} differs")
                    continue
                bound = atol + rtol * float(np.max(np.abs(r))) if r.size else atol
                if a > bound:
                    problems.append(f"{b}: {item} max abs diff {a:.3g} > {bound:.3g}")
        if problems:
            raise AssertionError("backend parity failed:\n  " + "\n  ".join(problems))
        return self

    def __str__(self):
        lines = [f"parity against {self.reference}:"]
        for b, d in self.diffs.items():
            for item, (a, r) in sorted(d.items()):
                lines.append(f"  {b:>18}  {item:<30} abs {a:.3g}  rel {r:.3g}")
        return "\n".join(lines)


def _run(estimator, X, y, spec, *, methods, fit_params, dtype):
    name, device = _parse(spec)
    est = clone(estimator)
    with backend(name, device=device, dtype=dtype):
        est.fit(X, y, **fit_params) if y is not None else est.fit(X, **fit_params)
        res = {}
        for m in methods:
            if hasattr(est, m):
                try:
                    res[m] = to_numpy(getattr(est, m)(X))
                except (AttributeError, NotImplementedError):
                    continue
    for k, v in fitted_arrays(est).items():
        res[f"attr:{k}"] = v
    return res


def compare(
    estimator,
    X,
    y=None,
    *,
    backends=("numpy", "array_api_strict", "torch"),
    reference=None,
    methods=DEFAULT_METHODS,
    dtype=None,
    fit_params=None,
):
    """Fit a clone of ``estimator`` under each backend and compare the results.

    Parameters
    ----------
    estimator : xpml estimator (unfitted; it is cloned)
    X, y : NumPy arrays
    backends : names, optionally with a device (``"torch:cuda"``, ``"cupy:0"``)
    reference : the backend the others are compared with (default: the first)
    methods : methods called on ``X`` after fitting when the estimator has them
    dtype : "float32" or "float64" for every backend, or None

    Returns
    -------
    ParityReport
    """
    fit_params = fit_params or {}
    reference = reference or backends[0]
    results = {
        b: _run(estimator, X, y, b, methods=methods, fit_params=fit_params, dtype=dtype)
        for b in backends
    }
    ref = results[reference]
    diffs, missing = {}, {}
    for b, res in results.items():
        if b == reference:
            continue
        d = {}
        missing[b] = sorted(set(ref) ^ set(res))
        for item in set(ref) & set(res):
            r, o = ref[item].astype(np.float64), res[item].astype(np.float64)
            if r.shape != o.shape:
                d[item] = (float("inf"), float("inf"))
                continue
            a = float(np.max(np.abs(r - o))) if r.size else 0.0
            scale = float(np.max(np.abs(r))) if r.size else 0.0
            d[item] = (a, a / scale if scale > 0 else a)
        diffs[b] = d
    return ParityReport(reference, diffs, missing, results)
