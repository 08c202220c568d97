"""Dask fits of xpml estimators, on the block engine of :mod:`xpml._dask`."""
