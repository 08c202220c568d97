"""xpml: classical machine learning written once on the Python array API.

The same estimator runs on NumPy, CuPy, PyTorch (CPU or CUDA) and
array-api-strict; one switch moves an experiment::

    import xpml
    xpml.set_backend("torch", device="cuda")     # or: with xpml.backend("cupy"): ...

Subpackages follow scikit-learn's layout (``xpml.svm``, ``xpml.linear_model``,
``xpml.kernels``, ``xpml.metrics``, ...) and are imported on first use.
"""

import importlib

from xpml._backend import backend, bind_backend, get_backend, set_backend
from xpml._io import load

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "backend",
    "bind_backend",
    "get_backend",
    "set_backend",
    "load",
]

_SUBMODULES = {
    "base",
    "cluster",
    "decomposition",
    "discriminant_analysis",
    "ensemble",
    "exceptions",
    "kernel_approximation",
    "kernel_ridge",
    "kernels",
    "linalg",
    "linear_model",
    "metrics",
    "model_selection",
    "naive_bayes",
    "neighbors",
    "nn",
    "online",
    "parity",
    "svm",
    "tree",
    "utils",
    "testing",
    "bench",
    "demos",
}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"xpml.{name}")
    raise AttributeError(f"module 'xpml' has no attribute {name!r}")


def __dir__():
    return sorted(set(__all__) | _SUBMODULES)
