"""Freed host memory kept in the process: glibc's ``malloc`` serves large arrays from its heap and keeps them.

glibc gives each block of more than 32 MiB (its dynamic ``mmap`` threshold's ceiling) a mapping of its own and
unmaps it when freed: every large array of every call then starts on pages the kernel has to find and zero again,
one page fault per 4 KiB. A factorization of order 4096 at 2 ranks makes about 200 MiB of such arrays a rank a
call (the block-cyclic copies and the moves' buffers). On a virtual machine that hands free memory back to its
host (free page reporting, this project's machines) those faults cost 2 ms a MiB once the memory has been idle a
second: a 256 MiB array took 0.6 s to fill afresh against 0.02 s from a kept heap, and ``cholesky`` at n = 4096,
P = 2 ran in 0.76 s (median) against 0.54 s with the heap kept. On bare metal the kernel's zeroing alone is about
10 ms a 64 MiB array.

:func:`keep_freed_memory` sets glibc's ``M_MMAP_THRESHOLD`` to 1 GiB (blocks up to that size come from the heap)
and ``M_TRIM_THRESHOLD`` to its largest value (the heap is not given back), once a process: the practice of many
HPC sites (``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` in their job environments) and what
PyTorch's and CuPy's caching allocators do on a GPU. The cost: a rank's resident memory stays at its peak for
the job (freed memory is reused by the next arrays, not returned). Left alone where the site set glibc's own
variables (``MALLOC_*_`` or ``glibc.malloc`` tunables), where ``HPCGPU_KEEP_HOST_MEMORY=0``, and where the C
library is not glibc (musl's ``mallopt`` does nothing).
"""

from __future__ import annotations

import ctypes
import os

from . import _options

__all__ = ["keep_freed_memory", "VARIABLE", "MMAP_THRESHOLD"]

VARIABLE = "HPCGPU_KEEP_HOST_MEMORY"
"""The switch: 1 (the default) keeps freed host memory in the process, 0 leaves glibc's defaults."""

MMAP_THRESHOLD = 1 << 30
"""Bytes: a block up to this size comes from the heap (``M_MMAP_THRESHOLD``); a larger one gets a mapping of its own."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_SITE_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_DONE: str | None = None


def _site_setting() -> str | None:
    """The variable by which the site set glibc's heap itself, or None."""
    for name in _SITE_VARS:
        if os.environ.get(name):
            return name
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    return None


def keep_freed_memory() -> str:
    """Keep freed host memory in this process (see the module's text); what was done, in a few words.

    Not collective. Once a process: later calls return the first call's answer (glibc's settings stay).

    Returns
    -------
    str
        ``"kept"``; ``"glibc's defaults (HPCGPU_KEEP_HOST_MEMORY=0)"``; ``"as the site set it (NAME)"``; or
        ``"glibc's defaults (not glibc: ...)"``.

    Raises
    ------
    ValueError
        ``HPCGPU_KEEP_HOST_MEMORY`` is not a switch's word (:func:`hpcgpu.init` refuses it first, agreed).
    """
    global _DONE
    if _DONE is not None:
        return _DONE
    if _options.switch(VARIABLE) is False:
        _DONE = f"glibc's defaults ({VARIABLE}=0)"
        return _DONE
    site = _site_setting()
    if site is not None:
        _DONE = f"as the site set it ({site})"
        return _DONE
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc's own symbol: musl and others lack it
        ok = (libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(MMAP_THRESHOLD))
              and libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(2**31 - 1)))
    except (OSError, AttributeError) as e:
        _DONE = f"glibc's defaults (not glibc: {e})"
        return _DONE
    _DONE = "kept" if ok else "glibc's defaults (mallopt refused)"
    return _DONE
