"""The stand-in's dense linear algebra kernels: one launch each, computed by NumPy on the ``future`` buffers.

Shared by ``cupy.linalg``, ``cupyx.scipy.linalg`` and the matrix constructors ``cupy.tril``, ``triu``, ``eye``,
``diag``, ``diagonal``. A host array among the operands is refused as CuPy refuses it (``Unsupported type``); the
results are new device arrays whose writes land at the stream's synchronize, like every kernel's here.
"""

from __future__ import annotations

import numpy

from cupy._core import _begin, _end, _unsupported, ndarray


def operands(*arrays) -> None:
    """Device arrays only (CuPy's kernels and cuSOLVER wrappers take nothing else)."""
    for a in arrays:
        if not isinstance(a, ndarray):
            raise _unsupported(a)


def launch(fn, *arrays, compile: bool = False):
    """Run ``fn`` on the operands' NumPy views as one kernel; each array it returns becomes a new device array.

    ``compile``: an elementwise kernel (needs NVRTC); cuSOLVER and cuBLAS calls do not.
    """
    operands(*arrays)
    _begin(list(arrays), compile=compile)
    out = fn(*(a._f for a in arrays))
    if isinstance(out, tuple):
        return tuple(_result(o) for o in out)
    return _result(out)


def _result(res) -> ndarray:
    """A new device array holding ``res``, in its order (cuSOLVER's and cuBLAS's results are Fortran arrays)."""
    res = numpy.asarray(res)
    fortran = res.ndim > 1 and res.flags.f_contiguous and not res.flags.c_contiguous
    out = ndarray(res.shape, res.dtype, order="F" if fortran else "C")
    out._f[...] = res
    _end([out])
    return out


def tril(m, k=0):
    """Lower triangle of ``m`` (the rest zero).

    Parameters
    ----------
    m : cupy.ndarray
    k : int

    Returns
    -------
    cupy.ndarray
    """
    return launch(lambda f: numpy.tril(f, k), m, compile=True)


def triu(m, k=0):
    """Upper triangle of ``m`` (the rest zero).

    Parameters
    ----------
    m : cupy.ndarray
    k : int

    Returns
    -------
    cupy.ndarray
    """
    return launch(lambda f: numpy.triu(f, k), m, compile=True)


def eye(N, M=None, k=0, dtype=float, order="C"):
    """The identity (ones on diagonal ``k``).

    Parameters
    ----------
    N, M : int
    k : int
    dtype : dtype
    order : {'C', 'F'}

    Returns
    -------
    cupy.ndarray
    """
    return launch(lambda: numpy.eye(N, M, k, dtype=dtype, order=order), compile=True)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal of ``a`` (CuPy: a view; here a copy, which no hpcgpu code writes to).

    Parameters
    ----------
    a : cupy.ndarray
    offset, axis1, axis2 : int

    Returns
    -------
    cupy.ndarray
    """
    return launch(lambda f: numpy.diagonal(f, offset, axis1, axis2).copy(), a, compile=True)


def diag(v, k=0):
    """A 2-D array with ``v`` on diagonal ``k``, or the diagonal of a 2-D ``v``.

    Parameters
    ----------
    v : cupy.ndarray
    k : int

    Returns
    -------
    cupy.ndarray
    """
    return launch(lambda f: numpy.diag(f, k).copy(), v, compile=True)
