"""Compact SVD and the pseudo-inverse built from it.

The compact (reduced-rank) SVD keeps only the ``r`` singular values above a
relative cut-off, ``A ≈ U_r diag(s_r) V_rᵀ``; the Moore–Penrose pseudo-inverse
is then ``A⁺ = V_r diag(1/s_r) U_rᵀ``. Both are written on the array API and
run on any backend; results come back in the caller's library.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from xpml._backend import enter
from xpml.utils._array_api import (
    device,
    dispatch,
    eps,
    fast_path,
    is_numpy_namespace,
    portable,
    preload_namespace,
)
from xpml.utils.memory import prepare_thread_heap
from xpml.utils.validation import check_array

__all__ = ["compact_svd", "pinv", "svd_flip", "right_singular"]

# NumPy's array-API wrapper is built with the imports of the modules that use
# these helpers (PCA, k-means, k-NN), not by their first call (issue 16; see
# preload_namespace)
preload_namespace("numpy")


def _single_threaded_blas(xp):
    """A context limiting BLAS to one thread while NumPy runs many small, cache-
    sized matrix products (block-tiled distances); None for other backends or
    when threadpoolctl (installed with scikit-learn) is missing.

    Two BLAS threads on products this small mostly wait for each other, and on
    a loaded machine much worse; the tiled loops parallelise over blocks instead
    where they can."""
    if not is_numpy_namespace(xp):
        return None
    controller = _blas_controller()
    return None if controller is None else _shared_limit(controller)


def _single_threaded_scipy_blas():
    """A context limiting the OpenBLAS of a SciPy wheel (``scipy.libs``, apart
    from NumPy's) to one thread, for code that runs SciPy's BLAS / LAPACK calls
    on threads of its own; None when SciPy is not imported, not from a wheel,
    or threadpoolctl is missing."""
    if "scipy.linalg" not in sys.modules:  # never import SciPy here
        return None
    controller = _scipy_blas_controller()
    return None if controller is None else _shared_limit(controller, key="scipy")


# the one-thread limit is shared by the fits running at once (threads of one
# process): the first to enter sets it, the last to leave restores what was
# there before. Separate save-and-restore pairs would let a fit that entered
# second "restore" the first's limit of 1 and leave BLAS at one thread for good
_LIMIT_LOCK = threading.Lock()
_LIMITS = {key: {"depth": 0, "stack": None} for key in ("numpy", "scipy")}


@contextlib.contextmanager
def _shared_limit(controller, key="numpy"):
    state = _LIMITS[key]
    with _LIMIT_LOCK:
        if state["depth"] == 0:
            stack = contextlib.ExitStack()
            stack.enter_context(controller.limit(limits=1, user_api="blas"))
            state["stack"] = stack
        state["depth"] += 1
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            state["depth"] -= 1
            if state["depth"] == 0:
                stack, state["stack"] = state["stack"], None
                stack.close()


@functools.cache
def _blas_controller():
    """threadpoolctl's controller of NumPy's BLAS, made once; None when
    threadpoolctl is missing.

    A wheel's OpenBLAS (``numpy.libs``) is found by its file name: the general
    search (:class:`threadpoolctl.ThreadpoolController`) resolves the path of
    every shared library loaded in the process, 20–60 ms once per process with
    torch and scikit-learn loaded (issue 16: paid by the first SVC fit), where
    this costs about a millisecond. Any other build: the general search, kept
    to the BLAS libraries (never OpenMP: reading an OpenMP runtime's thread
    count can start it)."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    libs = _numpy_openblas(threadpoolctl)
    if libs:
        return _BlasThreads(libs)
    return threadpoolctl.ThreadpoolController().select(user_api="blas")


def _numpy_openblas(threadpoolctl):
    """Controllers of the OpenBLAS a NumPy wheel ships in ``numpy.libs``
    (empty when NumPy is not built on it, or not from a wheel)."""
    try:  # NumPy's internals: the general search otherwise
        blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
    except AttributeError:
        return []
    if "openblas" not in str(blas.get("name", "")):
        return []
    return _wheel_openblas(threadpoolctl, np.__file__, "numpy.libs")


@functools.cache
def _scipy_blas_controller():
    """Controller of the OpenBLAS a SciPy wheel ships in ``scipy.libs`` (its
    own, not NumPy's), made once; None when there is none or threadpoolctl is
    missing. Only called once SciPy is imported (a library not loaded fails)."""
    try:
        import scipy
        import threadpoolctl
    except ImportError:
        return None
    libs = _wheel_openblas(threadpoolctl, scipy.__file__, "scipy.libs")
    return _BlasThreads(libs) if libs else None


def _wheel_openblas(threadpoolctl, package_init, libs_dir):
    """Controllers of the OpenBLAS files in a wheel's ``<package>.libs`` folder,
    found by file name (threadpoolctl's internals)."""
    try:
        make = threadpoolctl.OpenBLASController
        prefixes = [p for p in make.filename_prefixes if p != "libblas"]
        where = os.path.dirname(os.path.dirname(package_init))
        names = sorted(os.listdir(os.path.join(where, libs_dir)))
    except (AttributeError, OSError):
        return []
    libs = []
    for name in names:
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None or ".so" not in name:
            continue
        try:  # opened without loading: a file the process has not loaded fails
            path = os.path.join(where, libs_dir, name)
            libs.append(make(filepath=path, prefix=prefix))
        except OSError:
            continue
    return libs


class _BlasThreads:
    """The part of threadpoolctl's controller xpml uses (``lib_controllers``
    and ``limit``) over given library controllers."""

    def __init__(self, libs):
        self.lib_controllers = libs

    @contextlib.contextmanager
    def limit(self, *, limits, user_api="blas"):
        libs = [c for c in self.lib_controllers if c.user_api == user_api]
        before = [c.get_num_threads() for c in libs]
        for c in libs:
            c.set_num_threads(limits)
        try:
            yield self
        finally:
            for c, n in zip(libs, before):
                c.set_num_threads(n)


# Made with the module, not by the first call that reads or limits BLAS threads
# (issue 16): opening the library handles costs ~1.7 ms of CPU in every new
# process (most of it ctypes building each handle's function class), a
# noticeable share of a first conv-layer step or k-d tree query (~25-50 ms).
# A failure here is left to the first use, which raises as before.
with contextlib.suppress(Exception):
    _blas_controller()


MAX_THREADS = 8
"""Most host threads a tiled NumPy loop uses (:func:`map_row_blocks`)."""

CPU_TILE_BYTES = 4 * 2**20
"""Workspace of one NumPy tile: cache-sized blocks beat large ones on the CPU
(measured on k-means and k-NN blocks); tiles never exceed the memory budget."""


def host_threads(xp) -> int:
    """Threads a tiled loop may use: the CPU count (at most :data:`MAX_THREADS`)
    on NumPy, 1 elsewhere (a device library runs one block at a time)."""
    return min(os.cpu_count() or 1, MAX_THREADS) if is_numpy_namespace(xp) else 1


def one_blas_thread(xp) -> bool:
    """Whether NumPy's BLAS is limited to one thread (threadpoolctl's
    ``threadpool_limits(1)``): the caller asks for one core, so tiled loops
    run their blocks one after the other. Shared by the k-means assignment and
    the brute neighbour search."""
    if not is_numpy_namespace(xp):
        return False
    controller = _blas_controller()
    if controller is None:
        return False
    counts = [c.num_threads for c in controller.lib_controllers if c.user_api == "blas"]
    return bool(counts) and max(counts) <= 1


def thread_pool(workers, name=""):
    """A ``ThreadPoolExecutor`` of ``workers`` threads that mark their heap
    for huge pages before their first task
    (:func:`xpml.utils.memory.prepare_thread_heap`): every host thread pool
    of xpml's tiled loops is made here."""
    return ThreadPoolExecutor(
        max_workers=workers, thread_name_prefix=name, initializer=prepare_thread_heap
    )


def map_row_blocks(fn, n, rows, /, *, xp):
    """``[fn(r0, r1) for each block]`` of ``rows`` rows out of ``n``, in order.

    On NumPy, with more than one block and more than one CPU, the blocks run on
    a thread pool (NumPy releases the GIL in its kernels) with BLAS limited to
    one thread meanwhile (two levels of threads would fight for the cores)."""
    bounds = [(r0, min(r0 + rows, n)) for r0 in range(0, n, rows)]
    threads = host_threads(xp)
    limits = _single_threaded_blas(xp) if threads > 1 and len(bounds) > 1 else None
    if limits is None:
        return [fn(r0, r1) for r0, r1 in bounds]
    with limits, thread_pool(threads) as pool:
        return list(pool.map(lambda b: fn(*b), bounds))


def _rank_cutoff(s, shape, dtype, rtol, *, xp):
    """Number of singular values above ``rtol · s_max`` (default ``max(n, d)·eps``)."""
    if rtol is None:
        rtol = max(shape) * eps(dtype, xp)
    if s.shape[0] == 0:
        return 0
    return int(xp.sum(xp.astype(s > rtol * s[0], xp.int64)))


def svd_flip(U, Vt, /, *, xp):
    """Deterministic signs: the largest-magnitude entry of each row of ``Vt`` is
    positive (scikit-learn's ``svd_flip(u_based_decision=False)``); ``U``'s
    columns (when ``U`` is not None) flip with them so ``U diag(s) Vt`` is
    unchanged."""
    k = Vt.shape[0]
    if k == 0:
        return U, Vt
    cols = xp.argmax(xp.abs(Vt), axis=1)
    picked = xp.take_along_axis(Vt, cols[:, None], axis=1)[:, 0]
    one = xp.ones((), dtype=Vt.dtype, device=device(Vt))
    signs = xp.where(picked < 0, -one, one)
    return (None if U is None else U * signs[None, :]), Vt * signs[:, None]


@portable("r_factor")
def r_factor(A, /, *, xp, block_rows=None):
    """``R`` of the reduced QR ``A = QR`` with a non-negative diagonal (the
    standard's ``qr`` also builds ``Q``, which is thrown away). For a full-
    rank ``A`` that ``R`` is unique, so every path gives the same one.
    ``block_rows``: the NumPy path's block size (:func:`_r_factor_numpy`);
    here ``A`` is factored at once."""
    return _positive_diagonal(xp.linalg.qr(A)[1], xp=xp)


def _positive_diagonal(R, /, *, xp):
    """``R`` with each row's sign flipped where its diagonal entry is
    negative (``diag(±1) R``: still an R factor of the same ``A``)."""
    k = min(int(R.shape[0]), int(R.shape[1]))
    if k == 0:
        return R
    dev = device(R)
    one = xp.ones((), dtype=R.dtype, device=dev)
    signs = xp.where(xp.linalg.diagonal(R[:k, :k]) < 0, -one, one)
    if k < int(R.shape[0]):  # rows past the diagonal are zero: kept as they are
        rest = xp.ones((int(R.shape[0]) - k,), dtype=R.dtype, device=dev)
        signs = xp.concat([signs, rest])
    return R * signs[:, None]


def _r_factor_example():
    A = np.random.default_rng(0).standard_normal((40, 6))
    return (A,), {"xp": None, "block_rows": 13}  # three blocks and a short one


#: bytes of one block of the NumPy path's tall-skinny QR (about a core's L2)
_TSQR_BLOCK_BYTES = 1 << 20


@fast_path("r_factor", "numpy", example=_r_factor_example)
def _r_factor_numpy(A, /, *, xp, block_rows=None):
    """``R`` alone (``mode="r"``: Householder reflections, ``Q`` never formed),
    for a tall ``A`` block by block (tall-skinny QR): the R factors of
    blocks of rows, stacked, have the R factor of ``A`` (``A = diag(Q_i)
    [R_1; R_2; …]``), and that stack is factored the same way until it is one
    block. LAPACK's Householder QR of the whole of a tall ``A`` reads all its
    rows once per panel of columns (memory-bound); a block that stays in
    cache is read from there. The blocks run one after another on one BLAS
    thread: two threads inside each block's small products, or blocks on two
    threads, were slower (bench/results/tsqr-2core.md)."""
    n, d = (int(s) for s in A.shape)
    rows = _tsqr_rows(d, A.dtype.itemsize) if block_rows is None else block_rows
    rows = max(int(rows), 2 * d, 1)
    if n <= rows or d == 0:
        return _positive_diagonal(np.linalg.qr(A, mode="r"), xp=np)
    limits = _single_threaded_blas(np) or contextlib.nullcontext()
    with limits:
        while n > rows:  # the stack of the blocks' R factors, until one block
            A = np.concatenate(_block_r_factors(A.shape, A.dtype, rows, _rows_of(A)))
            n = int(A.shape[0])
        return _positive_diagonal(np.linalg.qr(A, mode="r"), xp=np)


def _block_r_factors(shape, dtype, rows, fill):
    """The R factors of the blocks of ``rows`` rows of an ``(n, d)`` matrix
    whose rows ``r0 : r0 + len(out)`` ``fill(r0, out)`` writes into ``out``:
    each block is written into one buffer (Fortran order, as LAPACK works)
    and factored there by NumPy's own LAPACK (:func:`_numpy_geqrf`), else by
    ``np.linalg.qr``.

    ``np.linalg.qr`` makes two copies of its block per call; in a process
    whose allocator has only seen blocks that size, it hands their memory
    back after each call and faults it in again at the next: ~480 page faults
    per 1 MiB block, 19,000 and about 40 ms per ``LinearRegression`` fit at
    100,000 x 50 in a new process, every fit (session 14)."""
    n, d = (int(v) for v in shape)
    geqrf = _numpy_geqrf(np.dtype(dtype).char)
    buf = np.empty((d, min(rows, n)), dtype=dtype).T
    out = []
    for r0 in range(0, n, rows):
        block = buf[: min(rows, n - r0)]
        fill(r0, block)
        out.append(np.linalg.qr(block, mode="r") if geqrf is None else geqrf(block))
    return out


def _rows_of(A):
    """A ``fill`` for :func:`_block_r_factors`: copies the rows of ``A``."""

    def fill(r0, out):
        np.copyto(out, A[r0 : r0 + out.shape[0]])

    return fill


@functools.cache
def numpy_lapack(name, char):
    """LAPACK routine ``name`` without its type letter ("geqrf", "potrf") for
    dtype character ``char`` ("d": float64, "f": float32) from the OpenBLAS in
    NumPy's wheel, through ctypes (:class:`_Lapack`); None for another dtype
    or where that library or symbol is not found (other builds).

    The same library as NumPy's products: a LAPACK call right after them
    does not start a second pool of BLAS threads while theirs still spin
    (SciPy's ``potrf`` after NumPy's Gram products: 77 against 39 ms at
    n = 2,000 on two cores, session 15)."""
    found = _numpy_openblas_symbol(char, lambda pre, t, post: f"{pre}{t}{name}{post}")
    return None if found is None else _Lapack(*found)


def _numpy_openblas_symbol(char, symbol):
    """``(function, ctypes integer type)``: the routine of NumPy's wheel
    OpenBLAS named ``symbol(prefix, type letter, suffix)`` for dtype
    character ``char``, over the wheels' naming schemes (``_LAPACK_NAMES``);
    None for another dtype or where that library or symbol is not found."""
    letter = {"d": "d", "f": "s"}.get(char)
    try:
        import ctypes

        import threadpoolctl

        libs = _numpy_openblas(threadpoolctl) if letter else []
        handle = ctypes.CDLL(libs[0].filepath) if libs else None
    except (ImportError, OSError, AttributeError, IndexError):
        return None
    for prefix, suffix, int_t in _LAPACK_NAMES if handle is not None else ():
        fn = getattr(handle, symbol(prefix, letter, suffix), None)
        if fn is not None:
            return fn, getattr(ctypes, int_t)
    return None


@functools.cache
def numpy_gemm(char):
    """CBLAS ``?gemm`` of the OpenBLAS in NumPy's wheel for dtype character
    ``char`` ("d": float64, "f": float32), as a :class:`Gemm`; None for another
    dtype or where that library or symbol is not found (other builds).

    It reads operands where they lie, given by address and leading dimension,
    and accumulates into its output (``beta``): what ``np.matmul`` cannot do
    for a matrix whose rows overlap another's or a sum of products written in
    place (the kernel rows of a convolution, :mod:`xpml.nn.conv`)."""
    # CBLAS names carry the suffix without its leading underscore
    found = _numpy_openblas_symbol(
        char, lambda pre, t, post: f"{pre}cblas_{t}gemm{post[1:]}"
    )
    if found is None:
        return None
    small = SMALL_PRODUCT.get(_numpy_openblas_architecture())
    return Gemm(found[0], np.dtype(char), small)


#: OpenBLAS kernels (threadpoolctl's ``architecture``) with a faster path
#: for a product of at most this ``m·n·k`` (OpenBLAS's small-matrix kernels,
#: which skip packing the operands), and the bound. Measured with NumPy's
#: OpenBLAS 0.3.31 on the project's 2-core VM (AMD Zen 4, served with the
#: SkylakeX kernels), one thread, Conv2D's shapes (rows x 48 by 48 x 32;
#: rows x 96 by 96 x 16; the transposed 96 x rows by rows x 16): float32 at
#: 392-651 rows (m·n·k up to 999,936) 102-109 GF/s, at 784 rows (1,204,224)
#: 75-87 GF/s; float64 54-55 against 33-40 GF/s. With the Haswell or Zen
#: kernels (``OPENBLAS_CORETYPE``) the rate does not jump there (halving the
#: rows cost 1-5 %): no bound. Other AVX-512 kernels were not measured.
SMALL_PRODUCT = {"SkylakeX": 10**6}


def _numpy_openblas_architecture():
    """The kernels NumPy's OpenBLAS runs with (threadpoolctl's
    ``architecture``, e.g. "SkylakeX", "Haswell"); None where unknown."""
    try:
        import threadpoolctl

        libs = _numpy_openblas(threadpoolctl)
        return libs[0].architecture if libs else None
    except (ImportError, AttributeError, OSError):
        return None


#: CBLAS's enumerators (``cblas.h``) for :attr:`Gemm.cblas`
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112


class Gemm:
    """``C ← op(A) B + beta C`` for row-major operands of one dtype, each given
    as ``(address, leading dimension)`` in elements (:func:`numpy_gemm`).

    The caller owns the memory: the addresses must point into live arrays of
    :attr:`dtype` holding the ``m × k`` (``k × m`` with ``trans_a``), ``k × n``
    and ``m × n`` operands at those leading dimensions. ctypes releases the
    GIL for the call, so threads can run products side by side.

    :attr:`cblas` is the routine itself, with CBLAS's arguments (``order,
    op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc``; the
    ``CBLAS_*`` constants above): a loop making hundreds of small products
    calls it directly, ~0.5 µs a call less than through this wrapper.

    :attr:`small_product` is the largest ``m·n·k`` this OpenBLAS runs on its
    faster path for small products (:data:`SMALL_PRODUCT`; None where it has
    none or it was not measured): a product just above it runs faster as two
    below it (:meth:`row_pieces`)."""

    def __init__(self, fn, dtype, small_product=None):
        import ctypes

        real = ctypes.c_double if dtype == np.float64 else ctypes.c_float
        big, address, enum = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        fn.argtypes = [enum, enum, enum, big, big, big, real]
        fn.argtypes += [address, big, address, big, real, address, big]
        fn.restype = None
        self.cblas, self.dtype = fn, dtype
        self.small_product = small_product

    def row_pieces(self, m, n, k):
        """``[(start, rows), …]``: the ``m`` rows of an ``m × n × k`` product
        (or the ``m`` terms of its sum, for a ``k × m`` by ``m × n`` one) in as
        few even pieces as keep each within :attr:`small_product`; one piece
        where this OpenBLAS has no such bound (None)."""
        bound = self.small_product
        count = 1 if bound is None else max(1, min(m, -(-m * n * k // bound)))
        cuts = [p * m // count for p in range(count + 1)]
        return [(lo, hi - lo) for lo, hi in zip(cuts, cuts[1:])]

    def __call__(self, shape, a, b, c, *, trans_a=False, beta=0.0):
        """``shape = (m, n, k)``; ``a``, ``b``, ``c`` as ``(address, ld)``."""
        m, n, k = shape
        op_a = CBLAS_TRANS if trans_a else CBLAS_NO_TRANS
        order, op_b = CBLAS_ROW_MAJOR, CBLAS_NO_TRANS
        self.cblas(order, op_a, op_b, m, n, k, 1.0, *a, *b, beta, *c)


def _numpy_geqrf(char):
    """``geqrf(block) -> R``: LAPACK's ``dgeqrf`` / ``sgeqrf`` (``char`` "d" /
    "f") of the OpenBLAS in NumPy's wheel (:func:`numpy_lapack`), in place on a
    Fortran-ordered ``block`` (no copy of it); None where
    that library or symbol is not found (other builds: ``np.linalg.qr``)."""
    routine = numpy_lapack("geqrf", char)
    return None if routine is None else _Geqrf(routine, np.dtype(char))


def _square_in_place(A, dtype):
    """Whether ``A`` is a square, writeable, C-ordered matrix of ``dtype`` (the
    routines below read its memory as the Fortran-ordered ``Aᵀ``)."""
    return (
        A.ndim == 2
        and A.shape[0] == A.shape[1]
        and A.dtype == dtype
        and A.flags.c_contiguous
        and A.flags.writeable
    )


def numpy_potrf(A):
    """Cholesky in place by NumPy's OpenBLAS ``?potrf`` (:func:`numpy_lapack`):
    the lower triangle of the C-ordered symmetric ``A`` becomes the factor and
    its strict upper triangle zero (True); False when ``A`` is not positive
    definite (``A`` then partly overwritten); None, ``A`` untouched, where
    the routine is missing or ``A`` is not square, writeable and C-ordered."""
    routine = numpy_lapack("potrf", A.dtype.char)
    if routine is None or not _square_in_place(A, A.dtype):
        return None
    n = int(A.shape[0])
    if n and routine(b"U", n, A, n) != 0:  # C order: Aᵀ = A, upper U = Lᵀ
        return False
    _zero_strict_upper(A)
    return True


def numpy_potrs(L, B):
    """``(L Lᵀ)⁻¹ B`` by NumPy's OpenBLAS ``?potrs`` for the C-ordered lower
    factor ``L`` (from :func:`numpy_potrf`) and ``B`` (n,) or (n, k): a new
    array; None where the routine is missing or ``L`` is not C-ordered."""
    routine = numpy_lapack("potrs", L.dtype.char)
    if routine is None or L.ndim != 2 or not L.flags.c_contiguous:
        return None
    X = np.array(B, dtype=L.dtype, order="F", copy=True)
    n = int(L.shape[0])
    k = 1 if X.ndim == 1 else int(X.shape[1])
    if n and k and routine(b"U", n, k, L, n, X, n) != 0:  # pragma: no cover
        raise np.linalg.LinAlgError("potrs failed")  # only for invalid arguments
    return X


def numpy_trtri(L):
    """Invert the lower-triangular C-ordered ``L`` in place by NumPy's OpenBLAS
    ``?trtri`` (its strict upper triangle left as it is): True; False when
    ``L`` is singular; None where the routine is missing or ``L`` is not
    square, writeable and C-ordered."""
    routine = numpy_lapack("trtri", L.dtype.char)
    if routine is None or not _square_in_place(L, L.dtype):
        return None
    n = int(L.shape[0])
    return not n or routine(b"U", b"N", n, L, n) == 0


# symbol names of LAPACK routines in the OpenBLAS NumPy's wheels ship, all
# with 64-bit integers: NumPy 2 (scipy-openblas), then NumPy 1.26 (openblas64_).
# Names without a suffix are not tried: their integer width cannot be told
_LAPACK_NAMES = (("scipy_", "_64_", "c_int64"), ("", "_64_", "c_int64"))


class _Lapack:
    """One LAPACK routine of NumPy's OpenBLAS (:func:`numpy_lapack`):
    ``routine(*args) -> info``, with Python ints passed as its integers, bytes
    as its characters and arrays as pointers to their data; ``info`` is
    appended."""

    def __init__(self, fn, int_type):
        import ctypes

        self._fn, self._int, self._ct = fn, int_type, ctypes

    def __call__(self, *args):
        ct, info = self._ct, self._int(0)
        self._fn(*(self._arg(a) for a in args), ct.byref(info))
        return int(info.value)

    def _arg(self, a):
        if isinstance(a, bytes):
            return self._ct.c_char_p(a)
        if isinstance(a, int):
            return self._ct.byref(self._int(a))
        return self._ct.c_void_p(a.ctypes.data)


class _Geqrf:
    """``?geqrf`` on a Fortran-ordered block (see :func:`_numpy_geqrf`)."""

    def __init__(self, routine, dtype):
        self._routine, self._dtype = routine, dtype

    def __call__(self, block):
        m, d = (int(v) for v in block.shape)
        if (
            m == 0
            or d == 0
            or block.dtype != self._dtype
            or block.strides[0] != block.itemsize
        ):
            return np.linalg.qr(block, mode="r")
        # d x LAPACK's block size (32 here) for the blocked code; per call,
        # so that threads can share the routine (small: from the heap)
        work = np.empty(64 * d, dtype=self._dtype)
        tau = np.empty(min(m, d), dtype=self._dtype)
        lda = max(1, block.strides[1] // block.itemsize)
        info = self._routine(m, d, block, lda, tau, work, int(work.shape[0]))
        if info != 0:
            raise np.linalg.LinAlgError(f"geqrf failed (info={info})")
        return np.triu(block[: min(m, d)])


def _zero_strict_upper(A, block=128):
    """Zero the strict upper triangle of square ``A`` in place, a block of
    rows at a time (no index arrays of its size)."""
    n = A.shape[0]
    upper = np.triu(np.ones((block, block), dtype=bool), 1)
    for r0 in range(0, n, block):
        r1 = min(r0 + block, n)
        A[r0:r1, r1:] = 0
        diag = A[r0:r1, r0:r1]
        diag[upper[: r1 - r0, : r1 - r0]] = 0


def _tsqr_rows(d, itemsize):
    """Rows of one block of :func:`_r_factor_numpy`: about
    ``_TSQR_BLOCK_BYTES``, and at least ``8 d`` so that the stack of the
    blocks' factors is at most an eighth of ``A``."""
    return max(8 * d, _TSQR_BLOCK_BYTES // max(1, d * itemsize))


@portable("shifted_r_factor")
def shifted_r_factor(parts, shifts, /, *, xp, scale=None, block_rows=None):
    """``R`` (non-negative diagonal) of ``A = diag(scale) [P₁ − s₁ | P₂ − s₂ |
    …]``: the parts ``Pᵢ`` (n × dᵢ, one dtype) side by side, each column less
    its entry of ``sᵢ`` (dᵢ,; ``shifts=None``: no shift), each row times its
    entry of ``scale`` (n,; None: 1). A least-squares fit's centred, weighted ``[X | y]`` (see
    :func:`xpml.linear_model._base.pinv_solve`). Here ``A`` is formed and
    factored by :func:`r_factor_of`; ``block_rows``: the NumPy path's block
    size (:func:`_shifted_r_factor_numpy`)."""
    if shifts is not None:
        parts = [p - s[None, :] for p, s in zip(parts, shifts)]
    A = xp.concat(list(parts), axis=1)
    if scale is not None:
        A = A * scale[:, None]
    return r_factor_of(A, xp=xp)


def _shifted_r_factor_example():
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((41, 5)) + 3.0, rng.standard_normal((41, 2))
    shifts = (X.mean(axis=0), Y.mean(axis=0))
    scale = rng.uniform(0.5, 2.0, size=41)
    return ((X, Y), shifts), {"xp": None, "scale": scale, "block_rows": 13}


@fast_path("shifted_r_factor", "numpy", example=_shifted_r_factor_example)
def _shifted_r_factor_numpy(parts, shifts, /, *, xp, scale=None, block_rows=None):
    """The same ``R`` with ``A`` never formed: each block of rows (as in
    :func:`_r_factor_numpy`) is shifted and scaled into one buffer that stays
    in cache and factored there, and the stack of the blocks' R factors is
    reduced by :func:`_r_factor_numpy`. Forming ``A`` cost a fit on a tall
    ``X`` two copies of it (the centred ``X``, then ``[X | y]``): 80 MB
    written, 10 ms of a ``LinearRegression`` fit at 100,000 x 50 in a new
    process (110 against 100 ms, session 14)."""
    widths = [int(p.shape[1]) for p in parts]
    n, d = int(parts[0].shape[0]), sum(widths)
    dtype = parts[0].dtype
    rows = _tsqr_rows(d, dtype.itemsize) if block_rows is None else block_rows
    rows = max(int(rows), 2 * d, 1)
    edges = np.cumsum([0, *widths])

    def fill(r0, block):
        r1 = r0 + block.shape[0]
        for i, (part, c0, c1) in enumerate(zip(parts, edges[:-1], edges[1:])):
            if shifts is None:
                np.copyto(block[:, c0:c1], part[r0:r1])
            else:
                np.subtract(part[r0:r1], shifts[i], out=block[:, c0:c1])
        if scale is not None:
            block *= scale[r0:r1, None]

    if n == 0:
        return np.zeros((0, d), dtype=dtype)
    with _single_threaded_blas(np) or contextlib.nullcontext():
        stack = _block_r_factors((n, d), dtype, rows, fill)
    return _r_factor_numpy(np.concatenate(stack), xp=np, block_rows=rows)


def shifted_r_factor_of(parts, shifts, /, *, xp, scale=None):
    """:func:`shifted_r_factor` through the library's fast path when it has one."""
    return dispatch("shifted_r_factor", xp)(parts, shifts, xp=xp, scale=scale)


@fast_path("r_factor", "cupy", example=_r_factor_example)
def _r_factor_cupy(A, /, *, xp, block_rows=None):
    import cupy

    return _positive_diagonal(cupy.linalg.qr(A, mode="r"), xp=xp)


@fast_path("r_factor", "torch", example=_r_factor_example)
def _r_factor_torch(A, /, *, xp, block_rows=None):
    import torch

    return _positive_diagonal(torch.linalg.qr(A, mode="r")[1], xp=xp)


def r_factor_of(A, /, *, xp):
    """``R`` of the reduced QR of ``A``, through the library's fast path when it
    has one (:func:`r_factor`)."""
    return dispatch("r_factor", xp)(A, xp=xp)


def right_singular(A, /, *, xp, fast=True, shift=None):
    """Singular values and right singular vectors ``(s, Vt)`` of ``A`` (n, d),
    or of ``A − shift`` (each column less its entry of ``shift``, (d,)).

    For tall ``A`` (``n ≥ 2d``) the fast path takes the SVD of the ``d × d``
    factor ``R`` of ``A = QR`` (same ``s`` and ``Vt``; ``U`` is never formed,
    nor ``Q`` where the library's QR can skip it: :func:`r_factor`) — unlike
    eigen-decomposing ``AᵀA`` it does not square the condition number; a
    shift is applied block by block there (:func:`shifted_r_factor`: on
    NumPy, ``A − shift`` is never formed). The portable path
    (``fast=False``) is the thin SVD of ``A``. Signs are not fixed here (see
    :func:`svd_flip`).
    """
    n, d = A.shape
    if fast and n >= 2 * d:
        if shift is None:
            R = r_factor_of(A, xp=xp)
        else:
            R = shifted_r_factor_of((A,), (shift,), xp=xp)
        _, s, Vt = xp.linalg.svd(R, full_matrices=False)
        return s, Vt
    _, s, Vt = xp.linalg.svd(A if shift is None else A - shift, full_matrices=False)
    return s, Vt


def _compact_svd(A, /, *, xp, rtol=None):
    U, s, Vt = xp.linalg.svd(A, full_matrices=False)
    r = _rank_cutoff(s, A.shape, A.dtype, rtol, xp=xp)
    return U[:, :r], s[:r], Vt[:r, :]


def _pinv(A, /, *, xp, rtol=None):
    U, s, Vt = _compact_svd(A, xp=xp, rtol=rtol)
    return (Vt.T / s[None, :]) @ U.T


def compact_svd(A, *, rtol=None):
    """Compact SVD ``A = U diag(s) Vt`` with the zero singular values dropped.

    Parameters
    ----------
    A : array (n, d)
    rtol : float, optional
        Singular values ``<= rtol · s_max`` count as zero. Default
        ``max(n, d) · eps`` of ``A``'s dtype.

    Returns
    -------
    U : array (n, r)
    s : array (r,)
        Singular values in decreasing order, all above the cut-off.
    Vt : array (r, d)
        ``r`` is the numerical rank.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])   # rank 1
    >>> U, s, Vt = compact_svd(A)
    >>> U.shape, s.shape, Vt.shape
    ((3, 1), (1,), (1, 2))
    >>> bool(np.allclose(U * s @ Vt, A))
    True
    """
    ctx, (A,) = enter(A, names=("A",))
    A = check_array(A, xp=ctx.xp, name="A", requested=ctx.dtype)
    U, s, Vt = _compact_svd(A, xp=ctx.xp, rtol=rtol)
    return ctx.out(U), ctx.out(s), ctx.out(Vt)


def pinv(A, *, rtol=None):
    """Moore–Penrose pseudo-inverse ``A⁺ = V diag(1/s) Uᵀ`` from the compact SVD.

    Parameters
    ----------
    A : array (n, d)
    rtol : float, optional
        Relative cut-off for zero singular values (see :func:`compact_svd`).

    Returns
    -------
    A_pinv : array (d, n)

    Examples
    --------
    >>> import numpy as np
    >>> A = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    >>> bool(np.allclose(pinv(A), np.linalg.pinv(A)))
    True
    """
    ctx, (A,) = enter(A, names=("A",))
    A = check_array(A, xp=ctx.xp, name="A", requested=ctx.dtype)
    return ctx.out(_pinv(A, xp=ctx.xp, rtol=rtol))
