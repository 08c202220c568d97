"""Type aliases for the public API.

xpml takes arrays of any array-API library (NumPy, CuPy, PyTorch,
array-api-strict) and array-likes (lists, pandas DataFrames); there is no one
static type for them, so the aliases name the role:

* ``ArrayLike``: what a public method accepts (an array of any supported
  library, or something NumPy can convert);
* ``Array``: what it returns (an array of the caller's library);
* ``Self``: the estimator itself (``fit`` returns ``self``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

__all__ = ["Array", "ArrayLike", "Self"]

Array: TypeAlias = Any
ArrayLike: TypeAlias = Any

if TYPE_CHECKING:  # typing.Self is 3.11+; only type checkers read this
    from typing_extensions import Self
else:
    Self = Any
