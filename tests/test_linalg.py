"""Compact SVD and the pseudo-inverse, against NumPy, on every array library."""

import numpy as np
import pytest

from xpml.linalg import compact_svd, pinv


def _rank_deficient(rng, n=30, d=8, r=3):
    return rng.normal(size=(n, r)) @ rng.normal(size=(r, d))


def test_compact_svd_drops_zero_singular_values(xp, rng):
    A = _rank_deficient(rng)
    U, s, Vt = compact_svd(xp.asarray(A))
    assert xp.is_native(U) and xp.is_native(s)
    U, s, Vt = map(xp.to_numpy, (U, s, Vt))
    assert U.shape == (30, 3) and s.shape == (3,) and Vt.shape == (3, 8)
    np.testing.assert_allclose((U * s) @ Vt, A, atol=1e-12)
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(Vt @ Vt.T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(s, np.linalg.svd(A, compute_uv=False)[:3], rtol=1e-12)


@pytest.mark.parametrize(
    "shape,rank", [((30, 8), 3), ((8, 30), 8), ((10, 10), 10), ((6, 6), 0)]
)
def test_pinv_equals_numpy(xp, rng, shape, rank):
    n, d = shape
    A = _rank_deficient(rng, n, d, rank) if rank else np.zeros(shape)
    P = xp.to_numpy(pinv(xp.asarray(A)))
    np.testing.assert_allclose(P, np.linalg.pinv(A), atol=1e-10)
    # the four Penrose conditions
    np.testing.assert_allclose(A @ P @ A, A, atol=1e-10)
    np.testing.assert_allclose(P @ A @ P, P, atol=1e-10)
    np.testing.assert_allclose((A @ P).T, A @ P, atol=1e-10)
    np.testing.assert_allclose((P @ A).T, P @ A, atol=1e-10)


def test_rtol_cuts_small_singular_values(rng):
    A = np.diag([1.0, 1e-3, 1e-9])
    assert compact_svd(A)[1].shape == (3,)
    assert compact_svd(A, rtol=1e-6)[1].shape == (2,)
    np.testing.assert_allclose(pinv(A, rtol=1e-6), np.diag([1.0, 1e3, 0.0]))


@pytest.mark.parametrize("shifted", [False, True])
def test_right_singular_fast_path_agrees_with_portable(xp, shifted):
    """The R-factor path gives the thin SVD's singular values and axes, of
    ``A`` or (``shift``) of ``A`` less a row, which it never forms on NumPy;
    ``A`` is left as it was."""
    from xpml.linalg import right_singular, svd_flip

    A = np.random.default_rng(3).normal(size=(200, 12)) * np.logspace(0, 3, 12)
    A = A + 40.0 * shifted
    for B in (A, A[:20, :]):  # tall (R factor) and not tall (plain SVD)
        M = xp.asarray(B)
        mu = B.mean(axis=0) if shifted else None
        kw = {"shift": xp.asarray(mu)} if shifted else {}
        s1, V1 = right_singular(M, xp=xp.xp, fast=True, **kw)
        s2, V2 = right_singular(M, xp=xp.xp, fast=False, **kw)
        np.testing.assert_allclose(xp.to_numpy(s1), xp.to_numpy(s2), rtol=1e-12)
        _, V1 = svd_flip(None, V1, xp=xp.xp)
        _, V2 = svd_flip(None, V2, xp=xp.xp)
        np.testing.assert_allclose(xp.to_numpy(V1), xp.to_numpy(V2), atol=1e-10)
        ref = B - mu if shifted else B
        np.testing.assert_allclose(
            xp.to_numpy(s1), np.linalg.svd(ref, compute_uv=False), rtol=1e-12
        )
        np.testing.assert_array_equal(xp.to_numpy(M), B)


def test_blas_limit_reaches_numpys_blas_and_restores_it(monkeypatch):
    """The one-thread limit SVC's solve runs under acts on the BLAS NumPy
    calls (threadpoolctl's general search sees it at 1 inside, back after),
    whether the controller comes from NumPy's wheel or the general search;
    ``one_blas_thread`` reads an outer ``threadpool_limits`` the same way."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import xpml.linalg as L

    def numpy_blas_threads():
        info = threadpoolctl.threadpool_info()
        ours = [i for i in info if "numpy" in i["filepath"] and i["user_api"] == "blas"]
        return [i["num_threads"] for i in ours]

    for search in (True, False):
        L._blas_controller.cache_clear()
        if not search:
            monkeypatch.setattr(L, "_numpy_openblas", lambda threadpoolctl: [])
        with threadpoolctl.threadpool_limits(2):
            before = numpy_blas_threads()
            with L._single_threaded_blas(np):
                assert L.one_blas_thread(np)
                inside = numpy_blas_threads()
            assert numpy_blas_threads() == before
        assert inside and set(inside) == {1}
        with threadpoolctl.threadpool_limits(1):
            assert L.one_blas_thread(np)
    L._blas_controller.cache_clear()


def test_blas_controller_is_made_with_the_module():
    """The BLAS controller is built when ``xpml.linalg`` is imported (issue 16:
    not by the first call that limits BLAS), in a fresh interpreter."""
    pytest.importorskip("threadpoolctl")
    import subprocess
    import sys

    code = (
        "import xpml.linalg as L; i = L._blas_controller.cache_info(); "
        "print(i.misses, i.currsize, L._blas_controller() is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["1", "1", "True"]


def test_blas_limit_shared_by_overlapping_fits():
    """Two fits whose one-thread limits overlap without nesting (threads: the
    first leaves while the second still runs) leave BLAS as it was before
    either; one fit's restore does not undo the other's limit meanwhile."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import xpml.linalg as L

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        if L._single_threaded_blas(np) is None or L.one_blas_thread(np):
            pytest.skip("no BLAS thread control here")
        first, second = L._single_threaded_blas(np), L._single_threaded_blas(np)
        first.__enter__()
        second.__enter__()
        assert L.one_blas_thread(np)
        first.__exit__(None, None, None)
        assert L.one_blas_thread(np)  # the second fit still runs
        second.__exit__(None, None, None)
        assert not L.one_blas_thread(np)


def test_blas_lookup_skips_what_it_cannot_open():
    """NumPy's wheel OpenBLAS is looked up through threadpoolctl's internals:
    a file in ``numpy.libs`` the process has not loaded (opened without
    loading it: OSError) is skipped, and a threadpoolctl without those
    internals gives no controllers (the general search is used then; see the
    test above with the lookup empty)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import types

    import xpml.linalg as L

    real = threadpoolctl.OpenBLASController

    class Refusing:
        filename_prefixes = real.filename_prefixes

        def __init__(self, **kwargs):
            raise OSError("not loaded")

    if not L._numpy_openblas(threadpoolctl):
        pytest.skip("NumPy here is not a wheel with its own OpenBLAS")
    assert L._numpy_openblas(types.SimpleNamespace(OpenBLASController=Refusing)) == []
    assert L._numpy_openblas(types.SimpleNamespace()) == []


def test_scipy_blas_limited_to_one_thread_and_restored():
    """SciPy's own OpenBLAS (a wheel's ``scipy.libs``, apart from NumPy's) is at
    one thread inside the limit and as before after it (the blocked Cholesky of
    KernelRidge runs SciPy's trsm on host threads)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    pytest.importorskip("scipy.linalg")
    import xpml.linalg as L

    def scipy_blas_threads():
        info = threadpoolctl.threadpool_info()
        return [i["num_threads"] for i in info if "scipy.libs" in i["filepath"]]

    if not scipy_blas_threads():
        pytest.skip("SciPy not from a wheel with its own OpenBLAS")
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = scipy_blas_threads()
        with L._single_threaded_scipy_blas():
            assert set(scipy_blas_threads()) == {1}
        assert scipy_blas_threads() == before == [2]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "shape,rank,rows",
    [
        ((9000, 64), 64, None),  # the default blocks: several, threaded
        ((3001, 40), 40, 100),  # blocks of 100 rows; the stack blocked again
        ((997, 12), 5, 30),  # rank deficient, a short last block
        ((60, 9), 9, 40),  # one block: LAPACK's QR of the whole
        ((7, 9), 7, 4),  # wide
    ],
)
def test_tall_skinny_r_factor_is_lapacks_r_factor(shape, rank, rows, dtype):
    """The NumPy path's R (blocks of rows factored, their R factors stacked
    and factored again) is the R of LAPACK's Householder QR of the whole
    matrix, rows signed to a non-negative diagonal (the R of a full-rank
    matrix is then unique; for a rank-deficient one RᵀR = AᵀA still holds)."""
    from xpml.linalg import _r_factor_numpy, _tsqr_rows

    rng = np.random.default_rng(7)
    n, d = shape
    A = (rng.normal(size=(n, rank)) @ rng.normal(size=(rank, d))).astype(dtype)
    A[:, 0] *= 1e3  # badly scaled columns: no worse than LAPACK's
    R = _r_factor_numpy(A, xp=np, block_rows=rows)
    assert R.dtype == dtype and R.shape == (min(n, d), d)
    if rows is None:
        assert n > _tsqr_rows(d, A.dtype.itemsize)  # really blocked
    tol = 1e-12 if dtype == np.float64 else 2e-5
    scale = np.linalg.norm(A.astype(np.float64), 2)
    A64 = A.astype(np.float64)
    np.testing.assert_allclose(
        R.T.astype(np.float64) @ R, A64.T @ A64, atol=tol * scale**2
    )
    assert np.all(np.diag(R) >= 0) and np.allclose(np.tril(R, -1), 0)
    if rank == d:
        ref = np.linalg.qr(A, mode="r")
        ref = ref * np.where(np.diag(ref) < 0, -1, 1)[:, None]
        np.testing.assert_allclose(R, ref, atol=tol * 10 * scale)


def test_tall_skinny_r_factor_on_one_blas_thread_gives_the_same_r():
    """Under ``threadpool_limits(1)`` the blocks run one after the other,
    with the same result."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from xpml.linalg import _r_factor_numpy

    A = np.random.default_rng(1).normal(size=(2000, 6))
    R = _r_factor_numpy(A, xp=np, block_rows=64)
    with threadpoolctl.threadpool_limits(1):
        R1 = _r_factor_numpy(A, xp=np, block_rows=64)
    np.testing.assert_array_equal(R, R1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numpy_lapack_cholesky_solve_and_inverse(dtype):
    """numpy_potrf / numpy_potrs / numpy_trtri: NumPy's own OpenBLAS through
    ctypes on C-ordered matrices (sizes around the zeroing blocks of 128
    rows): the factor in place with the strict upper part zeroed, the solve
    with one and several right-hand sides, the triangular inverse in place;
    False for a matrix that is not positive definite or a singular factor;
    None, the input untouched, for what they do not take."""
    from xpml.linalg import numpy_lapack, numpy_potrf, numpy_potrs, numpy_trtri

    if numpy_lapack("potrf", np.dtype(dtype).char) is None:
        pytest.skip("this NumPy is not built on a wheel's OpenBLAS")
    rng = np.random.default_rng(7)
    tol = 1e-11 if dtype == np.float64 else 2e-4
    for n in (1, 127, 128, 300):
        G = rng.normal(size=(n, n))
        A = (G @ G.T / n + np.eye(n)).astype(dtype)
        L = A.copy()
        assert numpy_potrf(L) is True
        np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=0, atol=tol)
        assert not np.triu(L, 1).any()
        for B in (rng.normal(size=n), rng.normal(size=(n, 3))):
            X = numpy_potrs(L, B.astype(dtype))
            assert X.dtype == dtype and X.shape == B.shape
            np.testing.assert_allclose(A @ X, B, rtol=0, atol=50 * tol)
        Linv = L.copy()
        assert numpy_trtri(Linv) is True
        np.testing.assert_allclose(Linv @ L, np.eye(n), rtol=0, atol=50 * tol)
    A[5, 5] = -1.0
    assert numpy_potrf(A.copy()) is False
    singular = np.tril(np.ones((4, 4), dtype=dtype))
    singular[2, 2] = 0.0
    kept = singular.copy()
    assert numpy_trtri(singular) is False
    np.testing.assert_array_equal(singular, kept)  # found before any write
    assert numpy_potrf(np.empty((0, 0), dtype=dtype)) is True
    for bad in (
        np.ones((3, 2), dtype=dtype),
        np.asfortranarray(np.eye(3, dtype=dtype))[:, ::-1],
        np.eye(3, dtype=np.float16),
    ):
        kept = bad.copy()
        assert numpy_potrf(bad) is None and numpy_trtri(bad) is None
        np.testing.assert_array_equal(bad, kept)
    ro = np.eye(3, dtype=dtype)
    ro.flags.writeable = False
    assert numpy_potrf(ro) is None
    assert numpy_potrs(np.asfortranarray(np.eye(3, dtype=dtype) + 0.1), ro) is None


def test_gemm_row_pieces_stay_within_the_small_product_bound():
    """Gemm.row_pieces: the rows of an m x n x k product in as few even
    pieces (sizes differing by at most one) as keep m·n·k within the bound,
    in order and covering every row; one piece without a bound; never a
    piece of no rows. The bound is set by kernel name (SMALL_PRODUCT)."""
    from xpml.linalg import SMALL_PRODUCT, Gemm

    gemm = Gemm.__new__(Gemm)  # no routine needed for the arithmetic
    for m, n, k, bound, count in [
        (784, 32, 48, 10**6, 2),  # Conv2D's bench layer: 1,204,224
        (651, 32, 48, 10**6, 1),  # 999,936: within
        (784, 16, 96, 10**5, 13),
        (10, 3, 4, 1, 10),  # at most one piece a row
        (7, 3, 4, None, 1),
        (0, 3, 4, 10, 1),
    ]:
        gemm.small_product = bound
        pieces = gemm.row_pieces(m, n, k)
        assert len(pieces) == count
        starts = [sum(size for _, size in pieces[:i]) for i in range(len(pieces))]
        assert [start for start, _ in pieces] == starts  # in order, no gaps
        assert sum(p[1] for p in pieces) == m
        sizes = {p[1] for p in pieces}
        assert max(sizes) - min(sizes) <= 1 and (m == 0 or min(sizes) >= 1)
        if bound is not None and bound >= n * k:
            assert max(sizes) * n * k <= bound
    assert SMALL_PRODUCT.get("Haswell") is None and SMALL_PRODUCT["SkylakeX"] == 10**6


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numpy_gemm_reads_operands_where_they_lie(dtype):
    """numpy_gemm: CBLAS ``?gemm`` of NumPy's OpenBLAS on row-major operands
    given by address and leading dimension: a product into a fresh output,
    one accumulated into it (``beta=1``), ``Aᵀ B``, and operands that are
    views with rows longer than the matrix (leading dimension past the
    width), each equal to NumPy's product; None for another dtype."""
    from xpml.linalg import numpy_gemm

    gemm = numpy_gemm(np.dtype(dtype).char)
    if gemm is None:
        pytest.skip("this NumPy is not built on a wheel's OpenBLAS")
    assert gemm.dtype == dtype and numpy_gemm("e") is None and numpy_gemm("i") is None
    rng = np.random.default_rng(4)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    big = rng.normal(size=(9, 12)).astype(dtype)
    A, B = big[:7, 2:7], rng.normal(size=(5, 4)).astype(dtype)  # A: ld 12
    C = rng.normal(size=(7, 4)).astype(dtype)
    start = C.copy()

    def at(M, ld=None):
        return (M.ctypes.data, M.strides[0] // M.itemsize if ld is None else ld)

    gemm((7, 4, 5), at(A), at(B), at(C), beta=1.0)
    np.testing.assert_allclose(C, start + A @ B, rtol=tol, atol=tol)
    gemm((7, 4, 5), at(A), at(B), at(C))
    np.testing.assert_allclose(C, A @ B, rtol=tol, atol=tol)
    E = rng.normal(size=(7, 3)).astype(dtype)
    out = np.zeros((6, 8), dtype=dtype)  # Aᵀ E into a 5 x 3 corner
    gemm((5, 3, 7), at(A), at(E), at(out), trans_a=True)
    np.testing.assert_allclose(out[:5, :3], A.T @ E, rtol=tol, atol=tol)
    assert not out[5:].any() and not out[:, 3:].any()  # nothing past the corner
    from xpml.linalg import CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS

    direct = np.zeros((5, 3), dtype=dtype)  # the routine itself, CBLAS's arguments
    plain, order = CBLAS_NO_TRANS, CBLAS_ROW_MAJOR
    gemm.cblas(
        order, CBLAS_TRANS, plain, 5, 3, 7, 2.0, *at(A), *at(E), 0.0, *at(direct)
    )
    np.testing.assert_allclose(direct, 2 * A.T @ E, rtol=tol, atol=tol)
