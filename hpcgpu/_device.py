"""The only module that touches CuPy. Everything here is a no-op on NumPy.

CuPy is imported lazily, so a CPU-only install never needs it.
"""

from __future__ import annotations

from types import ModuleType

import numpy

_PINNED: dict[tuple[int, str], numpy.ndarray] = {}


def cupy_or_none() -> ModuleType | None:
    try:
        import cupy
    except Exception:  # ImportError, or a CUDA library missing at import
        return None
    return cupy


def device_count() -> int:
    """Number of CUDA devices CuPy sees; 0 without CuPy or a driver."""
    cupy = cupy_or_none()
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def bind(device_id: int) -> ModuleType:
    """Make ``device_id`` this process's current device; return ``cupy``."""
    import cupy

    cupy.cuda.Device(device_id).use()
    return cupy


def device_name(device_id: int | None) -> str:
    if device_id is None:
        return "cpu"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def is_device_array(a) -> bool:
    """True for an array in GPU memory (anything with ``__cuda_array_interface__``)."""
    return hasattr(a, "__cuda_array_interface__")


def synchronize() -> None:
    """Wait for the current CUDA stream, so MPI reads finished data."""
    import cupy

    cupy.cuda.get_current_stream().synchronize()


def staging_buffer(a, slot: str = "send") -> numpy.ndarray:
    """A pinned host array shaped like device array ``a``, reused between calls.

    ``slot`` keeps buffers apart that are alive at the same time (the send
    and receive side of one collective, two panels in flight).
    """
    import cupy

    nbytes = int(a.nbytes)
    key = (nbytes, slot)
    host = _PINNED.get(key)
    if host is None:
        mem = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        host = numpy.frombuffer(mem, dtype=numpy.uint8, count=nbytes)
        _PINNED[key] = host
    return host.view(a.dtype).reshape(a.shape)


def to_host(a, slot: str = "send") -> numpy.ndarray:
    """Copy device array ``a`` into a pinned staging buffer and return it."""
    host = staging_buffer(a, slot)
    a.get(out=host)  # synchronous on the current stream
    return host


def from_host(host: numpy.ndarray, a) -> None:
    """Copy ``host`` back into device array ``a`` (synchronously)."""
    a.set(host)
    synchronize()


def asnumpy(a) -> numpy.ndarray:
    """A NumPy array holding the values of ``a`` (a copy only for device arrays)."""
    if is_device_array(a):
        return a.get()
    return numpy.asarray(a)


def gemm(a, b, c, beta: float) -> None:
    """``c = a @ b + beta * c`` on the device with cuBLAS (no temporary)."""
    from cupy import cublas

    cublas.gemm("N", "N", a, b, out=c, alpha=1.0, beta=beta)
