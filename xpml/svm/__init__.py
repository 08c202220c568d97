"""Support vector machines: SVC on a batched-working-set SMO solver with
shrinking; LinearSVC by trust-region Newton (squared hinge) and proximal-point
Newton on the dual (hinge)."""

from xpml.svm._linear import LinearSVC
from xpml.svm._svc import SVC

__all__ = ["LinearSVC", "SVC"]
