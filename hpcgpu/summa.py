"""SUMMA: distributed C = A @ B on a 2-D process grid.

R. A. van de Geijn and J. Watts, "SUMMA: Scalable Universal Matrix
Multiplication Algorithm", Concurrency: Practice and Experience 9(4), 1997.

The inner dimension k is cut into panels. For panel ``[k0, k1)`` the grid
column that owns those columns of A broadcasts its ``m_l x w`` A panel along
each grid row, the grid row that owns those rows of B broadcasts its
``w x n_l`` B panel along each grid column, and every rank accumulates
``C_local += A_panel @ B_panel`` with the local GEMM (BLAS or cuBLAS).
Lookahead: the broadcasts of panel p+1 are posted (``Ibcast``) before the
GEMM of panel p. Per-rank memory: the local blocks of A, B and C plus two
panel pairs; no rank ever holds a global-size buffer.
"""

from __future__ import annotations

import itertools
import math
from contextlib import nullcontext
from typing import NamedTuple

import numpy as np

from ._gemm import PRECISIONS, accumulator_dtype, gemm
from .comm import Ibcast
from .distmatrix import DistMatrix
from .errors import agreed

__all__ = ["matmul", "Panel", "plan_panels", "panel_width", "DEFAULT_PANEL_MEMORY"]

DEFAULT_PANEL_MEMORY = 256 * 2**20
"""Bytes per rank for the two panel pairs in flight (A and B, current and next)."""


def _error(msg: str) -> ValueError:
    return agreed(ValueError(msg))  # shapes, dtypes and grids are the same on every rank


class Panel(NamedTuple):
    """One step of SUMMA: the inner-dimension range ``[k0, k1)`` and who owns it.

    Attributes
    ----------
    k0, k1 : int
        Columns ``k0:k1`` of A and rows ``k0:k1`` of B (global indices).
    a_col : int
        The grid column that holds those columns of A (the root of the
        broadcast along each grid row).
    b_row : int
        The grid row that holds those rows of B (the root of the broadcast
        along each grid column).
    """

    k0: int
    k1: int
    a_col: int
    b_row: int

    @property
    def width(self) -> int:
        """``k1 - k0``."""
        return self.k1 - self.k0


def panel_width(m: int, n: int, k: int, grid_shape, itemsize: int, panel_memory: int = DEFAULT_PANEL_MEMORY) -> int:
    """Widest panel whose two pairs fit in ``panel_memory`` bytes on every rank.

    Not collective, and the same on every rank: it uses the largest local
    block (``ceil(m / pr)`` rows of A, ``ceil(n / pc)`` columns of B).

    Parameters
    ----------
    m, n, k : int
        Global shapes: A is ``m x k``, B is ``k x n``.
    grid_shape : (int, int)
        ``(pr, pc)``.
    itemsize : int
        Bytes per element.
    panel_memory : int
        Bytes per rank for two panel pairs (A and B, current and next).

    Returns
    -------
    int
        At least 1, at most ``max(k, 1)``.
    """
    pr, pc = grid_shape
    per_column = 2 * (math.ceil(m / pr) + math.ceil(n / pc)) * itemsize
    return max(1, min(max(k, 1), panel_memory // max(per_column, 1)))


def plan_panels(k: int, grid, width: int) -> list[Panel]:
    """The panels of SUMMA's inner dimension, in order, covering ``0..k``.

    Not collective, and the same on every rank. A's columns are split over
    the ``pc`` grid columns and B's rows over the ``pr`` grid rows; a panel
    never straddles either boundary (so each has one owner of each), and the
    segments between boundaries are cut into near-equal panels of at most
    ``width``.

    Parameters
    ----------
    k : int
        The inner dimension (columns of A, rows of B).
    grid : ProcessGrid
    width : int
        Widest panel, >= 1.

    Returns
    -------
    list of Panel
    """
    a_starts, b_starts = grid.col_starts(k), grid.row_starts(k)
    cuts = sorted(set(a_starts) | set(b_starts))
    out = []
    for s0, s1 in itertools.pairwise(cuts):
        if s1 == s0:
            continue
        ja = int(np.searchsorted(a_starts, s0, side="right")) - 1
        ib = int(np.searchsorted(b_starts, s0, side="right")) - 1
        pieces = -(-(s1 - s0) // width)
        for q in range(pieces):
            out.append(Panel(s0 + (s1 - s0) * q // pieces, s0 + (s1 - s0) * (q + 1) // pieces, ja, ib))
    return out


def matmul(a: DistMatrix, b: DistMatrix, *, panel: int | None = None,
           panel_memory: int = DEFAULT_PANEL_MEMORY, precision: str = "default", watchdog=None) -> DistMatrix:
    """``C = A @ B`` for distributed matrices, by SUMMA with lookahead.

    Collective: every rank of the grid calls it with its blocks.

    Parameters
    ----------
    a : DistMatrix
        Global shape ``(m, k)``.
    b : DistMatrix
        Global shape ``(k, n)``, same grid and dtype as ``a``.
    panel : int, optional
        Panel width (columns of A / rows of B per broadcast). By default the
        widest that fits ``panel_memory``; wide panels keep the local GEMM
        efficient.
    panel_memory : int
        Bytes per rank for the two panel pairs when ``panel`` is not given.
    precision : {"default", "tf32", "full"}
        The local GEMMs' arithmetic on a GPU: ``"default"`` follows the mode
        a CuPy user chose, as ``cupy.matmul`` does (TF32 tensor cores for
        float32 and complex64 under ``CUPY_TF32=1``); ``"tf32"`` asks for
        TF32, ``"full"`` for IEEE arithmetic whatever ``CUPY_TF32`` says.
        The host BLAS has no TF32 (always full precision). float16 and
        bfloat16 are multiplied and summed over all panels in float32
        (cuBLAS ``CUBLAS_COMPUTE_32F``) under every choice, and rounded once.
    watchdog : hpcgpu.watchdog.Watchdog, optional
        Watches every panel broadcast; a stalled one aborts the job.

    Returns
    -------
    DistMatrix
        Global shape ``(m, n)`` on the same grid; dtype of the inputs
        (float32, float64, complex64, complex128, float16, bfloat16); local
        block ``(len(rows_i), len(cols_j))``. Half-precision blocks need one
        float32 accumulator of the local block's shape besides.

    Raises
    ------
    ValueError
        Inner dimensions differ, dtypes differ, the grids differ, or
        ``panel < 1`` (on every rank, before any communication).

    Notes
    -----
    Communication per rank: ``m_l * k`` elements of A along its grid row and
    ``k * n_l`` of B along its grid column, in ``len(panels)`` broadcasts
    each. Work: ``2 m_l n_l k`` flops, in GEMMs of inner size ``panel``.
    On a 1 x 1 grid it is one local GEMM.

    References
    ----------
    R. A. van de Geijn and J. Watts, "SUMMA: Scalable Universal Matrix
    Multiplication Algorithm", Concurrency: Practice and Experience 9(4), 1997.
    """
    if not isinstance(a, DistMatrix) or not isinstance(b, DistMatrix):
        raise _error(f"matmul: expected two DistMatrix, got {type(a).__name__} and {type(b).__name__}")
    (m, k), (k2, n) = a.gshape, b.gshape
    if k != k2:
        raise _error(f"matmul: inner dimensions differ: A is {m} x {k}, B is {k2} x {n}")
    if a.dtype != b.dtype:
        raise _error(f"matmul: dtypes differ: A is {a.dtype}, B is {b.dtype}")
    if a.grid is not b.grid:
        raise _error(f"matmul: A and B are on different process grids ({a.grid.shape} and {b.grid.shape})")
    if panel is not None and panel < 1:
        raise _error(f"matmul: panel must be >= 1, got {panel}")
    if precision not in PRECISIONS:
        raise _error(f"matmul: precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    grid, xp = a.grid, a.xp
    if k == 0:
        return DistMatrix.zeros((m, n), grid, a.dtype, xp)
    # The first panel's GEMM has beta = 0 and overwrites every element: no memset.
    c = DistMatrix(xp.empty(grid.block_shape((m, n)), a.dtype), (m, n), grid)
    if grid.size == 1:
        gemm(a.local, b.local, c.local, precision=precision)
        return c
    w = panel if panel is not None else panel_width(m, n, k, grid.shape, a.dtype.itemsize, panel_memory)
    acc_dtype = accumulator_dtype(a.dtype)
    acc = c.local if acc_dtype == a.dtype else xp.empty(c.lshape, acc_dtype)  # half: sum panels in float32
    _summa(a, b, acc, plan_panels(k, grid, min(w, k)), precision, watchdog)
    if acc is not c.local:
        c.local[...] = acc  # one rounding to half precision
    return c


def _summa(a: DistMatrix, b: DistMatrix, c, panels: list[Panel], precision: str = "default",
           watchdog=None) -> None:
    """SUMMA's communication schedule: ``c = sum over panels of A_panel @ B_panel``.

    ``c`` is this rank's block of C (an xp array), or its float32
    accumulator for half-precision inputs.

    Collective over ``a.grid``. Two buffer slots per operand: panel p+1's
    broadcasts are posted before panel p's GEMM (lookahead).
    """
    grid, xp = a.grid, a.xp
    pr, pc = grid.shape
    m_l, n_l = c.shape
    a0, b0 = a.cols.start, b.rows.start
    wmax = max(p.width for p in panels)
    # Two slots, so panel p+1 arrives while panel p multiplies. Flat buffers:
    # a panel of any width is a contiguous prefix.
    buf_a = [xp.empty(m_l * wmax, a.dtype) for _ in range(2)]
    buf_b = [xp.empty(wmax * n_l, a.dtype) for _ in range(2)]

    def post(p):
        k0, k1, ja, ib = panels[p]
        w, s = k1 - k0, p % 2
        ap = buf_a[s][: m_l * w].reshape(m_l, w)
        if grid.col == ja:
            ap[...] = a.local[:, k0 - a0 : k1 - a0]
        req_a = Ibcast(ap, root=ja, comm=grid.row_comm) if pc > 1 else None
        if grid.row == ib:
            bp = b.local[k0 - b0 : k1 - b0]  # whole rows of a C-ordered block: contiguous
        else:
            bp = buf_b[s][: w * n_l].reshape(w, n_l)
        req_b = Ibcast(bp, root=ib, comm=grid.col_comm) if pr > 1 else None
        return ap, bp, req_a, req_b

    nxt = post(0)
    for p in range(len(panels)):
        ap, bp, req_a, req_b = nxt
        if p + 1 < len(panels):
            nxt = post(p + 1)  # lookahead
        with watchdog.watch("SUMMA panel broadcast", f"panel {p + 1} of {len(panels)}") if watchdog \
                else nullcontext():
            for req in (req_a, req_b):
                if req is not None:
                    req.Wait()
        gemm(ap, bp, c, beta=0.0 if p == 0 else 1.0, precision=precision)
