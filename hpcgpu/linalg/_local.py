"""The local dense kernels of :mod:`hpcgpu.linalg`: one rank's LAPACK and BLAS, on the host or the device.

Every factorization and solver of the package calls these on its own blocks and panels; nothing else in
:mod:`hpcgpu.linalg` calls SciPy's or CuPy's LAPACK. The backend is picked here, once a call, by the side of the
array given: a device array (``hpcgpu._device.is_device_array``) goes to CuPy (cuSOLVER, cuBLAS), a host array
to SciPy's LAPACK and NumPy's BLAS (through :func:`hpcgpu._gemm.gemm`).

None of these communicates. Errors that LAPACK reports as ``info`` are returned, not raised: the caller makes
them global and agreed (a factorization's failing column is a fact about the global matrix).
"""

from __future__ import annotations

import ctypes

import numpy as np

from .. import _blas, _device, _gemm

__all__ = ["xp_of", "potrf", "trsm", "getrf", "getrs", "geqrf", "qr", "qr_r", "svd", "gemm_update"]

_TRANS = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2, "n": 0, "t": 1, "c": 2}


def xp_of(a):
    """The array module of ``a``: ``cupy`` for a device array, else ``numpy``."""
    return _device.cupy_or_none() if _device.is_device_array(a) else np


def _lapack(name: str, a):
    from scipy.linalg import lapack

    return lapack.get_lapack_funcs(name, (a,))


def _illegal(routine: str, info: int) -> None:
    """Raise where LAPACK reports an illegal argument (``info < 0``): a bug in hpcgpu, never the user's input."""
    if info < 0:
        raise ValueError(f"LAPACK's {routine}: argument {-info} was illegal")


def _tri(xp, a, lower: bool):
    """``a`` with the other triangle zero (a new array)."""
    return xp.tril(a) if lower else xp.triu(a)


def potrf(a, lower: bool):
    """Cholesky factor of a Hermitian positive definite block: ``a = L L^H`` (lower) or ``U^H U`` (upper).

    Not collective. Reads only the triangle ``lower`` names.

    Parameters
    ----------
    a : xp.ndarray, shape (n, n)
        float32, float64, complex64 or complex128; host or device. Not overwritten.
    lower : bool
        Factor the lower triangle (``L``) or the upper (``U``).

    Returns
    -------
    factor : xp.ndarray, shape (n, n)
        ``L`` or ``U``, the other triangle zero; ``a``'s dtype and side. Where ``info > 0`` only its leading
        ``info - 1`` columns are a factor.
    info : int
        LAPACK's: 0, or the 1-based order of the leading minor that is not positive definite.
    """
    n = a.shape[0]
    if n == 0:
        return a.copy(), 0
    if not _device.is_device_array(a):
        if a.flags.f_contiguous and not a.flags.c_contiguous:
            c, info = _lapack("potrf", a)(a, lower=bool(lower), clean=1, overwrite_a=0)
            return c, max(int(info), 0)
        # any other layout (a CyclicMatrix's padded rows, a strided view) as one C-ordered copy, factored in place:
        # f2py would copy it into Fortran order, and the factor come back Fortran-ordered (at n = 4096, one rank,
        # 0.52 s against 0.37 s for a C-ordered A)
        own = not a.flags.c_contiguous
        if own:
            a = np.ascontiguousarray(a)
        # LAPACK works in Fortran order: factor A^T (= conj(A), Hermitian) in the other triangle, whose factor
        # is the transpose of A's (A = L L^H gives A^T = (L^T)^H L^T), so the C-ordered factor comes without
        # a transposing copy back (a 4096 x 4096 one was 0.2-0.7 s of a one-rank factorization)
        c, info = _lapack("potrf", a)(a.T, lower=not lower, clean=1, overwrite_a=int(own))
        return c.T, max(int(info), 0)
    cupy = _device.cupy_or_none()
    import cupyx

    full = a if lower else a.conj().T  # cupy factors the lower triangle: A = L L^H, U = L^H
    try:
        with cupyx.errstate(linalg="raise"):
            low = cupy.linalg.cholesky(_hermitian_from(cupy, full, lower=True))
    except np.linalg.LinAlgError:
        # cuSOLVER's info is not returned by CuPy: find the failing minor on the host (a rare path)
        _, info = potrf(cupy.asnumpy(a), lower)
        return cupy.zeros_like(a), max(info, 1)
    return (low if lower else cupy.ascontiguousarray(low.conj().T)), 0


def _hermitian_from(xp, a, *, lower: bool):
    """The Hermitian matrix whose ``lower`` (or upper) triangle is ``a``'s; the diagonal's imaginary part kept."""
    t = xp.tril(a, -1) if lower else xp.triu(a, 1)
    return t + t.conj().T + xp.diag(xp.diagonal(a)) if a.shape[0] else a.copy()


def trsm(a, b, lower: bool, trans=0, unit_diagonal: bool = False, side: str = "L"):
    """Solve a triangular system with many right-hand sides: ``op(A) X = B`` (side "L") or ``X op(A) = B`` ("R").

    Not collective. BLAS's TRSM as SciPy's ``solve_triangular`` spells it.

    Parameters
    ----------
    a : xp.ndarray, shape (n, n)
        Triangular (only the triangle ``lower`` names is read).
    b : xp.ndarray, shape (n, k) for side "L", (k, n) for side "R"
        ``a``'s dtype and side. Not overwritten.
    lower : bool
    trans : {0, 1, 2, "N", "T", "C"}
        ``op(A)``: ``A``, ``A^T`` or ``A^H``.
    unit_diagonal : bool
        Take ``A``'s diagonal as ones (not read).
    side : {"L", "R"}

    Returns
    -------
    xp.ndarray
        ``X``, ``b``'s shape, C-contiguous.
    """
    t = _TRANS[trans]
    if b.size == 0:
        return b.copy()
    if side in ("R", "r"):
        if not _device.is_device_array(a):
            return _trsm_right_host(a, b, bool(lower), t, bool(unit_diagonal))
        # X op(A) = B  <=>  op(A)^T X^T = B^T (op N or T);  X A^H = B  <=>  A X^H = B^H
        if t == 2:
            return _conj_t(trsm(a, _conj_t(b), lower, 0, unit_diagonal))
        return trsm(a, b.T, lower, 1 - t, unit_diagonal).T.copy()
    if _device.is_device_array(a):
        from cupyx.scipy.linalg import solve_triangular
    else:
        from scipy.linalg import solve_triangular
    x = solve_triangular(a, b, trans=t, lower=bool(lower), unit_diagonal=bool(unit_diagonal), check_finite=False)
    return xp_of(x).ascontiguousarray(x)


def _trsm_right_host(a, b, lower: bool, t: int, unit: bool):
    """``X op(A) = B`` on the host by one BLAS TRSM on a C-ordered copy of ``b``.

    The copy's memory is ``B^T`` in Fortran order, and ``op(A)^T X^T = B^T`` is a left-side solve there
    (``op(A)^T`` is ``A^T``, ``A``, or ``conj(A)`` for ``t`` = 0, 1, 2), done in place. One copy of ``b``
    (SciPy's ``solve_triangular`` of the transposes made four: 0.085 s of a 0.54 s Cholesky at P = 2, n = 4096).
    """
    from scipy.linalg import blas

    x = np.array(b, order="C")  # X's memory: a copy, b is not overwritten
    if t == 2:
        a = a.conj()
    fn = blas.get_blas_funcs("trsm", (a, x))
    out = fn(1.0, a, x.T, side=0, lower=int(lower), trans_a=1 if t == 0 else 0, diag=int(unit), overwrite_b=1)
    if not np.shares_memory(out, x):  # f2py took a copy after all: X is its transpose
        return np.ascontiguousarray(out.T)
    return x


def _conj_t(a):
    return xp_of(a).ascontiguousarray(a.conj().T)


def getrf(a):
    """LU factorization with partial pivoting of a (tall) panel: ``P A = L U``. Not collective.

    Parameters
    ----------
    a : xp.ndarray, shape (m, n)
        Host or device. Not overwritten.

    Returns
    -------
    lu : xp.ndarray, shape (m, n)
        ``L`` (unit diagonal, not stored) below the diagonal, ``U`` on and above it; LAPACK's layout.
    piv : numpy.ndarray of int, shape (min(m, n),)
        0-based: row ``i`` was swapped with row ``piv[i]``, in order (on the host, also for a device ``a``).
    info : int
        LAPACK's: 0, or the 1-based index of the first exactly zero ``U[i, i]``.
    """
    m, n = a.shape
    if min(m, n) == 0:
        return a.copy(), np.zeros(0, np.int64), 0
    if not _device.is_device_array(a):
        lu, piv, info = _lapack("getrf", a)(a, overwrite_a=0)
        return lu, np.asarray(piv, np.int64), max(int(info), 0)
    import warnings

    cupy = _device.cupy_or_none()
    from cupyx.scipy.linalg import lu_factor

    with warnings.catch_warnings():  # CuPy warns of an exactly zero pivot; it is returned as info instead
        warnings.simplefilter("ignore")
        lu, piv = lu_factor(a, check_finite=False)
    d = cupy.asnumpy(cupy.diagonal(lu))
    zero = np.nonzero(d == 0)[0]
    return lu, np.asarray(cupy.asnumpy(piv), np.int64), int(zero[0]) + 1 if zero.size else 0


def getrs(lu, piv, b, trans: int = 0):
    """Solve ``op(A) X = B`` with :func:`getrf`'s factors of the whole ``A``. Not collective.

    Parameters
    ----------
    lu : xp.ndarray, shape (n, n)
        :func:`getrf`'s ``lu``, as it returned it (LAPACK's order).
    piv : numpy.ndarray of int, shape (n,)
        :func:`getrf`'s 0-based pivots.
    b : xp.ndarray, shape (n, nrhs)
        ``lu``'s dtype and side. Not overwritten.
    trans : {0, 1, 2}
        ``A``, ``A^T``, ``A^H``.

    Returns
    -------
    x : xp.ndarray, shape (n, nrhs), C-contiguous
    """
    if b.size == 0:
        return b.copy()
    if not _device.is_device_array(lu):
        x, info = _lapack("getrs", lu)(lu, np.asarray(piv, np.int32), b, trans=trans, overwrite_b=0)
        _illegal("getrs", info)
        return np.ascontiguousarray(x)
    cupy = _device.cupy_or_none()
    from cupyx.scipy.linalg import lu_solve

    return cupy.ascontiguousarray(lu_solve((lu, cupy.asarray(piv, dtype=cupy.int32)), b, trans=trans,
                                           check_finite=False))


def geqrf(a):
    """Householder QR of a block in LAPACK's compact form. Not collective.

    Parameters
    ----------
    a : xp.ndarray, shape (m, n)

    Returns
    -------
    qr : xp.ndarray, shape (m, n)
        ``R`` on and above the diagonal, the Householder vectors (unit leading entry, not stored) below.
    tau : xp.ndarray, shape (min(m, n),)
        The reflectors' scalars: ``H_i = I - tau_i v_i v_i^H``.
    """
    if min(a.shape) == 0:
        return a.copy(), xp_of(a).zeros(0, a.dtype)
    if not _device.is_device_array(a):
        qr_, tau, _work, _info = _lapack("geqrf", a)(a, overwrite_a=0)
        return qr_, tau
    cupy = _device.cupy_or_none()
    h, tau = cupy.linalg.qr(a, mode="raw")  # NumPy's raw form: the compact matrix transposed
    return cupy.ascontiguousarray(h.T), tau


QR_BAND = 1024
"""Rows of a tall host block that :func:`qr_r` factors at a time (at least the block's columns)."""


def qr_r(a, overwrite: bool = False):
    """R of a block's QR, ``min(m, n) x n``, upper triangular. Not collective.

    On the host a tall block (at least twice :data:`QR_BAND` rows and twice its columns) is factored a band of
    rows at a time, a sequential TSQR: LAPACK's ``geqrf`` of the first band, then ``tpqrt`` of ``[R; band]``
    for each next one (R upper triangular, the band dense: the structured QR of the pair). A band (1,024 x 201
    doubles, 1.6 MB) stays in the cache, where one ``geqrf`` over all ``m`` rows streams the block through
    memory for each of its panels. On one core here, against one blocked ``geqrf``: 200,000 x 201 float64
    0.475 s against 1.112 s, float32 0.265 s against 0.568 s; 100,000 x 201 complex128 0.710 s against
    1.398 s; 200,000 x 51 and 400,000 x 11 2.6 and 1.9x as fast; 40,000 x 1,000 1.2x. The flops are
    ``geqrf``'s (``2 m n^2``), and so is the backward stability (Householder reflections throughout); R's rows
    may differ from ``geqrf``'s in sign (R is unique up to them). A band is copied into a buffer in LAPACK's
    order, so ``a`` may have any strides and is never written. A shorter block is one ``geqrf`` call (SciPy's
    ``qr(mode="r")`` copies a C-ordered block into LAPACK's order and returns all ``m`` rows of the factored
    block, twice the block's bytes moved for an ``n x n`` result). On the device CuPy's ``qr(mode="r")``.

    Parameters
    ----------
    a : xp.ndarray, shape (m, n), or a list of host arrays with the same rows
        float32, float64, complex64 or complex128; host or device. A list is taken as its arrays side by side
        (``[A | B]``, ``n`` their total columns), never formed: each band is gathered from them.
    overwrite : bool
        The caller's scratch: a Fortran-ordered host ``a`` too short for bands is factored in place (its
        contents are lost).

    Returns
    -------
    r : xp.ndarray, shape (min(m, n), n)

    References
    ----------
    J. Demmel, L. Grigori, M. Hoemmen and J. Langou, "Communication-optimal parallel and sequential QR and LU
    factorizations", SIAM J. Sci. Comput. 34(1), 2012 (sequential TSQR, a flat tree); LAPACK's ``xLATSQR``
    does the same with ``xTPQRT``.
    """
    parts = a if isinstance(a, list) else [a]
    m, n = parts[0].shape[0], sum(p.shape[1] for p in parts)
    if _device.is_device_array(parts[0]):
        whole = parts[0] if len(parts) == 1 else _device.cupy_or_none().concatenate(parts, axis=1)
        return _device.cupy_or_none().linalg.qr(whole, mode="r")
    k = min(m, n)
    if k == 0:
        return np.zeros((0, n), dtype=parts[0].dtype)
    band = max(QR_BAND, n)
    if m >= 2 * band:
        return _qr_r_bands(parts, m, n, band)
    a = parts[0]
    if len(parts) > 1:
        a, overwrite = np.empty((m, n), dtype=a.dtype, order="F"), True
        _put(a, 0, m, parts)
    if not (overwrite and a.flags.f_contiguous):
        a = np.array(a, order="F")  # a copy of ours, in LAPACK's order, to factor in place
    return _geqrf_r(a)


def _geqrf_r(a):
    """R of a Fortran-ordered host ``a`` (``m x n``, ``min(m, n) >= 1``) by LAPACK's blocked ``geqrf`` in place."""
    geqrf = _lapack("geqrf", a)
    lwork = int(np.real(geqrf(a, lwork=-1, overwrite_a=True)[2][0]))  # a query: no copy of a, a unchanged
    out, _tau, _work, info = geqrf(a, lwork=max(lwork, 1), overwrite_a=True)  # f2py's default lwork: unblocked
    _illegal("geqrf", info)
    return np.triu(out[:min(a.shape)])


def _put(buf, lo: int, hi: int, parts) -> None:
    """``buf[:hi - lo] = [parts...][lo:hi]``: rows ``lo:hi`` of the parts side by side into ``buf``."""
    j = 0
    for p in parts:
        buf[:hi - lo, j:j + p.shape[1]] = p[lo:hi]
        j += p.shape[1]


def _qr_r_bands(parts, m: int, n: int, band: int):
    """R of ``[parts...]`` (``m x n``, ``m >= 2 band >= 2 n``) by ``geqrf`` of its first band, ``tpqrt`` after."""
    dtype = parts[0].dtype
    buf = np.empty((band, n), dtype=dtype, order="F")
    _put(buf, 0, band, parts)
    tpqrt = _lapack("tpqrt", buf)
    r = np.asfortranarray(_geqrf_r(buf))
    nb = min(n, 16 if n < 512 else 32)  # tpqrt's inner block: measured best at 11-1,000 columns here
    for lo in range(band, m, band):
        hi = min(lo + band, m)
        b = buf if hi - lo == band else np.empty((hi - lo, n), dtype=dtype, order="F")
        _put(b, lo, hi, parts)
        r, _b, _t, info = tpqrt(0, nb, r, b, overwrite_a=True, overwrite_b=True)
        _illegal("tpqrt", info)
    return np.triu(r)


def _qr_q_bands(a, band: int):
    """``(Q, R)`` of a host ``a`` (``m x n``, ``m >= 2 band >= 2 n``) by bands of rows: Q C-ordered (``m x n``).

    R as :func:`qr_r`'s bands (``geqrf`` of the first band, ``tpqrt`` of ``[R; band]`` after), keeping each
    band's reflectors (``V`` in the band's place, ``T``); then Q applied to ``[I; 0]`` from the last band back:
    ``tpmqrt`` of each band's ``(V, T)`` to ``[E; 0]`` gives that band's rows of Q and the next ``E``, and
    LAPACK's ``ormqr`` (``unmqr``) of the first band's reflectors to ``[E; 0]`` gives its rows. ``4 m n^2``
    flops for Q beside R's ``2 m n^2``, each band in the cache: at 200,000 x 200 float64 on one core 1.6 s
    against 2.75 s for SciPy's ``qr(mode="economic")`` (``geqrf`` and ``orgqr`` over the whole block). The
    bands' reflectors are kept until Q is formed: ``m n`` elements, as many as SciPy's copy of the block.
    """
    m, n = a.shape
    dtype = a.dtype
    first = np.array(a[:band], order="F")
    geqrf = _lapack("geqrf", first)
    lwork = int(np.real(geqrf(first, lwork=-1, overwrite_a=True)[2][0]))
    first, tau, _work, info = geqrf(first, lwork=max(lwork, 1), overwrite_a=True)
    _illegal("geqrf", info)
    r = np.asfortranarray(np.triu(first[:n]))
    tpqrt, tpmqrt = _lapack("tpqrt", first), _lapack("tpmqrt", first)
    nb = min(n, 16 if n < 512 else 32)
    kept = []
    for lo in range(band, m, band):
        hi = min(lo + band, m)
        r, v, t, info = tpqrt(0, nb, r, np.array(a[lo:hi], order="F"), overwrite_a=True, overwrite_b=True)
        _illegal("tpqrt", info)
        kept.append((lo, hi, v, t))
    q = np.empty((m, n), dtype=dtype)
    e = np.asfortranarray(np.eye(n, dtype=dtype))
    zero = np.empty((band, n), dtype=dtype, order="F")
    for lo, hi, v, t in reversed(kept):
        b = zero if hi - lo == band else np.empty((hi - lo, n), dtype=dtype, order="F")
        b[...] = 0
        e, b, info = tpmqrt(0, v, t, e, b, overwrite_a=True, overwrite_b=True)
        _illegal("tpmqrt", info)
        q[lo:hi] = b
    c = np.zeros((band, n), dtype=dtype, order="F")
    c[:n] = e
    ormqr = _lapack("unmqr" if dtype.kind == "c" else "ormqr", first)
    lwork = int(np.real(ormqr("L", "N", first, tau, c, -1)[1][0]))
    c, _work, info = ormqr("L", "N", first, tau, c, max(lwork, 1), overwrite_c=True)
    _illegal("ormqr", info)
    q[:band] = c
    return q, np.triu(r)


def qr(a, mode: str = "reduced"):
    """QR of a block, NumPy's modes. Not collective.

    Parameters
    ----------
    a : xp.ndarray, shape (m, n)
    mode : {"reduced", "complete", "r"}
        ``(Q, R)`` with ``Q`` (m, k), ``R`` (k, n), ``k = min(m, n)``; ``Q`` (m, m) and ``R`` (m, n); ``R``
        only, (k, n).

    Returns
    -------
    (Q, R) or R
    """
    if _device.is_device_array(a):
        return _device.cupy_or_none().linalg.qr(a, mode=mode)
    band = max(QR_BAND, a.shape[1])
    if mode == "reduced" and a.shape[0] >= 2 * band and a.shape[1]:
        return _qr_q_bands(a, band)
    import scipy.linalg

    out = scipy.linalg.qr(a, mode={"reduced": "economic", "complete": "full", "r": "r"}[mode], check_finite=False)
    return out[0][: min(a.shape)] if mode == "r" else out  # SciPy's mode "r" gives all m rows; NumPy's k


def svd(a, compute_uv: bool = True):
    """Thin SVD of a block: ``a = U diag(s) V^H``. Not collective.

    Parameters
    ----------
    a : xp.ndarray, shape (m, n)
    compute_uv : bool

    Returns
    -------
    (U, s, Vh) with ``U`` (m, k), ``s`` (k,) real, descending, ``Vh`` (k, n), ``k = min(m, n)``; or ``s`` alone.
    """
    if _device.is_device_array(a):
        return _device.cupy_or_none().linalg.svd(a, full_matrices=False, compute_uv=compute_uv)
    import scipy.linalg

    return scipy.linalg.svd(a, full_matrices=False, compute_uv=compute_uv, check_finite=False)


def _op(a, t: int):
    """``op(a)`` as an array BLAS takes (C-contiguous for a complex conjugate transpose, a view otherwise).

    A real matrix's conjugate transpose is its transpose, a view: copying it would cost 13 ms of a 0.44 s
    Cholesky of order 4096 at P = 2 (one copy per trailing GEMM).
    """
    if t == 0:
        return a
    if t == 1 or a.dtype.kind != "c":
        return a.T
    return xp_of(a).ascontiguousarray(a.conj().T)


def gemm_update(c, a, b, alpha=-1.0, *, trans_a=0, trans_b=0) -> None:
    """``C += alpha op(A) op(B)`` in place: the trailing update of a factorization. Not collective.

    Parameters
    ----------
    c : xp.ndarray, shape (m, n)
        Updated in place; may be a view with unit column stride (a trailing part of a rank's local array).
    a : xp.ndarray, shape (m, k) after ``op``
    b : xp.ndarray, shape (k, n) after ``op``
        ``c``'s dtype and side.
    alpha : scalar
    trans_a, trans_b : {0, 1, 2, "N", "T", "C"}
        ``op``: none, transpose, conjugate transpose.
    """
    if c.size == 0:
        return
    ta, tb = _TRANS[trans_a], _TRANS[trans_b]
    if (a.shape[0] if ta else a.shape[1]) == 0:
        return
    if not c.flags.c_contiguous and not _device.is_device_array(c) and _strided_gemm(a, ta, b, tb, c, alpha):
        return
    a, b = _op(a, ta), _op(b, tb)
    if c.flags.c_contiguous:
        _gemm.gemm(_contig(a), _contig(b), c, alpha=alpha, beta=1.0)
        return
    t = xp_of(c).empty(c.shape, c.dtype)
    _gemm.gemm(_contig(a), _contig(b), t, alpha=alpha, beta=0.0)
    c += t


def _contig(a):
    """``a`` as BLAS takes it: C- or Fortran-contiguous (a transposed view stays a view)."""
    if a.flags.c_contiguous or a.flags.f_contiguous:
        return a
    return xp_of(a).ascontiguousarray(a)


def _blas_operand(x, t: int):
    """``op(x)`` for a CBLAS GEMM in row-major order: ``(flag, ld, array)``, the array C-contiguous.

    A complex conjugate transpose of a C-contiguous ``x`` is BLAS's own (``CblasConjTrans``): no copy of the
    panel at each trailing update. Any other layout's conjugate transpose has no CBLAS flag and is copied.
    """
    if t == 2 and x.dtype.kind == "c":
        if x.flags.c_contiguous:
            return _blas._CONJ_TRANS, max(1, x.shape[1]), x
        x, t = _op(x, 2), 0
    x = _contig(x.T if t else x)
    if x.flags.c_contiguous:
        return _blas._NO_TRANS, max(1, x.shape[1]), x
    return _blas._TRANS, max(1, x.shape[0]), x.T


def _strided_gemm(a, ta: int, b, tb: int, c, alpha) -> bool:
    """NumPy's CBLAS GEMM ``C += alpha op(A) op(B)`` into a row-strided view ``c`` (``ldc``: its row stride).

    ``ta``, ``tb``: 0 none, 1 transpose, 2 conjugate transpose. False when it cannot (then nothing is done): no
    CBLAS bound, another dtype, or ``c``'s columns not contiguous.
    """
    lib = _blas.numpy_blas()
    item = c.itemsize
    if (lib is None or not lib.gemms or c.dtype not in _blas._TYPES or not a.dtype == b.dtype == c.dtype
            or c.strides[1] != item or c.strides[0] % item or c.strides[0] < c.shape[1] * item):
        return False
    (fa, lda, a), (fb, ldb, b) = _blas_operand(a, ta), _blas_operand(b, tb)
    m, n = c.shape
    k = a.shape[0] if fa != _blas._NO_TRANS else a.shape[1]
    t, scalar = _blas._TYPES[c.dtype]
    I = lib.int_t  # noqa: E741
    buf = np.array([alpha, 1.0], dtype=c.dtype)
    if scalar is not None:
        al, be = scalar(buf[0]), scalar(buf[1])
    else:  # complex: alpha and beta by pointer
        al, be = ctypes.c_void_p(buf.ctypes.data), ctypes.c_void_p(buf.ctypes.data + buf.itemsize)
    lib.gemms[t](_blas._ROW_MAJOR, fa, fb, I(m), I(n), I(k), al, ctypes.c_void_p(a.ctypes.data), I(lda),
                 ctypes.c_void_p(b.ctypes.data), I(ldb), be, ctypes.c_void_p(c.ctypes.data),
                 I(c.strides[0] // item))
    return True
