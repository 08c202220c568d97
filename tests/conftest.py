"""The cross-library test matrix.

``xp`` runs a test over numpy, read-only numpy, array_api_strict and torch (CPU);
cupy and torch-CUDA join when a GPU is present and are skipped with the reason
otherwise. ``XPML_TEST_LIBS=cupy,torch_cuda`` restricts the matrix (the GPU check
uses it).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import xpml
from xpml._backend import to_numpy

ALL_LIBS = (
    "numpy",
    "numpy_readonly",
    "array_api_strict",
    "torch",
    "cupy",
    "torch_cuda",
)


class Lib:
    """One array library under test: convert NumPy data in and results out."""

    def __init__(self, name):
        self.name = name
        self.backend = {"numpy_readonly": "numpy", "torch_cuda": "torch"}.get(
            name, name
        )
        self.device = "cuda" if name == "torch_cuda" else None
        self.xp = xpml.backend  # placeholder replaced below
        if self.backend == "numpy":
            import array_api_compat.numpy as xp
        elif self.backend == "torch":
            import array_api_compat.torch as xp
        elif self.backend == "cupy":
            import array_api_compat.cupy as xp
        else:
            import array_api_strict as xp
        self.xp = xp

    def asarray(self, a, dtype=None):
        """NumPy data (or a list) as an array of this library."""
        a = np.asarray(a, dtype=dtype)
        if self.name == "numpy":
            return a.copy()
        if self.name == "numpy_readonly":
            a = a.copy()
            a.flags.writeable = False
            return a
        if self.backend == "torch":
            import torch

            return torch.asarray(a.copy(), device=self.device)
        return self.xp.asarray(a)

    @staticmethod
    def to_numpy(a):
        return to_numpy(a)

    def is_native(self, a):
        """Whether ``a`` belongs to this library."""
        from xpml._backend import library_name

        return library_name(a) == self.backend

    def __repr__(self):
        return self.name


def _available(name):
    if name in ("numpy", "numpy_readonly"):
        return None
    if name == "array_api_strict":
        try:
            import array_api_strict  # noqa: F401
        except ImportError:
            return "array_api_strict is not installed"
        return None
    if name in ("torch", "torch_cuda"):
        try:
            import torch
        except ImportError:
            return "torch is not installed"
        if name == "torch_cuda" and not torch.cuda.is_available():
            return (
                "no CUDA GPU: torch-CUDA tests run by ci/gpu_check.sh on a GPU machine"
            )
        return None
    if name == "cupy":
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
        except Exception:
            return (
                "no CUDA GPU / cupy: cupy tests run by ci/gpu_check.sh on a GPU machine"
            )
        return None
    return f"unknown library {name}"


def _selected():
    env = os.environ.get("XPML_TEST_LIBS")
    return tuple(env.split(",")) if env else ALL_LIBS


@pytest.fixture(params=[n for n in ALL_LIBS if n in _selected()])
def xp(request):
    reason = _available(request.param)
    if reason:
        pytest.skip(reason)
    return Lib(request.param)


@pytest.fixture(autouse=True)
def _reset_backend():
    """Each test starts with no backend chosen and leaves none behind."""
    xpml.set_backend(None)
    yield
    xpml.set_backend(None)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_configure(config):
    """Under pytest-xdist each worker gets one BLAS / torch thread: the workers
    already fill the cores, and oversubscribed torch threads spin (tests never
    time anything, so this changes no result)."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
