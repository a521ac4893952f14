"""Stand-in for ``cupy.cuda.memory``: the device memory pool and its accounting.

Sizes are rounded up to 512 bytes as CuPy's pool does; a freed block is kept
by the pool (``total_bytes``) until :meth:`MemoryPool.free_all_blocks` and
reused for an allocation of the same rounded size.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref

import numpy

from cupy import _standin

__all__ = ["MemoryPointer", "MemoryPool", "OutOfMemoryError", "get_allocator", "malloc", "using_allocator"]

_UNIT = 512


class OutOfMemoryError(MemoryError):
    """Out of device memory, with CuPy's message.

    Parameters
    ----------
    size : int
        Bytes asked for.
    total : int
        Bytes allocated so far.
    limit : int
        The pool's limit, 0 for none.
    """

    def __init__(self, size: int, total: int, limit: int = 0):
        self._size, self._total, self._limit = size, total, limit
        if limit == 0:
            msg = "Out of memory allocating {:,} bytes".format(size)
            if total != -1:
                msg += " (allocated so far: {:,} bytes).".format(total)
        else:
            msg = ("Out of memory allocating {:,} bytes (allocated so far: {:,} bytes, "
                   "limit set to: {:,} bytes).".format(size, total, limit))
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self._size, self._total, self._limit))


class MemoryPool:
    """CuPy's default device memory pool (statistics of the current device)."""

    def __init__(self):
        self._free: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
        self._limit = 0

    def _used(self, dev: int) -> int:
        return _standin._device_bytes["used"].get(dev, 0)

    def used_bytes(self) -> int:
        """Bytes of live allocations on the current device.

        Returns
        -------
        int
        """
        return self._used(_standin.current_device())

    def free_bytes(self) -> int:
        """Bytes the pool holds for reuse on the current device.

        Returns
        -------
        int
        """
        return sum(s * c for s, c in self._free[_standin.current_device()].items())

    def total_bytes(self) -> int:
        """``used_bytes() + free_bytes()``.

        Returns
        -------
        int
        """
        return self.used_bytes() + self.free_bytes()

    def n_free_blocks(self) -> int:
        """Number of blocks held for reuse on the current device.

        Returns
        -------
        int
        """
        return sum(self._free[_standin.current_device()].values())

    def free_all_blocks(self, stream=None) -> None:
        """Give the held blocks of the current device back to CUDA."""
        self._free[_standin.current_device()].clear()

    def set_limit(self, size: int | None = None, fraction: float | None = None) -> None:
        """Limit the pool's total bytes (0: the device's memory).

        Parameters
        ----------
        size : int, optional
        fraction : float, optional
        """
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at one time")
        if fraction is not None:
            size = int(_standin.DEVICE_MEMORY * fraction)
        self._limit = int(size or 0)

    def get_limit(self) -> int:
        """The limit set by :meth:`set_limit` (0: none).

        Returns
        -------
        int
        """
        return self._limit

    def malloc(self, size: int) -> MemoryPointer:
        """A block of at least ``size`` bytes from the pool, held as long as the pointer lives.

        Parameters
        ----------
        size : int

        Returns
        -------
        MemoryPointer
        """
        return MemoryPointer(self._malloc(int(size), numpy.uint8))

    def _malloc(self, nbytes: int, dtype) -> _standin.Alloc:
        dev = _standin.current_device()
        if nbytes == 0:
            return _standin.Alloc(0, dtype, dev)  # CuPy: no CUDA call for an empty allocation
        _standin.ensure_context(dev)
        size = -(-nbytes // _UNIT) * _UNIT
        free = self._free[dev]
        if free[size]:
            free[size] -= 1
        else:
            limit = min(self._limit or _standin.DEVICE_MEMORY, _standin.DEVICE_MEMORY)
            if self._used(dev) + self.free_bytes() + size > limit:
                free.clear()
            if self._used(dev) + size > limit:
                raise OutOfMemoryError(size, self._used(dev), self._limit)
        alloc = _standin.Alloc(nbytes, dtype, dev)
        used = _standin._device_bytes["used"]
        used[dev] = used.get(dev, 0) + size
        _standin._device_bytes["peak"] = max(_standin._device_bytes["peak"], _standin.device_bytes_in_use())
        weakref.finalize(alloc, _release, weakref.ref(self), dev, size)
        return alloc


def _release(pool_ref, dev: int, size: int) -> None:
    used = _standin._device_bytes["used"]
    used[dev] = used.get(dev, 0) - size
    pool = pool_ref()
    if pool is not None:
        pool._free[dev][size] += 1


_default_pool = MemoryPool()


def get_default_memory_pool() -> MemoryPool:
    """The pool every stand-in allocation comes from.

    Returns
    -------
    MemoryPool
    """
    return _default_pool


class MemoryPointer:
    """A pointer to device memory that holds its allocation (``cupy.cuda.MemoryPointer``).

    Parameters
    ----------
    alloc : Alloc
    """

    def __init__(self, alloc: _standin.Alloc):
        self._alloc = alloc
        self.size = alloc.nbytes
        self.device_id = alloc.device

    @property
    def ptr(self) -> int:
        """The address (of the bytes MPI and host copies see)."""
        return self._alloc.landed.__array_interface__["data"][0] if self._alloc.nbytes else 0


_tls = threading.local()


def get_allocator():
    """The current allocator: a function ``size -> MemoryPointer`` (the default pool's ``malloc``).

    Returns
    -------
    callable
    """
    return getattr(_tls, "allocator", None) or _default_pool.malloc


@contextlib.contextmanager
def using_allocator(allocator=None):
    """Allocate with ``allocator`` (``size -> MemoryPointer``) in this thread within the block.

    Parameters
    ----------
    allocator : callable, optional
        None: the default pool.
    """
    prev = getattr(_tls, "allocator", None)
    _tls.allocator = allocator or _default_pool.malloc
    try:
        yield
    finally:
        _tls.allocator = prev


def malloc(nbytes: int, dtype) -> _standin.Alloc:
    """A new (poisoned) device allocation of ``nbytes`` on the current device.

    Parameters
    ----------
    nbytes : int
    dtype : numpy.dtype
        Decides the poison (NaN or 0x5A bytes).

    Returns
    -------
    Alloc
    """
    allocator = getattr(_tls, "allocator", None)
    if allocator is None or allocator == _default_pool.malloc or not nbytes:
        return _default_pool._malloc(int(nbytes), dtype)
    mp = allocator(int(nbytes))
    if not isinstance(mp, MemoryPointer) or mp._alloc.nbytes < nbytes:
        raise TypeError("the allocator must return a cupy.cuda.MemoryPointer of at least the size asked")
    alloc = mp._alloc
    _standin.poison(alloc.future, dtype)
    _standin.poison(alloc.landed, dtype)
    return alloc
