"""Demos that reproduce the lecture notes' behaviours: ``xpml demo NAME``.

Each demo is a module here with ``NAME = "..."``, a one-line ``__doc__`` and
``main(argv) -> int``. Demos print their findings and, where matplotlib is
installed, save a PNG (``--out DIR``, default ``xpml-demo-output``).
"""

from __future__ import annotations

__all__ = ["discover", "plt_or_none", "out_dir"]


def discover():
    """``{demo name: module}`` for every demo module in this package."""
    import sys

    from xpml.utils.discovery import plugin_modules

    return plugin_modules(sys.modules[__name__], "NAME", "main")


def plt_or_none():
    """matplotlib.pyplot with the Agg backend, or None when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def out_dir(path=None):
    import os

    path = path or "xpml-demo-output"
    os.makedirs(path, exist_ok=True)
    return path
