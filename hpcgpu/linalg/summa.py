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

Its stationary-A variant (``algorithm="stationary-a"``; what ``A @ B`` runs
where :func:`variant` models it as moving less) leaves A where it lies and
moves B and C: for ``op(A)`` times a few columns it moves O((m + k) n)
elements a rank, not the matrix.
"""

from __future__ import annotations

import itertools
import math
import numbers
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .. import _device
from .._gemm import MATH_MODES, accumulator_dtype, gemm
from .blocks import remap
from ..comm import Allreduce, Ibcast, device_path, movable, traffic
from ..errors import AgreedError, agree_inputs, agreed
from ..timing import SpanTimer
from ..watchdog import watch

__all__ = ["matmul", "Panel", "plan_panels", "panel_width", "memory_25d", "traffic_model", "variant",
           "variant_traffic", "DEFAULT_PANEL_MEMORY", "PHASES"]

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


def matmul(a, b, c=None, *, alpha=1.0, beta=0.0,
           transa: str = "N", transb: str = "N", panel: int | None = None,
           panel_memory: int = DEFAULT_PANEL_MEMORY, math_mode: str = "default", watchdog=None,
           timings: dict | None = None, stats: dict | None = None, algorithm: str = "summa",
           replication: int | None = None, memory_limit: int | None = None):
    """``C = alpha * op(A) @ op(B) + beta * C`` for distributed matrices (PDGEMM's), by SUMMA with lookahead.

    Collective: every rank of the grid calls it with its blocks.

    Parameters
    ----------
    a : DistMatrix
        ``op(A)`` has global shape ``(m, k)``: ``A`` is ``(m, k)`` for
        ``transa="N"``, ``(k, m)`` otherwise. A transposed view (``x.T``,
        ``x.H``) is read as its matrix under T or C, never moved as a view.
    b : DistMatrix
        ``op(B)`` has global shape ``(k, n)``; same grid and dtype as ``a``.
    c : DistMatrix, optional
        ``(m, n)``, same grid and dtype, not a view: the result goes into it,
        in place, and with ``beta != 0`` it is read first. Without it a new
        matrix is returned.
    alpha, beta : scalar, keyword-only
        As BLAS: ``beta = 0`` ignores what ``c`` held (NaN included);
        ``beta != 0`` needs ``c``. Complex values for complex dtypes only.
    transa, transb : {"N", "T", "C"}, keyword-only
        ``op(X)`` is ``X``, its transpose, or its conjugate transpose. For
        SUMMA a transposed operand is first moved to its transpose (one
        ``Alltoallv`` of the local block, about ``m k / P`` elements a rank),
        never formed globally: SUMMA itself moves ``m k / pr`` elements of A a
        rank along the grid rows, ``pc`` times more, so the move adds at most
        ``1 / pc`` to the traffic and keeps one broadcast schedule (a broadcast
        of transposed panels would need a gather across the grid column for
        every panel). For a skinny product that move is most of the traffic,
        at every call: ``algorithm="stationary-a"`` (or ``"auto"``, or ``@``)
        leaves A where it lies.
    panel : int, optional
        Panel width (columns of A / rows of B per broadcast). By default the
        widest that fits ``panel_memory``; wide panels keep the local GEMM
        efficient.
    panel_memory : int
        Bytes per rank for the two panel pairs when ``panel`` is not given.
    math_mode : {"default", "tf32", "full"}, keyword-only
        The local GEMMs' arithmetic on a GPU (cuBLAS's math mode): ``"default"`` follows the mode
        a CuPy user chose, as ``cupy.matmul`` does (TF32 tensor cores for
        float32 and complex64 under ``CUPY_TF32=1``); ``"tf32"`` asks for
        TF32, ``"full"`` for IEEE arithmetic whatever ``CUPY_TF32`` says.
        The host BLAS has no TF32 (always full precision). float16 and
        bfloat16 are multiplied and summed over all panels in float32
        (cuBLAS ``CUBLAS_COMPUTE_32F``) under every choice, and rounded once.
    watchdog : hpcgpu.watchdog.Watchdog, optional
        Watches every panel broadcast; a stalled one aborts the job.
    timings : dict, optional
        Filled with this rank's seconds per phase (:data:`PHASES`): ``gemm``
        (local GEMMs), ``d2h`` and ``h2d`` (panel copies between device and
        pinned host memory, staged path only), ``mpi`` (in MPI calls, host
        clock) and ``total``. Device phases are timed with CUDA events and
        may overlap each other; ``total`` waits for the device. Phases of a
        one-rank grid: ``gemm`` and ``total``.
    stats : dict, optional
        Filled with the bytes this rank's collectives moved in this call,
        counted in :mod:`hpcgpu.comm` (:func:`hpcgpu.comm.traffic`):
        ``comm_bytes_sent``, ``comm_bytes_received`` and ``comm_bytes``
        (their sum), and ``algorithm`` (the one that ran). SUMMA's is
        ``(m_l k [pc > 1] + k n_l [pr > 1]) * itemsize``: every panel of A
        along a grid row and of B along a grid column is sent once by its root
        and received once by each other rank; a transposed operand adds its
        ``Alltoallv`` (``comm_bytes_transpose``). Stationary A's parts:
        ``comm_bytes_b`` (op(B)'s rows to the blocks of A that meet them),
        ``comm_bytes_reduce`` (the partial products summed) and
        ``comm_bytes_redistribute`` (C onto its blocks, for a transposed A).
        With ``algorithm="2.5d"`` also the parts: ``comm_bytes_replicate``
        (A and B onto the layers), ``comm_bytes_summa`` (the layers' SUMMA),
        ``comm_bytes_reduce`` (C summed over the layers) and
        ``comm_bytes_redistribute`` (C onto the input grid's blocks), and
        ``replication``.
    algorithm : {"summa", "stationary-a", "2.5d", "auto"}, keyword-only
        ``"stationary-a"``, SUMMA's stationary-A variant: each rank multiplies
        its own block of A (read transposed in place for T and C) by the rows
        of ``op(B)`` it meets, gathered in one ``Alltoallv``, and the partial
        products are summed along the grid rows (N) or columns (T, C; then C
        moves onto its blocks, one ``Alltoallv``): B and C move, A never does,
        O((m + k) n) elements a rank against SUMMA's O(m k / pr) for a skinny
        ``n`` (:func:`variant_traffic`). ``"2.5d"`` (Solomonik and Demmel,
        Euro-Par 2011): the P = c q^2 ranks
        form c layers of q x q; layer l gets ``A[:, K_l]`` and ``B[K_l, :]``
        for its 1/c of the inner dimension (one ``Alltoallv`` from the
        input blocks), multiplies them by SUMMA on its layer, the layers'
        partial C are summed (``Allreduce`` along the c ranks of a fiber)
        and C goes back to the input grid's blocks (one ``Alltoallv``).
        Each rank then moves about ``2 n^2 / sqrt(c P)`` words in the
        SUMMA phase against SUMMA's ``2 n^2 / sqrt(P)``, for c times the
        memory of A's and B's blocks, but moving A and B onto the layers
        costs about as much again (see :func:`traffic_model`). ``"auto"``:
        the ``c <= P^(1/3)`` (with ``P / c`` a square, within
        ``memory_limit``) whose modelled traffic is least, SUMMA included,
        and for SUMMA its stationary-A variant where :func:`variant` models
        it as moving less. ``A @ B`` is SUMMA or stationary A as
        :func:`variant` chooses (never 2.5-D, whose copies cost memory).
    replication : int, optional, keyword-only
        c for ``"2.5d"`` (required there).
    memory_limit : int, optional, keyword-only
        Bytes a rank may use for 2.5-D's copies and buffers (checked before
        any communication; the error says how much is needed).

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
        Inner dimensions differ after ``op``, dtypes differ, the grids differ,
        ``c`` of the wrong shape, dtype or grid or a view, ``beta != 0`` without ``c``,
        a complex ``alpha`` or ``beta`` for a real dtype, an unknown ``trans``,
        ``panel < 1``, an unknown ``math_mode`` or ``algorithm``, a ``replication`` that does
        not divide P into c squares, or 2.5-D's memory above ``memory_limit``
        (on every rank, before any communication).

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
    transa, transb = str(transa).upper(), str(transb).upper()  # PDGEMM takes either case
    a, transa = _unview(a, transa)  # a view (a.T, a.H) is its matrix and an op: nothing moves here
    b, transb = _unview(b, transb)
    if not _is_matrix(a):  # no grid to agree over: every rank alike (a rank with other types is a bug)
        _check_operands(a, b, c, alpha, beta, transa, transb, panel, math_mode)
    err, rep, stationary = None, 1, False
    try:
        _check_types(alpha, beta, panel, panel_memory, memory_limit, replication, timings, stats)
        _check_operands(a, b, c, alpha, beta, transa, transb, panel, math_mode)
        shapes = (a.gshape if transa == "N" else a.gshape[::-1], b.gshape if transb == "N" else b.gshape[::-1])
        rep = _replication(algorithm, replication, memory_limit, a.grid.size, shapes, a.dtype, panel_memory)
        stationary = algorithm == "stationary-a" or (
            algorithm == "auto" and rep == 1 and variant(shapes, a.grid.shape, transa, transb) == "stationary-a")
    except AgreedError as e:
        err = e
    # The one collective before the schedule: a rank with other shapes, dtypes, grids or options would wait in
    # a panel broadcast that the others never post.
    agree_inputs("matmul", dict(a=_form(a), b=_form(b), c=_form(c), alpha=alpha, beta=beta, transa=transa,
                                transb=transb, panel=panel, panel_memory=panel_memory, math_mode=math_mode,
                                algorithm=algorithm, replication=replication, memory_limit=memory_limit),
                 comm=a.grid.cart, error=err)
    call = _Call(alpha, beta, panel, panel_memory, math_mode, watchdog, rep,
                 SpanTimer(PHASES[:-1], None if a.xp is np else a.xp, on=timings is not None))
    before = traffic()
    out = _stationary_a(a, b, c, transa, transb, call) if stationary else _matmul(a, b, c, transa, transb, call)
    if timings is not None:
        timings.update(call.timer.collect(), total=time.perf_counter() - call.timer.started)
    if stats is not None:
        after = traffic()
        sent, received = after["sent"] - before["sent"], after["received"] - before["received"]
        stats.update(comm_bytes_sent=sent, comm_bytes_received=received, comm_bytes=sent + received,
                     algorithm="2.5d" if rep > 1 else "stationary-a" if stationary else "summa", replication=rep,
                     **call.parts)
    return out


@dataclass
class _Call:
    """One call's checked choices: what every step of the schedule reads."""

    alpha: object
    beta: object
    panel: int | None  # None: the widest within panel_memory
    panel_memory: int
    math_mode: str
    watchdog: object  # hpcgpu.watchdog.Watchdog or None
    replication: int  # 1: SUMMA; c > 1: 2.5-D
    timer: SpanTimer
    parts: dict = field(default_factory=dict)  # comm_bytes_<part> for stats

    def width(self, m: int, n: int, k: int, grid, itemsize: int) -> int:
        """The panel width of an m x n x k product on ``grid``, at most k."""
        w = self.panel if self.panel is not None else panel_width(m, n, k, grid.shape, itemsize, self.panel_memory)
        return min(w, k)

    def watch(self, p: int, n: int):
        """The stall watchdog's context for panel p's broadcasts (:meth:`waiting`)."""
        return self.waiting("SUMMA panel broadcast", f"panel {p + 1} of {n}")

    def waiting(self, name: str, detail: str = ""):
        """The stall watchdog's context for a wait: the caller's watchdog, else the process's own (``watch``)."""
        return (self.watchdog.watch if self.watchdog is not None else watch)(name, detail)


def memory_25d(shapes, dtype, grid_size: int, replication: int, panel_memory: int = DEFAULT_PANEL_MEMORY) -> int:
    """Bytes a rank needs for 2.5-D's copies and buffers. Not collective.

    The A and B blocks of its layer, C's block, the packing buffers of the
    moves (twice each block) and the panels.

    Parameters
    ----------
    shapes : ((int, int), (int, int))
        ``op(A)``'s ``(m, k)`` and ``op(B)``'s ``(k, n)``.
    dtype : numpy.dtype
    grid_size : int
        P.
    replication : int
        c; ``P / c`` must be a square.
    panel_memory : int
        The layers' SUMMA's bytes for panels in flight (at most).

    Returns
    -------
    int
        Bytes, from the largest blocks (ceilings).
    """
    (m, k), (_, n) = shapes
    q = math.isqrt(grid_size // replication)
    item, acc = np.dtype(dtype).itemsize, accumulator_dtype(dtype).itemsize
    kl = -(-k // replication)
    mq, nq, kq = -(-m // q), -(-n // q), -(-kl // q)
    blocks = item * (mq * kq + kq * nq) * 3 + acc * mq * nq * 3
    panels = min(panel_memory, 2 * item * (mq + nq) * kq)
    return int(blocks + panels)


def _replication(algorithm, replication, memory_limit, P, shapes, dtype, panel_memory) -> int:
    """C for this call (1: SUMMA), or an agreed error."""
    if algorithm not in ("summa", "stationary-a", "2.5d", "auto"):
        raise _error(f"matmul: algorithm must be summa, stationary-a, 2.5d or auto, got {algorithm!r}")
    if algorithm in ("summa", "stationary-a"):
        if replication not in (None, 1):
            raise _error("matmul: replication is for algorithm 2.5d")
        return 1

    def square(c):
        return c >= 1 and P % c == 0 and math.isqrt(P // c) ** 2 == P // c

    def need(c):
        return memory_25d(shapes, dtype, P, c, panel_memory)

    if algorithm == "2.5d":
        if replication is None:
            raise _error("matmul: algorithm 2.5d needs replication (c, with P / c a square)")
        if not square(int(replication)):
            raise _error(f"matmul: replication {replication} does not divide the {P} ranks into {replication} "
                         f"squares (P = c q^2)")
        if memory_limit is not None and need(replication) > memory_limit:
            raise _error(f"matmul: 2.5-D with replication {replication} needs {need(replication) / 2**20:.1f} MiB "
                         f"a rank, the memory limit is {memory_limit / 2**20:.1f} MiB")
        return int(replication)
    fits = [c for c in range(2, P + 1) if square(c) and c ** 3 <= P and
            (memory_limit is None or need(c) <= memory_limit)]
    best = min([1, *fits], key=lambda c: traffic_model(shapes, P, c))
    return best


def traffic_model(shapes, P: int, replication: int) -> float:
    """Elements a rank moves in a matmul (sent + received), modelled. Not collective.

    SUMMA (``replication = 1``, a square-ish grid): ``(m k + k n) / sqrt(P)``.
    2.5-D: its layers' SUMMA ``(m k + k n) / sqrt(c P)``, plus moving A and B
    onto the layers ``2 (m k + k n) c / P``, summing C over the layers
    ``2 m n c / P`` and moving C back ``2 m n / P``. The replication costs as
    much as the layers save at ``c = P^(1/3)``: 2.5-D moves less only at very
    large P (Solomonik and Demmel's analysis counts the multiply alone, with A
    and B already replicated).

    Parameters
    ----------
    shapes : ((int, int), (int, int))
        ``op(A)``'s ``(m, k)`` and ``op(B)``'s ``(k, n)``.
    P : int
    replication : int

    Returns
    -------
    float
        Elements.
    """
    (m, k), (_, n) = shapes
    c = replication
    if c == 1:
        return (m * k + k * n) / math.sqrt(P)
    return (m * k + k * n) / math.sqrt(c * P) + 2 * (m * k + k * n) * c / P + 2 * m * n * c / P + 2 * m * n / P


def variant_traffic(shapes, grid_shape, transa: str = "N", transb: str = "N") -> dict:
    """Elements a rank moves (sent + received) in SUMMA and in its stationary-A variant, modelled. Not collective.

    SUMMA broadcasts A along the grid rows and B down the grid columns, ``m k / pr [pc > 1] + k n / pc
    [pr > 1]``, after moving a transposed operand to its transpose (``2 m k / P`` for A, ``2 k n / P`` for
    B). Stationary A leaves A where it lies: each rank gathers the rows of ``op(B)`` its block meets
    (``2 k n / pc`` for ``op(A) = A``, ``2 k n / pr`` for a transpose), the partial products are summed along
    the grid rows (``2 m n / pr``) or columns (``2 m n / pc``), and for a transpose C moves onto its blocks
    (``2 m n / P``). For a skinny product (n small against m and k) the variant moves O((m + k) n), SUMMA
    O(m k / pr).

    Parameters
    ----------
    shapes : ((int, int), (int, int))
        ``op(A)``'s ``(m, k)`` and ``op(B)``'s ``(k, n)``.
    grid_shape : (int, int)
        ``(pr, pc)``.
    transa, transb : {"N", "T", "C"}

    Returns
    -------
    dict
        ``{"summa": float, "stationary-a": float}``, elements; both 0 on one rank.
    """
    (m, k), (_, n) = shapes
    pr, pc = grid_shape
    P = pr * pc
    if P == 1:
        return {"summa": 0.0, "stationary-a": 0.0}
    summa = m * k / pr * (pc > 1) + k * n / pc * (pr > 1) + 2 * m * k / P * (transa != "N") + \
        2 * k * n / P * (transb != "N")
    if transa == "N":
        stationary = 2 * k * n / pc + 2 * m * n / pr * (pc > 1)
    else:
        stationary = 2 * k * n / pr * (pc > 1 or transb != "N") + 2 * m * n / pc * (pr > 1) + 2 * m * n / P
    return {"summa": summa, "stationary-a": stationary}


def variant(shapes, grid_shape, transa: str = "N", transb: str = "N") -> str:
    """``"stationary-a"`` where :func:`variant_traffic` models it as moving fewer bytes than SUMMA, else ``"summa"``.

    Not collective, and the same on every rank given the same shapes: what ``A @ B`` and
    ``algorithm="auto"`` run (``a.T @ x`` for a vector-like ``x`` moves ``x`` and the product, never ``a``).

    Parameters
    ----------
    shapes : ((int, int), (int, int))
        The global shapes of A and B as stored (before ``transa``/``transb``).
    grid_shape : (int, int)
        ``(pr, pc)``.
    transa, transb : {"N", "T", "C"}

    Returns
    -------
    str
    """
    t = variant_traffic(shapes, grid_shape, transa, transb)
    return "stationary-a" if t["stationary-a"] < t["summa"] else "summa"


def _unview(x, trans: str):
    """A transposed view (``a.T``, ``a.H``) as the matrix beneath and the op that makes ``op(view)``; else as given.

    ``op(a.T)`` is ``a`` under T for N and ``a`` for T; ``(a.T)^H`` and ``(a.H)^T`` are ``conj(a)``, a local copy.
    """
    view = getattr(x, "view_of", None)
    if view is None or trans not in ("N", "T", "C"):
        return x, trans
    base, op = view
    if trans == "N":
        return base, op
    if trans == op:
        return base, "N"
    return (base.conj() if base.dtype.kind == "c" else base), "N"


def _form(x):
    """What the ranks agree on for an operand: a matrix's ``describe()`` (its grid included), anything else as is."""
    if hasattr(x, "gshape") and hasattr(x, "grid") and callable(getattr(x, "describe", None)):
        return x.describe()
    return x


def _transposed(x, conj: bool, call: _Call):
    """``x``'s (conjugate) transpose on its grid, of ``x``'s type: one ``Alltoallv``."""
    grid, (m, n) = x.grid, x.gshape
    with call.waiting("DistMatrix Alltoallv", "transpose"):
        out = remap(x.local, lambda p: grid.block((m, n), p), lambda q: grid.block((n, m), q), grid.cart,
                    transpose=True, conj=conj)
    return type(x)(out, (n, m), grid)


def _stationary_a(a, b, c, transa: str, transb: str, call: _Call):
    """``C = alpha op(A) op(B) + beta C`` with A where it lies: SUMMA's stationary-A variant.

    Each rank multiplies its block of A (read transposed in place for T and C) by the rows of ``op(B)`` that
    the block's columns of ``op(A)`` meet, gathered for it in one ``Alltoallv``; the partial products are
    summed over the ranks that share its rows of ``op(A)`` (one ``Allreduce`` along the grid row for N, the
    grid column for T and C) and C takes its block of the sum (for T and C one more ``Alltoallv``). B and C
    move, A never does (van de Geijn and Watts 1997 derive it beside SUMMA's stationary-C form, for the
    products with a transposed operand).
    """
    grid, xp = a.grid, a.xp
    (m, k), n = (a.gshape if transa == "N" else a.gshape[::-1]), (b.gshape[1] if transb == "N" else b.gshape[0])
    if k == 0 or grid.size == 1:
        return _matmul(a, b, c, transa, transb, call)
    if c is None:  # beta is 0 here: every element is written below
        c = type(a)(xp.empty(grid.block_shape((m, n)), a.dtype), (m, n), grid)

    def meets(q):  # the rows of op(B) that rank q's block of A meets: its columns of op(A)
        rows, cols = grid.block(a.gshape, q)
        return (cols if transa == "N" else rows), slice(0, n)

    t0 = traffic()
    with call.waiting("stationary-A Alltoallv", "the rows of B each block of A meets"):
        bp = remap(b.local, lambda p: grid.block(b.gshape, p), meets, grid.cart, transpose=transb != "N",
                   conj=transb == "C")
    t1 = traffic()
    acc = accumulator_dtype(a.dtype)
    part = xp.empty((a.lshape[0] if transa == "N" else a.lshape[1], n), acc)
    with call.timer.device("gemm", xp.cuda.get_current_stream() if xp is not np else None):
        if transa == "N":
            gemm(a.local, bp, part, alpha=call.alpha, math_mode=call.math_mode)
        elif transa == "T":
            gemm(a.local.T, bp, part, alpha=call.alpha, math_mode=call.math_mode)
        else:  # alpha A^H B = conj(conj(alpha) A^T conj(B))
            gemm(a.local.T, bp.conj(), part, alpha=np.conj(call.alpha), math_mode=call.math_mode)
            part = part.conj()
    with call.waiting("stationary-A Allreduce", "the partial products"):
        Allreduce(part, comm=grid.row_comm if transa == "N" else grid.col_comm)
    t2 = traffic()
    if transa == "N":  # the rows are C's block rows already
        out = part[:, c.cols]
    else:
        def summed(p):  # grid row 0 gives its grid column's rows of C (every grid row holds the same sum)
            i, j = grid.cart.Get_coords(p)
            return (grid.cols(m, j), slice(0, n)) if i == 0 else None

        with call.waiting("stationary-A Alltoallv", "C onto its blocks"):
            out = remap(part, summed, lambda q: grid.block((m, n), q), grid.cart)
    t3 = traffic()
    if call.beta == 0:
        c.local[...] = out
    else:
        c.local[...] = out + call.beta * (c.local if c.dtype == out.dtype else c.local.astype(out.dtype))
    for name, x, y in (("b", t0, t1), ("reduce", t1, t2), ("redistribute", t2, t3)):
        call.parts[f"comm_bytes_{name}"] = y["sent"] - x["sent"] + y["received"] - x["received"]
    return c


def _matmul(a, b, c, transa: str, transb: str, call: _Call):
    """The product of checked operands: transposes, then one local GEMM, SUMMA or 2.5-D."""
    t0 = traffic()
    if transa != "N":
        a = _transposed(a, transa == "C", call)
    if transb != "N":
        b = _transposed(b, transb == "C", call)
    t1 = traffic()
    call.parts["comm_bytes_transpose"] = t1["sent"] - t0["sent"] + t1["received"] - t0["received"]
    (m, k), n = a.gshape, b.gshape[1]
    grid, xp = a.grid, a.xp
    if c is None:  # beta is 0 here: the first GEMM overwrites every element, no memset
        c = type(a)(xp.empty(grid.block_shape((m, n)), a.dtype), (m, n), grid)
    if k == 0:  # alpha * (an empty sum) = 0
        if call.beta == 0:
            c.local.fill(0)
        elif call.beta != 1:
            c.local *= call.beta
    elif call.replication > 1:
        _two_and_half(a, b, c, call)
    elif grid.size == 1:
        with call.timer.device("gemm", xp.cuda.get_current_stream() if xp is not np else None):
            gemm(a.local, b.local, c.local, alpha=call.alpha, beta=call.beta, math_mode=call.math_mode)
    else:
        acc = c.local
        if accumulator_dtype(a.dtype) != a.dtype:  # half: sum the panels in float32, rounded once
            acc = xp.empty(c.lshape, accumulator_dtype(a.dtype))
            if call.beta != 0:
                acc[...] = c.local
        _summa(a, b, acc, plan_panels(k, grid, call.width(m, n, k, grid, a.dtype.itemsize)), call, beta=call.beta)
        if acc is not c.local:
            c.local[...] = acc
    return c


def _layers(grid, rep: int):
    """(layer, q, layer grid, fiber comm) of P = rep q^2 ranks, made once per grid (collective).

    Layer l is ranks l q^2 .. (l + 1) q^2 - 1 of ``grid.cart``, a q x q
    grid; a fiber is the rep ranks at one position of the layers.
    """
    cache = grid.__dict__.setdefault("_layers25d", {})  # on the grid: freed with it (ProcessGrid.free)
    if rep not in cache:
        from .grid import ProcessGrid

        r, q = grid.cart.Get_rank(), math.isqrt(grid.size // rep)
        layer_comm = grid.cart.Split(color=r // (q * q), key=r)
        fiber = grid.cart.Split(color=r % (q * q), key=r)
        cache[rep] = (r // (q * q), q, ProcessGrid((q, q), comm=layer_comm), fiber)
        layer_comm.Free()  # ProcessGrid made its own communicators from it
    return cache[rep]


def _two_and_half(a, b, c, call: _Call) -> None:
    """2.5-D: A and B onto the layers (each its 1/rep of k), SUMMA per layer, C summed over the layers."""
    from .._partition import block_range
    from ..comm import Allreduce

    (m, k), n, grid, xp = a.gshape, b.gshape[1], a.grid, a.xp
    rep = call.replication
    layer, q, lg, fiber = _layers(grid, rep)
    q2 = q * q

    def at(rank):  # (layer, i, j) of a rank of grid.cart
        i, j = divmod(rank % q2, q)
        return rank // q2, i, j

    def a_dst(rank):
        lay, i, j = at(rank)
        k0, k1 = block_range(k, rep, lay)
        c0, c1 = block_range(k1 - k0, q, j)
        return slice(*block_range(m, q, i)), slice(k0 + c0, k0 + c1)

    def b_dst(rank):
        lay, i, j = at(rank)
        k0, k1 = block_range(k, rep, lay)
        r0, r1 = block_range(k1 - k0, q, i)
        return slice(k0 + r0, k0 + r1), slice(*block_range(n, q, j))

    t0 = traffic()
    k0, k1 = block_range(k, rep, layer)
    with call.waiting("2.5-D Alltoallv", "A and B onto the layers"):
        al = type(a)(remap(a.local, lambda p: grid.block(a.gshape, p), a_dst, grid.cart), (m, k1 - k0), lg)
        bl = type(b)(remap(b.local, lambda p: grid.block(b.gshape, p), b_dst, grid.cart), (k1 - k0, n), lg)
    t1 = traffic()
    acc = xp.empty(lg.block_shape((m, n)), accumulator_dtype(a.dtype))
    if k1 == k0:
        acc.fill(0)
    elif lg.size == 1:
        with call.timer.device("gemm", xp.cuda.get_current_stream() if xp is not np else None):
            gemm(al.local, bl.local, acc, alpha=call.alpha, math_mode=call.math_mode)
    else:
        _summa(al, bl, acc, plan_panels(k1 - k0, lg, call.width(m, n, k1 - k0, lg, a.dtype.itemsize)), call,
               beta=0.0)
    t2 = traffic()
    with call.waiting("2.5-D Allreduce", "the layers' partial sums"):
        Allreduce(acc, comm=fiber)
    t3 = traffic()

    def c_src(rank):  # layer 0 holds the sum (every layer does; one sender a block)
        if rank >= q2:
            return None
        i, j = divmod(rank, q)
        return slice(*block_range(m, q, i)), slice(*block_range(n, q, j))

    with call.waiting("2.5-D Alltoallv", "C onto the input grid"):
        out = remap(acc, c_src, lambda p: grid.block((m, n), p), grid.cart)
    t4 = traffic()
    if call.beta == 0:
        c.local[...] = out
    else:
        c.local[...] = out + call.beta * (c.local if c.dtype == out.dtype else c.local.astype(out.dtype))
    moved = [t1, t2, t3, t4]
    names = ("replicate", "summa", "reduce", "redistribute")
    for name, x, y in zip(names, [t0, *moved[:-1]], moved, strict=True):
        call.parts[f"comm_bytes_{name}"] = y["sent"] - x["sent"] + y["received"] - x["received"]


def _check_c(c, shape, a, beta, b=None) -> None:
    if c is not None and (c is a or c is b):
        raise _error("matmul: c must not be a or b (C is written while A and B are read, as PDGEMM forbids)")
    if c is None:
        if beta != 0:
            raise _error(f"matmul: beta = {beta} needs a c to add to")
        return
    if getattr(c, "view_of", None) is not None:
        raise _error("matmul: c must not be a transposed view (.T, .H): C is written into, and a view's blocks "
                     "are a copy; pass a matrix")
    if not _is_matrix(c):
        raise _error(f"matmul: c must be a DistMatrix, got {type(c).__name__}")
    if c.gshape != shape or c.dtype != a.dtype or not c.grid.same_as(a.grid):
        raise _error(f"matmul: c is {c.gshape[0]} x {c.gshape[1]} {c.dtype} on grid {c.grid.shape}; "
                     f"expected {shape[0]} x {shape[1]} {a.dtype} on grid {a.grid.shape}")


def _is_matrix(x) -> bool:
    """Whether ``x`` is a distributed matrix (:class:`hpcgpu.DistMatrix`: its local block, global shape, grid)."""
    return all(hasattr(x, name) for name in ("local", "gshape", "grid", "dtype", "xp"))


def _check_types(alpha, beta, panel, panel_memory, memory_limit, replication, timings, stats) -> None:
    """The types of :func:`matmul`'s numbers and dicts, each refused in one agreed line naming it."""
    for name, x in (("alpha", alpha), ("beta", beta)):
        if not (isinstance(x, numbers.Number) or (isinstance(x, np.ndarray) and x.ndim == 0
                                                   and x.dtype.kind in "biufc")):
            raise agreed(TypeError(f"matmul: {name} must be a number, got {x!r}"))
    for name, x, none in (("panel", panel, True), ("replication", replication, True)):
        if not ((x is None and none) or (isinstance(x, numbers.Integral) and not isinstance(x, bool))):
            raise agreed(TypeError(f"matmul: {name} must be an integer, got {x!r}"))
    for name, x, none in (("panel_memory", panel_memory, False), ("memory_limit", memory_limit, True)):
        if not ((x is None and none) or (isinstance(x, numbers.Real) and not isinstance(x, bool) and x > 0)):
            raise agreed(TypeError(f"matmul: {name} must be a number of bytes > 0, got {x!r}"))
    for name, x in (("timings", timings), ("stats", stats)):
        if x is not None and not isinstance(x, dict):
            raise agreed(TypeError(f"matmul: {name} must be a dict to fill, or None, got {type(x).__name__}"))


def _check_operands(a, b, c, alpha, beta, transa, transb, panel, math_mode) -> None:
    """Every argument error of :func:`matmul`, raised alike on every rank before any communication."""
    for name, x in (("a", a), ("b", b), ("c", c)):
        if type(x).__name__ == "CyclicMatrix":  # its blocks are no block layout's: SUMMA reads DistMatrix blocks
            raise _error(f"matmul: {name} is a CyclicMatrix (block-cyclic, the factorizations' layout): "
                         f"{name}.to_distmatrix() is the DistMatrix SUMMA multiplies")
    if not _is_matrix(a) or not _is_matrix(b):
        raise _error(f"matmul: expected two DistMatrix, got {type(a).__name__} and {type(b).__name__}")
    for name, t in (("transa", transa), ("transb", transb)):
        if t not in ("N", "T", "C"):
            raise _error(f"matmul: {name} must be N, T or C, got {t!r}")
    m, k = a.gshape if transa == "N" else a.gshape[::-1]
    k2, n = b.gshape if transb == "N" else b.gshape[::-1]
    if k != k2:
        raise _error(f"matmul: inner dimensions differ: op(A) is {m} x {k}, op(B) is {k2} x {n}")
    if a.dtype != b.dtype:
        raise _error(f"matmul: dtypes differ: A is {a.dtype}, B is {b.dtype}")
    if not a.grid.same_as(b.grid):
        raise _error(f"matmul: A and B are on different process grids ({a.grid.shape} and {b.grid.shape})")
    _check_c(c, (m, n), a, beta, b)
    if a.dtype.kind != "c" and any(isinstance(x, complex) or np.iscomplexobj(x) for x in (alpha, beta)):
        raise _error(f"matmul: complex alpha or beta for {a.dtype} matrices")
    if panel is not None and panel < 1:
        raise _error(f"matmul: panel must be >= 1, got {panel}")
    if math_mode not in MATH_MODES:
        raise _error(f"matmul: math_mode must be one of {', '.join(MATH_MODES)}, got {math_mode!r}")


PHASES = ("gemm", "d2h", "h2d", "mpi", "total")
"""The phases of :func:`matmul`'s ``timings``: seconds in local GEMMs, device-to-host and
host-to-device copies of panels, MPI calls, and the whole call."""


def _summa(a, b, c, panels: list[Panel], call: _Call, beta) -> None:
    """SUMMA's communication schedule: ``c = alpha * sum over panels of A_panel @ B_panel + beta * c``.

    ``c`` is this rank's block of C (an xp array), or its float32
    accumulator for half-precision inputs. Collective over ``a.grid``. Two
    buffer slots per operand: panel p+1's broadcasts are posted before panel
    p's GEMM (lookahead). Device blocks go straight into the broadcasts over
    NCCL or a CUDA-aware MPI (:class:`_Panels`); where MPI cannot take
    device memory in non-blocking collectives, through
    :class:`_StagedPanels`.
    """
    staged = a.xp is not np and device_path(nonblocking=True) == "staged"
    sched = (_StagedPanels if staged else _Panels)(a, b, c, panels, call.timer)
    nxt = sched.post(0)
    for p in range(len(panels)):
        cur = nxt
        if p + 1 < len(panels):
            nxt = sched.post(p + 1)  # lookahead
        with call.watch(p, len(panels)), call.timer.host("mpi"):
            for req in cur.requests:
                req.Wait()
        ap, bp = sched.arrived(p, cur)
        with call.timer.device("gemm", sched.compute):
            gemm(ap, bp, c, alpha=call.alpha, beta=beta if p == 0 else 1.0, math_mode=call.math_mode)
        sched.computed(p)


class _Posted(NamedTuple):
    ap: object  # the A panel the GEMM reads (m_l x w), on the side of the blocks
    bp: object  # the B panel (w x n_l)
    ha: object  # pinned host copy of the A panel (staged path), or None
    hb: object
    recv_a: bool  # this rank receives A's panel (it is not the root of a row broadcast)
    recv_b: bool
    requests: list


class _Panels:
    """Panel transport with no staging: host blocks, or device blocks over NCCL or a CUDA-aware MPI.

    Broadcasts go straight from and into the panel buffers (flat, two slots
    per operand: a panel of any width is a contiguous prefix). Over NCCL the
    broadcasts run on the communicator's stream after the work queued on the
    compute stream (the root's panel copy, and the GEMM two panels back that
    last read the slot), and ``Wait`` makes the compute stream wait for them:
    the host never waits.
    """

    def __init__(self, a, b, c, panels, timer):
        self.a, self.b, self.panels, self.timer = a, b, panels, timer
        self.grid = a.grid
        self.m_l, self.n_l = c.shape
        self.a0, self.b0 = a.cols.start, b.rows.start
        xp, wmax = a.xp, max(p.width for p in panels)
        self.buf_a = [xp.empty(self.m_l * wmax, a.dtype) for _ in range(2)]
        self.buf_b = [xp.empty(wmax * self.n_l, a.dtype) for _ in range(2)]
        self.compute = xp.cuda.get_current_stream() if xp is not np else None

    def _panels_of(self, p):
        k0, k1, ja, ib = self.panels[p]
        w, s, grid = k1 - k0, p % 2, self.grid
        ap = self.buf_a[s][: self.m_l * w].reshape(self.m_l, w)
        if grid.col == ja:
            ap[...] = self.a.local[:, k0 - self.a0 : k1 - self.a0]  # on the compute stream
        if grid.row == ib:
            bp = self.b.local[k0 - self.b0 : k1 - self.b0]  # whole rows of a C-ordered block: contiguous
        else:
            bp = self.buf_b[s][: w * self.n_l].reshape(w, self.n_l)
        pr, pc = grid.shape
        return ap, bp, pc > 1 and grid.col != ja, pr > 1 and grid.row != ib

    def _bcasts(self, p, abuf, bbuf) -> list:
        _, _, ja, ib = self.panels[p]
        pr, pc = self.grid.shape
        with self.timer.host("mpi"):
            return ([Ibcast(abuf, root=ja, comm=self.grid.row_comm)] if pc > 1 else []) + \
                   ([Ibcast(bbuf, root=ib, comm=self.grid.col_comm)] if pr > 1 else [])

    def post(self, p) -> _Posted:
        ap, bp, recv_a, recv_b = self._panels_of(p)
        return _Posted(ap, bp, None, None, recv_a, recv_b, self._bcasts(p, ap, bp))

    def arrived(self, p, cur: _Posted):
        return cur.ap, cur.bp

    def computed(self, p) -> None:
        pass


class _StagedPanels(_Panels):
    """Device blocks, MPI on pinned host copies, the copies on a second stream.

    Per panel: the roots copy their panel device-to-host on the copy stream
    (``get(stream=..., blocking=False)``; A's strided columns are packed on
    that stream first) and wait for that stream alone before MPI reads the
    host buffer; the receivers, after ``Wait``, copy host-to-device on the
    copy stream once the GEMM that last read that device slot is done (an
    event), and the compute stream waits for the copy (an event). The host
    never waits for a GEMM, so panel p+1's copies and MPI overlap panel p's
    GEMM (Lee, Vetter et al. style staging; cf. MVAPICH2-GPU's pipelined
    transfers, Wang et al., ISC 2011). Host slot reuse: waiting for the copy
    stream before a broadcast also waits for the host-to-device copy that
    last read that slot (two panels back).
    """

    def __init__(self, a, b, c, panels, timer):
        super().__init__(a, b, c, panels, timer)
        self.copy = _device.copy_stream()
        self.host_a = [_device.staging_buffer(x, f"summa.a{i}") for i, x in enumerate(self.buf_a)]
        self.host_b = [_device.staging_buffer(x, f"summa.b{i}") for i, x in enumerate(self.buf_b)]
        self.gemm_done = [None, None]
        # The copy stream does not wait for the compute stream by itself: its first copies must
        # see A and B as the work queued before this call leaves them.
        self.copy.wait_event(self.compute.record())

    def post(self, p) -> _Posted:
        k0, k1, ja, ib = self.panels[p]
        w, s, grid = k1 - k0, p % 2, self.grid
        ap, bp, recv_a, recv_b = self._panels_of(p)
        ha = movable(self.host_a[s][: self.m_l * w].reshape(self.m_l, w))
        hb = movable(self.host_b[s][: w * self.n_l].reshape(w, self.n_l))
        root_a, root_b = grid.shape[1] > 1 and not recv_a, grid.shape[0] > 1 and not recv_b
        if root_a or root_b:
            with self.timer.device("d2h", self.copy):
                if root_a:
                    movable(self.a.local[:, k0 - self.a0 : k1 - self.a0]).get(stream=self.copy, out=ha,
                                                                              blocking=False)
                if root_b:
                    movable(bp).get(stream=self.copy, out=hb, blocking=False)
        self.copy.synchronize()  # MPI reads finished host copies; the H2D of two panels back is done
        return _Posted(ap, bp, ha, hb, recv_a, recv_b, self._bcasts(p, ha, hb))

    def arrived(self, p, cur: _Posted):
        if cur.recv_a or cur.recv_b:
            if self.gemm_done[p % 2] is not None:
                self.copy.wait_event(self.gemm_done[p % 2])  # the GEMM two panels back read this slot
            with self.timer.device("h2d", self.copy):
                if cur.recv_a:
                    movable(cur.ap).set(cur.ha, stream=self.copy)
                if cur.recv_b:
                    movable(cur.bp).set(cur.hb, stream=self.copy)
            self.compute.wait_event(self.copy.record())
        return cur.ap, cur.bp

    def computed(self, p) -> None:
        self.gemm_done[p % 2] = self.compute.record()
