"""Stand-in for ``cupy.cuda.pinned_memory``.

Sizes are rounded as CuPy's pinned pool does (512-byte units, then the next
power of two), so ``size()`` and the exported buffer can be larger than what
was asked for. New pinned memory is filled with 0x5A bytes (``cudaHostAlloc``
does not clear it). A pointer that dies returns its block to the pool.
"""

from __future__ import annotations

import collections
import ctypes
import weakref

from cupy import _standin

__all__ = ["PinnedMemoryPointer", "PinnedMemoryPool", "alloc_pinned_memory"]

_UNIT = 512


def _clp2(x: int) -> int:
    return 1 << (x - 1).bit_length() if x > 1 else x


class _PinnedMemory:
    """The block behind a :class:`PinnedMemoryPointer` (``ptr`` and ``size``)."""

    def __init__(self, ptr: int, size: int):
        self.ptr, self.size = ptr, size


class PinnedMemoryPointer(bytearray):
    """Page-locked host memory with the buffer protocol (``numpy.frombuffer`` works).

    Attributes
    ----------
    ptr : int
        Address of the first byte.
    mem : object
        The block (``ptr``, ``size``).

    Notes
    -----
    As in CuPy, ``size`` is a method.
    """

    def __init__(self, size: int):
        super().__init__(b"\x5a" * size)
        self.ptr = ctypes.addressof((ctypes.c_char * size).from_buffer(self)) if size else 0
        self.mem = _PinnedMemory(self.ptr, size)

    def size(self) -> int:  # noqa: D102
        return self.mem.size

    def __int__(self):
        return self.ptr

    def __repr__(self):
        return f"<PinnedMemoryPointer {self.ptr:#x} size={self.mem.size}>"


class PinnedMemoryPool:
    """CuPy's pinned memory pool: blocks of freed pointers are kept for reuse."""

    def __init__(self):
        self._free: collections.Counter = collections.Counter()

    def malloc(self, size: int) -> PinnedMemoryPointer:
        """Allocate ``size`` bytes (rounded up) of pinned memory.

        Parameters
        ----------
        size : int

        Returns
        -------
        PinnedMemoryPointer
        """
        if size == 0:
            return PinnedMemoryPointer(0)
        _standin.ensure_context()  # cudaHostAlloc initializes the current device's context
        size = _clp2(-(-size // _UNIT) * _UNIT)
        if self._free[size]:
            self._free[size] -= 1
        p = PinnedMemoryPointer(size)
        st = _standin._pinned
        st["live"] += 1
        st["bytes"] += size
        st["total"] += 1
        weakref.finalize(p, _release, weakref.ref(self), size)
        return p

    def free_all_blocks(self) -> None:
        """Release the blocks held for reuse."""
        self._free.clear()

    def n_free_blocks(self) -> int:
        """Number of blocks held for reuse.

        Returns
        -------
        int
        """
        return sum(self._free.values())


def _release(pool_ref, size: int) -> None:
    st = _standin._pinned
    st["live"] -= 1
    st["bytes"] -= size
    pool = pool_ref()
    if pool is not None:
        pool._free[size] += 1


_default_pool = PinnedMemoryPool()


def get_default_pinned_memory_pool() -> PinnedMemoryPool:
    """The pool :func:`alloc_pinned_memory` takes from.

    Returns
    -------
    PinnedMemoryPool
    """
    return _default_pool


def alloc_pinned_memory(size: int) -> PinnedMemoryPointer:
    """Pinned host memory of at least ``size`` bytes, from the default pool.

    Parameters
    ----------
    size : int

    Returns
    -------
    PinnedMemoryPointer
    """
    return _default_pool.malloc(int(size))
