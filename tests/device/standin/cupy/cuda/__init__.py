"""Stand-in for ``cupy.cuda``."""

from __future__ import annotations

from cupy.cuda import device, graph, memory, pinned_memory, runtime, stream  # noqa: F401
from cupy.cuda.device import Device, get_cublas_handle, get_device_id  # noqa: F401
from cupy.cuda.graph import Graph  # noqa: F401
from cupy.cuda.memory import MemoryPointer, MemoryPool, OutOfMemoryError, get_allocator, using_allocator  # noqa: F401,E501
from cupy.cuda.pinned_memory import PinnedMemoryPointer, PinnedMemoryPool, alloc_pinned_memory  # noqa: F401
from cupy.cuda.stream import Event, Stream, get_current_stream, get_elapsed_time  # noqa: F401


def is_available() -> bool:
    """True when at least one device is visible and the driver works.

    Returns
    -------
    bool
    """
    try:
        return runtime.getDeviceCount() > 0
    except runtime.CUDARuntimeError:
        return False


def __getattr__(name):
    # As CuPy: ``cupy.cuda.cublas`` is loaded on first access (and fails then
    # when libcublas is missing).
    if name == "cublas":
        import importlib

        return importlib.import_module("cupy.cuda.cublas")
    raise AttributeError(f"module 'cupy.cuda' has no attribute {name!r}")
