"""Block layouts of a distributed matrix, and moving a matrix from one layout to another.

A layout is a function of a rank: the global rows and columns (slices) the
rank holds. :func:`remap` moves a matrix between any two layouts over one
``Alltoallv`` (SUMMA's transposes and redistribution onto another grid,
2.5-D's replication onto its layers and the sum back); the matrix layers
above it (:mod:`hpcgpu.linalg.distmatrix`, :mod:`hpcgpu.linalg.summa`) both build on it.
"""

from __future__ import annotations

import numpy as np

from .. import _device
from ..comm import Alltoallv

__all__ = ["remap"]


def _overlap(a: slice, b: slice) -> slice:
    lo = max(a.start, b.start)
    return slice(lo, max(lo, min(a.stop, b.stop)))


def remap(local, src_block, dst_block, comm, *, transpose: bool = False, conj: bool = False, dtype=None):
    """Move a distributed matrix from one block layout to another: pack, one ``Alltoallv``, unpack.

    Collective over ``comm``. Layouts are functions of a rank: the global
    rows and columns (slices) it holds, or ``None`` for none. A target block
    may be held by several ranks (replication), and a source block too: then
    every rank that holds it may send, so give the source layout with one
    holder per block.

    Parameters
    ----------
    local : xp.ndarray, 2-D
        This rank's source block (shape ``src_block(rank)``; anything when
        ``None``).
    src_block, dst_block : callable
        ``rank -> (rows, cols)`` or ``None``: the source layout, and the
        target layout in the target's orientation (the transpose's when
        ``transpose``).
    comm : mpi4py.MPI.Intracomm
    transpose, conj : bool, keyword-only
        Move the transpose (conjugate transpose with ``conj``): target
        element ``(r, c)`` is source ``(c, r)``.
    dtype : numpy.dtype, optional
        The buffers' dtype; ``local``'s by default.

    Returns
    -------
    xp.ndarray
        This rank's target block, C-contiguous (a ``0 x 0`` array when
        ``dst_block(rank)`` is ``None``).
    """
    xp = _device.cupy_or_none() if _device.is_device_array(local) else np
    dtype = np.dtype(local.dtype if dtype is None else dtype)
    me, P = comm.Get_rank(), comm.Get_size()
    mine = src_block(me)

    def piece(trows, tcols, srows, scols):
        """The target rows and columns a source block has of a target block."""
        if transpose:
            return _overlap(trows, scols), _overlap(tcols, srows)
        return _overlap(trows, srows), _overlap(tcols, scols)

    sends, counts = [], []
    for q in range(P):
        target = dst_block(q)
        if mine is None or target is None:
            counts.append(0)
            continue
        (rs, cs), (r, c) = mine, piece(*target, *mine)
        if transpose:
            part = local[c.start - rs.start : c.stop - rs.start, r.start - cs.start : r.stop - cs.start].T
        else:
            part = local[r.start - rs.start : r.stop - rs.start, c.start - cs.start : c.stop - cs.start]
        if conj:
            part = part.conj()
        sends.append(part)
        counts.append(part.size)
    sendbuf = xp.empty(sum(counts), dtype=dtype)
    off = 0
    for part in sends:
        sendbuf[off : off + part.size].reshape(part.shape)[...] = part
        off += part.size
    target = dst_block(me)
    pieces = [None if target is None or src_block(p) is None else piece(*target, *src_block(p)) for p in range(P)]
    rcounts = [0 if x is None else (x[0].stop - x[0].start) * (x[1].stop - x[1].start) for x in pieces]
    recvbuf = xp.empty(sum(rcounts), dtype=dtype)
    Alltoallv(sendbuf, counts, recvbuf, rcounts, comm=comm)
    if target is None:
        return xp.empty((0, 0), dtype=dtype)
    (tr, tc) = target
    out = xp.empty((tr.stop - tr.start, tc.stop - tc.start), dtype=dtype)
    off = 0
    for x, k in zip(pieces, rcounts, strict=True):
        if x is not None and k:
            r, c = x
            out[r.start - tr.start : r.stop - tr.start, c.start - tc.start : c.stop - tc.start] = \
                recvbuf[off : off + k].reshape(r.stop - r.start, c.stop - c.start)
        off += k
    return out

