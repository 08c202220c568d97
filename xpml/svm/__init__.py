"""Support vector machines: SVC on a vectorized SMO solver, LinearSVC by dual
coordinate descent."""

from xpml.svm._linear import LinearSVC
from xpml.svm._svc import SVC

__all__ = ["LinearSVC", "SVC"]
