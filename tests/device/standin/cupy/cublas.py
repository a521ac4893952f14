"""Stand-in for ``cupy.cublas``: ``gemm`` as CuPy calls cuBLAS, with cuBLAS's argument rules.

``gemm`` derives m, n, k, the leading dimensions and the transposes exactly
as ``cupy/cublas.py`` does (``_decide_ld_and_trans``: an F-contiguous operand
has ``ld = shape[0]``, a C-contiguous one ``ld = shape[1]`` and the opposite
transpose; C-ordered output computes ``out.T = b.T @ a.T`` with the operands
swapped; anything else is copied to Fortran order). The call that would go to
cuBLAS is then checked against cuBLAS's documented rules (``m, n, k >= 0``,
``lda >= max(1, rows of A as stored)``, same for ``ldb``, ``ldc >= max(1, m)``)
and raises ``CUBLASError: CUBLAS_STATUS_INVALID_VALUE`` where cuBLAS would
return it: an empty block handed straight to ``gemm`` has ``ld = 0``. The
product is computed from the column-major memory the call describes, as a
kernel (queued on the current stream). ``beta == 0`` does not read ``out``.
"""

from __future__ import annotations

import numpy

from cupy import _core, _standin
from cupy._core import ndarray
from cupy.cuda import cublas, device
from cupy.cuda import stream as _stream

__all__ = ["gemm"]

_OP_NAMES = {0: "N", 1: "T", 2: "C"}
_INT_MAX = 2**31 - 1


def _trans_to_cublas_op(trans):
    if trans == "N" or trans == cublas.CUBLAS_OP_N:
        return cublas.CUBLAS_OP_N
    if trans == "T" or trans == cublas.CUBLAS_OP_T:
        return cublas.CUBLAS_OP_T
    if trans == "H" or trans == cublas.CUBLAS_OP_C:
        return cublas.CUBLAS_OP_C
    raise TypeError("invalid trans (actual: {})".format(trans))


def _decide_ld_and_trans(a, trans):
    ld = None
    if trans in (cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T):
        if a._f_contiguous:
            ld = a.shape[0]
        elif a._c_contiguous:
            ld = a.shape[1]
            trans = 1 - trans
    return ld, trans


def _change_order_if_necessary(a, lda):
    if lda is None:
        lda = a.shape[0]
        if not a._f_contiguous:
            a = a.copy(order="F")
    return a, lda


def _get_scalar(x, dtype):
    if isinstance(x, ndarray):
        if x.dtype != dtype:
            x = _core.array(x, dtype=dtype)
        return x  # pointer mode device: read when the kernel runs
    if not (isinstance(x, numpy.ndarray) and x.dtype == dtype):
        x = numpy.array(x, dtype=dtype)
    return x


def _colmajor(a: ndarray, rows: int, cols: int, ld: int) -> numpy.ndarray:
    """The column-major ``rows x cols`` matrix with leading dimension ``ld`` at ``a``'s first byte."""
    if rows == 0 or cols == 0:
        return numpy.empty((rows, cols), a.dtype)
    al, isz = a._alloc, a.itemsize
    if a.size == 0:
        raise _standin.CUDARuntimeError(700)
    start = a._f.__array_interface__["data"][0] - al.future.__array_interface__["data"][0]
    end = start + ((cols - 1) * ld + rows) * isz
    if start < 0 or end > al.nbytes:
        raise _standin.CUDARuntimeError(700)  # the kernel would read or write outside the allocation
    base = al.future[start:end].view(a.dtype)
    return numpy.lib.stride_tricks.as_strided(base, shape=(rows, cols), strides=(isz, ld * isz))


def _xgemm(char, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, user):
    """One ``cublas<t>gemm`` call on stand-in memory (column-major, as cuBLAS sees it)."""
    for v in (m, n, k, lda, ldb, ldc):
        if v > _INT_MAX:
            raise OverflowError("value too large to convert to int")
    if (transa not in _OP_NAMES or transb not in _OP_NAMES or m < 0 or n < 0 or k < 0
            or lda < max(1, m if transa == cublas.CUBLAS_OP_N else k)
            or ldb < max(1, k if transb == cublas.CUBLAS_OP_N else n)
            or ldc < max(1, m)):
        raise cublas.CUBLASError(cublas.CUBLAS_STATUS_INVALID_VALUE)
    scalars = [x for x in (alpha, beta) if isinstance(x, ndarray)]
    _core._begin([A, B, C] + scalars, compile=False)
    alpha = alpha._f[()] if isinstance(alpha, ndarray) else alpha[()]
    beta = beta._f[()] if isinstance(beta, ndarray) else beta[()]
    mode = cublas.getMathMode(device.get_cublas_handle())
    tf32 = mode == cublas._TF32_TENSOR_OP_MATH and char in "fF"  # cuBLAS: TF32 for single precision only
    _standin.log_gemm({
        "api": "gemm", "dtype": str(numpy.dtype(char)), "m": user[0], "n": user[1], "k": user[2],
        "compute_type": ("CUBLAS_COMPUTE_64F" if char in "dD" else
                         "CUBLAS_COMPUTE_32F_FAST_TF32" if tf32 else "CUBLAS_COMPUTE_32F"),
        "math_mode": cublas.MATH_NAMES[mode], "alpha": complex(alpha).real if char in "fd" else alpha,
        "beta": complex(beta).real if char in "fd" else beta,
        "call": (f"cublas{char.lower() if char in 'fd' else {'F': 'c', 'D': 'z'}[char]}gemm",
                 _OP_NAMES[transa], _OP_NAMES[transb], m, n, k, lda, ldb, ldc),
    })
    if m == 0 or n == 0:
        return  # quick return: nothing referenced
    a_cm = _colmajor(A, *((m, k) if transa == cublas.CUBLAS_OP_N else (k, m)), lda)
    b_cm = _colmajor(B, *((k, n) if transb == cublas.CUBLAS_OP_N else (n, k)), ldb)
    c_cm = _colmajor(C, m, n, ldc)
    # CuPy's cublas.sgemm & co. set the handle's stream to the current one first (refused under a capture)
    cublas.setStream(device.get_cublas_handle(), _stream.get_current_stream().ptr)
    op = {0: lambda x: x, 1: lambda x: x.T, 2: lambda x: x.conj().T}
    if k == 0 or alpha == 0:
        prod = numpy.zeros((m, n), C.dtype)
    else:
        if tf32:
            a_cm, b_cm = _core._tf32(a_cm), _core._tf32(b_cm)
        # contiguous operands: NumPy's BLAS, as the stand-in's matmul (a strided product is NumPy's own loop,
        # whose float32 rounding is several times a BLAS's)
        prod = alpha * (numpy.ascontiguousarray(op[transa](a_cm)) @ numpy.ascontiguousarray(op[transb](b_cm)))
    if beta == 0:
        c_cm[...] = prod  # C is not read (may hold NaN)
    else:
        c_cm[...] = prod + beta * c_cm
    _core._end([ndarray._view(C._alloc, c_cm, None)])


def _cuda_dtype(code: int) -> numpy.dtype:
    if code == 0:
        return numpy.dtype(numpy.float32)
    if code == 1:
        return numpy.dtype(numpy.float64)
    if code == 2:
        return numpy.dtype(numpy.float16)
    if code == 14:
        import ml_dtypes  # CuPy's bfloat16 is ml_dtypes' (CuPy >= 14)

        return numpy.dtype(ml_dtypes.bfloat16)
    raise cublas.CUBLASError(cublas.CUBLAS_STATUS_NOT_SUPPORTED)


# cublasGemmEx (cuBLAS documentation, "cublasGemmEx"): compute type -> (A/B type, C type) it takes.
_GEMM_EX = {68: {(0, 0), (2, 2), (2, 0), (14, 14), (14, 0)},  # CUBLAS_COMPUTE_32F
            77: {(0, 0)},  # CUBLAS_COMPUTE_32F_FAST_TF32
            70: {(1, 1)}}  # CUBLAS_COMPUTE_64F


def _pointer_matrix(ptr: int, dtype, rows: int, cols: int, ld: int):
    """The column-major ``rows x cols`` matrix at device address ``ptr``: (ndarray view, numpy view)."""
    al, off = _standin.find_pointer(int(ptr))
    isz = dtype.itemsize
    end = off + ((cols - 1) * ld + rows) * isz
    if end > al.nbytes:
        raise _standin.CUDARuntimeError(700)
    base = al.future[off:end].view(dtype)
    view = numpy.lib.stride_tricks.as_strided(base, shape=(rows, cols), strides=(isz, ld * isz))
    return ndarray._view(al, view, None), view


def _gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
             compute, algo) -> None:
    """``cublasGemmEx`` with host-pointer ``alpha``, ``beta``: read now (a capture keeps their values)."""
    import ctypes

    if compute not in _GEMM_EX:
        raise cublas.CUBLASError(cublas.CUBLAS_STATUS_NOT_SUPPORTED)
    scalar = ctypes.c_double if compute == cublas.CUBLAS_COMPUTE_64F else ctypes.c_float
    al, be = scalar.from_address(alpha).value, scalar.from_address(beta).value
    _gemm_ex_values(handle, transa, transb, m, n, k, al, A, Atype, lda, B, Btype, ldb, be, C, Ctype, ldc,
                    compute, algo)


def _on_handle_stream(handle, *args, **kwargs):
    return cublas.handle_stream(handle)


@_standin.replayable(stream_of=_on_handle_stream)
def _gemm_ex_values(handle, transa, transb, m, n, k, al, A, Atype, lda, B, Btype, ldb, be, C, Ctype, ldc,
                    compute, algo) -> None:
    """The kernel of ``cublasGemmEx``, on the handle's stream (cuBLAS never sets it itself)."""
    if Atype != Btype or (Atype, Ctype) not in _GEMM_EX[compute]:
        raise cublas.CUBLASError(cublas.CUBLAS_STATUS_NOT_SUPPORTED)
    if (transa not in _OP_NAMES or transb not in _OP_NAMES or min(m, n, k) < 0
            or lda < max(1, m if transa == cublas.CUBLAS_OP_N else k)
            or ldb < max(1, k if transb == cublas.CUBLAS_OP_N else n) or ldc < max(1, m)):
        raise cublas.CUBLASError(cublas.CUBLAS_STATUS_INVALID_VALUE)
    at, ct = _cuda_dtype(Atype), _cuda_dtype(Ctype)
    _standin.log_gemm({
        "api": "gemmEx", "dtype": at.name, "c_dtype": ct.name, "m": n, "n": m, "k": k,
        "compute_type": cublas.COMPUTE_NAMES[compute], "algo": algo,
        "math_mode": cublas.MATH_NAMES[cublas.getMathMode(handle)],
        "call": ("cublasGemmEx", _OP_NAMES[transa], _OP_NAMES[transb], m, n, k, lda, ldb, ldc),
    })
    if m == 0 or n == 0:
        return
    da, a_cm = _pointer_matrix(A, at, *((m, k) if transa == cublas.CUBLAS_OP_N else (k, m)), lda)
    db, b_cm = _pointer_matrix(B, at, *((k, n) if transb == cublas.CUBLAS_OP_N else (n, k)), ldb)
    dc, c_cm = _pointer_matrix(C, ct, m, n, ldc)
    _core._begin([da, db, dc], compile=False)
    op = {0: lambda x: x, 1: lambda x: x.T, 2: lambda x: x.T}
    acc = numpy.float64 if compute == cublas.CUBLAS_COMPUTE_64F else numpy.float32
    a_op, b_op = (numpy.ascontiguousarray(op[transa](a_cm).astype(acc)),
                  numpy.ascontiguousarray(op[transb](b_cm).astype(acc)))
    if compute == cublas.CUBLAS_COMPUTE_32F_FAST_TF32:
        a_op, b_op = _core._tf32(a_op), _core._tf32(b_op)
    prod = numpy.zeros((m, n), acc) if k == 0 or al == 0 else acc(al) * (a_op @ b_op)
    if be != 0:
        prod = prod + acc(be) * c_cm.astype(acc)  # beta == 0: C is not read (may hold NaN)
    c_cm[...] = prod.astype(ct)
    _core._end([dc], stream=cublas.handle_stream(handle))


def gemm(transa, transb, a, b, out=None, alpha=1.0, beta=0.0):
    """Computes ``out = alpha * op(a) @ op(b) + beta * out`` as CuPy's ``cupy.cublas.gemm``.

    Parameters
    ----------
    transa, transb : {'N', 'T', 'H'} or cuBLAS op
    a, b : ndarray
        2-D, same dtype (float32, float64, complex64 or complex128).
    out : ndarray, optional
        ``(m, n)``; a new Fortran-ordered array (and ``beta = 0``) when omitted.
    alpha, beta : scalar or 0-d ndarray

    Returns
    -------
    ndarray
        ``out``.

    Raises
    ------
    cupy.cuda.cublas.CUBLASError
        ``CUBLAS_STATUS_INVALID_VALUE`` where cuBLAS rejects the arguments
        CuPy passes (e.g. a leading dimension of 0 for an empty block).
    """
    for x in (a, b):
        if not isinstance(x, ndarray):
            raise _core._unsupported(x)
    assert a.ndim == b.ndim == 2
    assert a.dtype == b.dtype
    dtype = a.dtype.char
    if dtype not in "fdFD":
        raise TypeError("invalid dtype")
    transa = _trans_to_cublas_op(transa)
    transb = _trans_to_cublas_op(transb)
    if transa == cublas.CUBLAS_OP_N:
        m, k = a.shape
    else:
        k, m = a.shape
    if transb == cublas.CUBLAS_OP_N:
        n = b.shape[1]
        assert b.shape[0] == k
    else:
        n = b.shape[0]
        assert b.shape[1] == k
    if out is None:
        out = _core.empty((m, n), dtype=dtype, order="F")
        beta = 0.0
    else:
        assert out.ndim == 2
        assert out.shape == (m, n)
        assert out.dtype == dtype
    alpha = _get_scalar(alpha, a.dtype)
    beta = _get_scalar(beta, a.dtype)
    device.get_cublas_handle()
    user = (m, n, k)

    lda, transa = _decide_ld_and_trans(a, transa)
    ldb, transb = _decide_ld_and_trans(b, transb)
    if not (lda is None or ldb is None):
        if out._f_contiguous:
            _xgemm(dtype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, out, m, user)
            return out
        elif out._c_contiguous:
            # out.T = alpha * b.T @ a.T + beta * out.T
            _xgemm(dtype, 1 - transb, 1 - transa, n, m, k, alpha, b, ldb, a, lda, beta, out, n, user)
            return out

    a, lda = _change_order_if_necessary(a, lda)
    b, ldb = _change_order_if_necessary(b, ldb)
    c = out
    if not out._f_contiguous:
        c = out.copy(order="F")
    _xgemm(dtype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, m, user)
    if not out._f_contiguous:
        out[...] = c
    return out
