"""A strict stand-in for the parts of CuPy that hpcgpu uses (a test harness, no GPU).

Put the directory holding this package first on ``sys.path`` (or
``PYTHONPATH``) and ``import cupy`` finds it. Kernels compute eagerly but
land, that is become visible to MPI (through ``__cuda_array_interface__``)
and to host reads, only when their stream is synchronized; new memory is
poisoned. See :mod:`cupy._standin` for the model, the environment variables
and what was mirrored from CuPy's and mpi4py's sources.

Environment (read at import)
----------------------------
``HPCGPU_STANDIN_DEVICES``
    Number of devices (default 1); ``CUDA_VISIBLE_DEVICES`` applies.
``HPCGPU_STANDIN_FAIL``
    Comma-separated failures: ``import``, ``driver``, ``nvrtc``, ``cublas``.
``HPCGPU_STANDIN_MEMORY``
    Bytes of device memory (default 16 GiB), for ``OutOfMemoryError``.
``HPCGPU_STANDIN_STRICT_HOST=1``
    Stricter than CuPy: ``int()``, ``float()``, ``complex()``, ``bool()`` and
    iteration of device arrays raise ``TypeError`` (CuPy allows them; they
    synchronize). ``item()``, ``tolist()`` and ``get()`` stay allowed.
"""

import os as _os

if "import" in {_s.strip() for _s in _os.environ.get("HPCGPU_STANDIN_FAIL", "").split(",")}:
    raise ImportError("""
================================================================
Failed to import CuPy.

If you installed CuPy via wheels (cupy-cudaXXX or cupy-rocm-X-X), make sure that the package matches with \
the version of CUDA or ROCm installed.

On Linux, you may need to set LD_LIBRARY_PATH environment variable depending on how you installed CUDA/ROCm.
On Windows, try setting CUDA_PATH environment variable.

Check the Installation Guide for details:
  https://docs.cupy.dev/en/latest/install.html

Original error:
  ImportError: libcudart.so.12: cannot open shared object file: No such file or directory
================================================================
""")

import numpy as _numpy  # noqa: E402

from cupy import _standin  # noqa: E402,F401
from cupy import cuda  # noqa: E402
from cupy import linalg  # noqa: E402,F401
from cupy.linalg._kernels import diag, diagonal, eye, tril, triu  # noqa: E402,F401
from cupy._kernel import ElementwiseKernel  # noqa: E402,F401
from cupy._core import (  # noqa: E402,F401
    _reduction_table,
    _ufunc_table,
    arange,
    array,
    asarray,
    ascontiguousarray,
    asfortranarray,
    asnumpy,
    broadcast_to,
    clip,
    concatenate,
    copyto,
    dot,
    empty,
    empty_like,
    expand_dims,
    full,
    full_like,
    get_array_module,
    matmul,
    ndarray,
    nonzero,
    ones,
    ones_like,
    ravel,
    reshape,
    squeeze,
    stack,
    take,
    transpose,
    where,
    zeros,
    zeros_like,
)

globals().update(_ufunc_table)
globals().update(_reduction_table)

__version__ = "13.99.0+standin"

dtype = _numpy.dtype
finfo = _numpy.finfo
iinfo = _numpy.iinfo
result_type = _numpy.result_type
promote_types = _numpy.promote_types
can_cast = _numpy.can_cast
newaxis = None
nan = _numpy.nan
inf = _numpy.inf
pi = _numpy.pi
e = _numpy.e

bool_ = _numpy.bool_
int8, int16, int32, int64 = _numpy.int8, _numpy.int16, _numpy.int32, _numpy.int64
uint8, uint16, uint32, uint64 = _numpy.uint8, _numpy.uint16, _numpy.uint32, _numpy.uint64
intp, uintp = _numpy.intp, _numpy.uintp
float16, float32, float64 = _numpy.float16, _numpy.float32, _numpy.float64
complex64, complex128 = _numpy.complex64, _numpy.complex128
single, double = _numpy.single, _numpy.double
csingle, cdouble = _numpy.csingle, _numpy.cdouble
half = _numpy.half


def get_default_memory_pool():
    """The device memory pool (``used_bytes``, ``total_bytes``, ``free_all_blocks``).

    Returns
    -------
    cupy.cuda.MemoryPool
    """
    return cuda.memory.get_default_memory_pool()


def get_default_pinned_memory_pool():
    """The pinned host memory pool (``n_free_blocks``, ``free_all_blocks``).

    Returns
    -------
    cupy.cuda.PinnedMemoryPool
    """
    return cuda.pinned_memory.get_default_pinned_memory_pool()


def is_available() -> bool:
    """True when a device is visible and the driver works.

    Returns
    -------
    bool
    """
    return cuda.is_available()
