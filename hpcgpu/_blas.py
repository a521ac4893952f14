"""The host BLAS of a rank: NumPy's own library, one thread pool.

NumPy's and SciPy's wheels each bring their own OpenBLAS, each with its own
pool of worker threads, and an OpenBLAS worker spins for a while after every
call before it sleeps. A rank that calls both (NumPy's ``matmul`` for the
GEMMs, SciPy's ``gemm``/``axpy`` for an update in place) keeps two pools
busy: with t threads each, 2t - 1 workers compete for t cores, and every
GEMM waits for workers the scheduler has parked behind the other pool's
spinners (measured: the trainer ran 4 to 26 times slower with t threads than
with one). Here every host GEMM of hpcgpu goes to NumPy's BLAS: ``np.matmul``
where no accumulation is needed, and that library's own ``cblas_?gemm``
(through ctypes, found with threadpoolctl) for ``c = alpha a b + beta c``.
SciPy's BLAS is used only where NumPy's library cannot be bound (then
SUMMA's accumulation runs on it).

How many threads: the rank's limit (``hpcgpu.runtime``), for NumPy's
library as for SciPy's, and OpenBLAS's own rule runs GEMMs too small to
share on one thread. Measured with one pool per rank (NumPy's OpenBLAS
0.3.31, 2 cores): a second thread pays 1.3 to 2.7 times on the trainer's
GEMMs of 0.1 ms and more, and nothing or less below that; a GEMM whose inner
or output dimension is the 10 classes can be slower with two (0.56 to 0.9).
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS, _CONJ_TRANS = 101, 111, 112, 113
_TYPES = {np.dtype(np.float32): ("s", ctypes.c_float), np.dtype(np.float64): ("d", ctypes.c_double),
          np.dtype(np.complex64): ("c", None), np.dtype(np.complex128): ("z", None)}


class _Library:
    """NumPy's BLAS (threadpoolctl's controller of it), bound by ctypes: its CBLAS GEMMs, axpy, axpby, scal."""

    def __init__(self, controller):
        self.controller = controller
        self.filepath = controller.filepath
        lib = controller.dynlib
        self.gemms, self.axpys, self.scals, self.axpbys, self.int_t = {}, {}, {}, {}, ctypes.c_int
        self.set_threads = self.get_threads = None  # OpenBLAS's own setter, a C call of 0.5 us
        for prefix in ("scipy_", ""):
            for suffix in ("64_", "_64", ""):
                f = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
                g = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
                if f is not None and g is not None and self.set_threads is None:
                    f.argtypes, f.restype, g.argtypes, g.restype = [ctypes.c_int], None, [], ctypes.c_int
                    self.set_threads, self.get_threads = f, g
        for prefix in ("scipy_", ""):
            for suffix, int_t in (("64_", ctypes.c_int64), ("_64", ctypes.c_int64), ("", ctypes.c_int)):
                found = {t: getattr(lib, f"{prefix}cblas_{t}gemm{suffix}", None) for t in "sdcz"}
                if all(found.values()):
                    self.gemms, self.int_t = found, int_t
                    self.axpys = {t: getattr(lib, f"{prefix}cblas_{t}axpy{suffix}", None) for t in "sd"}
                    self.scals = {t: getattr(lib, f"{prefix}cblas_{t}scal{suffix}", None) for t in "sd"}
                    self.axpbys = {t: getattr(lib, f"{prefix}cblas_{t}axpby{suffix}", None) for t in "sd"}
                    break
            if self.gemms:
                break


_LOCK = threading.Lock()
_LIB: _Library | None | bool = False  # False: not looked up yet; None: none found


def numpy_blas() -> _Library | None:
    """NumPy's BLAS library, or None when threadpoolctl cannot see one. Not collective."""
    global _LIB
    if _LIB is False:
        with _LOCK:
            if _LIB is False:
                _LIB = _find()
    return _LIB


class _WheelOpenBLAS:
    """NumPy's wheel's own OpenBLAS (``numpy.libs/``), as threadpoolctl's controller of it would describe it.

    Finding it by its path saves threadpoolctl's walk over every shared object of the process (``realpath`` of
    each: 0.015 s of CPU at every rank's start here, 78 of them); the attributes hpcgpu reads are the same.
    """

    user_api, internal_api = "blas", "openblas"

    def __init__(self, path: str, dynlib: ctypes.CDLL):
        self.filepath, self.dynlib = path, dynlib
        config = None
        for name in ("scipy_openblas_get_config64_", "scipy_openblas_get_config", "openblas_get_config64_",
                     "openblas_get_config"):
            config = getattr(dynlib, name, None)
            if config is not None:
                break
        self.version = None
        if config is not None:
            config.argtypes, config.restype = [], ctypes.c_char_p
            words = (config() or b"").split()
            self.version = words[1].decode() if len(words) > 1 and words[0] == b"OpenBLAS" else None


def _wheel_openblas():
    """NumPy's wheel's OpenBLAS when it is loaded and is the only one in ``numpy.libs/``, else None."""
    libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(np.__file__))), "numpy.libs",
                                  "lib*openblas*.so*"))
    if len(libs) != 1 or not hasattr(os, "RTLD_NOLOAD"):
        return None
    try:
        dynlib = ctypes.CDLL(libs[0], mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # only if NumPy has loaded it
    except OSError:
        return None
    return _WheelOpenBLAS(libs[0], dynlib)


def _find() -> _Library | None:
    wheel = _wheel_openblas()
    if wheel is not None:
        lib = _Library(wheel)
        if lib.set_threads is not None:  # else threadpoolctl's controller sets and reads its threads
            return lib
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    blas = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
    here = os.path.dirname(os.path.dirname(os.path.realpath(np.__file__)))
    mine = [c for c in blas if os.path.realpath(c.filepath).startswith(os.path.join(here, "numpy"))]
    if not mine:  # a system NumPy: the BLAS no other wheel brought
        mine = [c for c in blas if f"{os.sep}scipy" not in c.filepath]
    if len(mine) != 1 or not hasattr(mine[0], "dynlib"):
        return None
    return _Library(mine[0])


def threads() -> int | None:
    """How many threads NumPy's BLAS now runs a call on; None when it cannot be known. Not collective."""
    lib = numpy_blas()
    if lib is None:
        return None
    if lib.get_threads is not None:
        return int(lib.get_threads())
    return int(lib.controller.num_threads)


def set_threads(n: int) -> bool:
    """Run NumPy's BLAS calls on ``n`` threads from now on (this process); False when it cannot.

    Not collective. OpenBLAS's setter is called directly (a C call: cheap
    enough between two GEMMs of a step); another library through
    threadpoolctl (slower). ``n`` must not exceed the rank's limit set by
    :func:`hpcgpu.init` (the caller's duty: this does not check).
    """
    lib = numpy_blas()
    if lib is None:
        return False
    if lib.set_threads is not None:
        lib.set_threads(int(n))
    else:
        lib.controller.set_num_threads(int(n))
    return True


def describe() -> str:
    """NumPy's BLAS as ``info`` shows it: library file, version, and whether hpcgpu calls only it."""
    lib = numpy_blas()
    if lib is None:
        return "not found (SciPy's BLAS for accumulation)"
    c = lib.controller
    only = "all GEMMs" if lib.gemms else "matmul only; SciPy's BLAS accumulates"
    return f"{os.path.basename(c.filepath)} {c.internal_api} {c.version} ({only})"


def gemm(a, b, c, alpha, beta) -> bool:
    """``c[...] = alpha * a @ b + beta * c`` by NumPy's CBLAS GEMM, in place; False when it cannot.

    Not collective. ``a``, ``b``, ``c``: 2-D, one dtype of float32, float64,
    complex64, complex128; ``c`` C-contiguous; ``a`` and ``b`` C- or
    Fortran-contiguous (a transposed view is passed as a transpose).
    """
    lib = numpy_blas()
    if lib is None or not lib.gemms or c.dtype not in _TYPES or not (a.dtype == b.dtype == c.dtype):
        return False
    if not c.flags.c_contiguous:
        return False
    ops = []
    for x in (a, b):
        if x.flags.c_contiguous:
            ops.append((_NO_TRANS, max(1, x.shape[1]), x))
        elif x.flags.f_contiguous:
            ops.append((_TRANS, max(1, x.shape[0]), x))
        else:
            return False
    (ta, lda, a), (tb, ldb, b) = ops
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    t, scalar = _TYPES[c.dtype]
    I = lib.int_t  # noqa: E741
    if scalar is not None:
        al, be = scalar(alpha), scalar(beta)
    else:  # complex: alpha and beta by pointer
        buf = np.array([alpha, beta], dtype=c.dtype)
        al, be = ctypes.c_void_p(buf.ctypes.data), ctypes.c_void_p(buf.ctypes.data + buf.itemsize)
    lib.gemms[t](_ROW_MAJOR, ta, tb, I(m), I(n), I(k), al, ctypes.c_void_p(a.ctypes.data), I(lda),
                 ctypes.c_void_p(b.ctypes.data), I(ldb), be, ctypes.c_void_p(c.ctypes.data), I(max(1, n)))
    return True


def _vector_op(table, y, x=None):
    """``(routine, library)`` of NumPy's BLAS for ``y`` (and ``x``), or ``(None, None)``.

    ``y`` and ``x`` must be C-contiguous float32 or float64 of one dtype and size.
    """
    lib = numpy_blas()
    if lib is None or y.dtype not in (np.float32, np.float64) or not y.flags.c_contiguous:
        return None, None
    if x is not None and (x.dtype != y.dtype or x.size != y.size or not x.flags.c_contiguous):
        return None, None
    f = getattr(lib, table).get(_TYPES[y.dtype][0])
    return (f, lib) if f is not None else (None, None)


def vector_ops(*arrays) -> bool:
    """Whether :func:`axpy`, :func:`axpby` and :func:`scal` can work on ``arrays`` with NumPy's BLAS.

    Not collective. True when they are host arrays, C-contiguous, float32
    or float64, of one dtype and size, and NumPy's BLAS is bound.
    """
    a = arrays[0]
    if a.dtype not in (np.float32, np.float64) or not all(
            isinstance(x, np.ndarray) and x.dtype == a.dtype and x.size == a.size and x.flags.c_contiguous
            for x in arrays):
        return False
    lib = numpy_blas()
    t = _TYPES[a.dtype][0]
    return lib is not None and lib.axpys.get(t) is not None and lib.scals.get(t) is not None


def axpy(alpha, x, y) -> bool:
    """``y += alpha * x`` in place by NumPy's BLAS; False when it cannot (then nothing is done).

    Not collective. ``x``, ``y``: C-contiguous float32 or float64 of one
    dtype and size. One memory pass over each, no temporary, threaded by the
    BLAS for long vectors.
    """
    f, lib = _vector_op("axpys", y, x)
    if f is None:
        return False
    I, s = lib.int_t, _TYPES[y.dtype][1]  # noqa: E741
    f(I(y.size), s(alpha), ctypes.c_void_p(x.ctypes.data), I(1), ctypes.c_void_p(y.ctypes.data), I(1))
    return True


def axpby(alpha, x, beta, y) -> bool:
    """``y = alpha * x + beta * y`` in place, one pass, by NumPy's BLAS; False when it cannot.

    Not collective. An extension of OpenBLAS and MKL; where the library
    lacks it, nothing is done. Operands as for :func:`axpy`.
    """
    f, lib = _vector_op("axpbys", y, x)
    if f is None:
        return False
    I, s = lib.int_t, _TYPES[y.dtype][1]  # noqa: E741
    f(I(y.size), s(alpha), ctypes.c_void_p(x.ctypes.data), I(1), s(beta), ctypes.c_void_p(y.ctypes.data), I(1))
    return True


def scal(alpha, x) -> bool:
    """``x *= alpha`` in place by NumPy's BLAS; False when it cannot. Not collective."""
    f, lib = _vector_op("scals", x)
    if f is None:
        return False
    f(lib.int_t(x.size), _TYPES[x.dtype][1](alpha), ctypes.c_void_p(x.ctypes.data), lib.int_t(1))
    return True
