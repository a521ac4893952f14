"""Tall-skinny QR (TSQR), and the QR, least squares and SVD of tall-skinny matrices built on it.

An ``m x n`` matrix with ``m >= n`` and an ``n x n`` R that fits one rank is moved into row blocks over all ``P``
ranks (one ``Alltoallv``, none when the grid is already ``P x 1``); each rank factors its block, and a binary
reduction tree of QRs of stacked R factors leaves R on rank 0 (Demmel, Grigori, Hoemmen and Langou 2012).
:func:`lstsq` factors ``[A | B]`` together, so that ``Q^H B`` and the residual norms come out of the last
``nrhs`` columns of R without Q ever being formed. :func:`qr` and :func:`svd` form Q (or ``Q U_R``) by sending
each rank its part of the tree's Q factors back down the tree.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import _device, _gemm
from .._partition import block_range
from ..errors import agree, agreed
from ..watchdog import watch
from . import _local
from ._checks import conform_error, entry, finite, matrix_error, memory_error
from .blocks import remap

__all__ = ["qr", "lstsq", "svd"]

_UP, _DOWN = 6301, 6302
"""Message tags of the tree's R factors (up) and of its parts of Q (down)."""


# -- entry --------------------------------------------------------------------------------------------------------
def _enter(where: str, a, b, args: dict, err, *, extra_cols: int, want_q: bool):
    """The entry checks, each agreed before any other communication; the matrices' communicator.

    ``a`` (and ``b``) are DistMatrix of a solver dtype on one grid with one dtype, ``b`` has ``a``'s rows,
    ``a`` is tall or square, the arguments are the same on every rank (one ``agree_inputs``), the work fits in
    memory, and the values are finite.
    """
    from .distmatrix import DistMatrix

    if not isinstance(a, DistMatrix):  # no grid to agree over: every rank was given alike
        raise agreed(matrix_error(where, "A", a))
    err = err or matrix_error(where, "A", a)
    if err is None and b is not None:
        err = matrix_error(where, "B", b) or conform_error(where, a, b)
    m, n = a.gshape
    if err is None and not m >= n >= 1:
        err = ValueError(f"{where}: A is {m} x {n}; served: tall or square A (m >= n >= 1) whose n x n R fits one "
                         "rank (TSQR)")
    comm = a.grid.cart
    entry(where, {"A": a, "B": b, **args}, comm, err)
    short = memory_error(where, _work_bytes(a, extra_cols, want_q), comm, a.xp)
    if a.xp is not np:  # a device's answer is this rank's own; the host's is the same on every rank
        agree(short, comm=comm)
    elif short is not None:
        raise agreed(short)
    finite(where, {"A": a, "B": b}, comm)
    return comm


def _work_bytes(a, extra_cols: int, want_q: bool) -> int:
    """Bytes a rank allocates: row blocks of A and B, the moves' buffers, the leaf's band (or Q), the R's."""
    m, n = a.gshape
    P = a.grid.size
    c = n + extra_cols
    rows = -(-m // P)
    tree = 4 * c * c * (math.ceil(math.log2(P)) + 2) if P > 1 else 2 * c * c
    leaf = 4 * rows * n if want_q else max(_local.QR_BAND, c) * c
    return a.dtype.itemsize * (2 * rows * c + leaf + tree)


# -- layouts ------------------------------------------------------------------------------------------------------
def _row_block(m: int, P: int, q: int) -> slice:
    return slice(*block_range(m, P, q))


def _to_rows(a):
    """This rank's block of ``a`` in the ``P x 1`` row layout over ``a.grid.cart``. Collective.

    A ``P x 1`` grid's blocks are that layout already: no communication; any other grid, one ``Alltoallv``.
    """
    m, n = a.gshape
    grid = a.grid
    if grid.shape[1] == 1:
        return a.local
    P = grid.size
    with watch("TSQR's Alltoallv into row blocks", f"{m} x {n} onto {P} x 1"):
        return remap(a.local, lambda p: grid.block(a.gshape, p), lambda q: (_row_block(m, P, q), slice(0, n)),
                     grid.cart)


def _from_rows(local, gshape, grid):
    """The DistMatrix on ``grid`` whose ``P x 1`` row blocks are ``local``. Collective (as :func:`_to_rows`)."""
    from .distmatrix import DistMatrix

    m, n = gshape
    if grid.shape[1] != 1:
        P = grid.size
        with watch("TSQR's Alltoallv out of row blocks", f"{m} x {n} from {P} x 1"):
            local = remap(local, lambda q: (_row_block(m, P, q), slice(0, n)), lambda p: grid.block(gshape, p),
                          grid.cart)
    return DistMatrix(local, gshape, grid)


def _from_replicated(x: np.ndarray, grid, xp):
    """A DistMatrix on ``grid`` from a host array every rank holds: each keeps its block. Not collective."""
    from .distmatrix import DistMatrix

    rows, cols = grid.block(x.shape)
    return DistMatrix(xp.asarray(np.ascontiguousarray(x[rows, cols])), x.shape, grid)


def _mul(a, b):
    """``a @ b`` into a new array (host or device, as ``a``) by the one local GEMM."""
    c = _local.xp_of(a).empty((a.shape[0], b.shape[1]), dtype=a.dtype)
    _gemm.gemm(_local.xp_of(a).ascontiguousarray(a), _local.xp_of(a).ascontiguousarray(b), c)
    return c


# -- the tree -----------------------------------------------------------------------------------------------------
class _Tree:
    """One rank's part of a TSQR of ``W`` (``m x c``, ``m``'s rows in ``P x 1`` blocks over ``comm``).

    The leaf: a QR of this rank's rows (``Q_leaf``, ``m_p x r_p``, ``r_p = min(m_p, c)``). The tree: binary
    over the ranks, rank 0 at its root; at the level of stride ``s`` rank ``q`` (a multiple of ``2 s``) stacks
    its R over that of rank ``q + s`` and factors the stack, so after ``ceil(log2 P)`` levels rank 0 holds R of
    all of ``W``. With ``keep``, each merge keeps the stack's Q (``U``, ``(r_q + r_{q+s}) x r``), and
    :meth:`down` sends rank ``q + s`` its rows of ``U T`` (``T`` the product of the factors above), so that
    every rank's rows of ``Q T_root`` are ``Q_leaf T_p``.

    Why a binary tree and not a flat gather of the ``P`` R's: the gather puts ``P c^2`` words and a
    ``P c x c`` QR (``2 P c^3`` flops) on one rank, the tree ``c^2`` words and a ``2c x c`` QR per level, so
    its critical path is ``log2 P`` times a small QR, whatever ``P``. The stacked R's are small (``c x c``), so
    the tree runs on the host (SciPy's LAPACK) also when the blocks live on a GPU, where factoring a ``2c x c``
    matrix would leave the device waiting on launches: one copy of ``R_p`` to the host and one of ``T_p``
    back. Without ``keep``, ``w`` may be a list of blocks with the same rows, taken side by side (``[A | B]``):
    the leaf's R (:func:`hpcgpu.linalg._local.qr_r`, by bands of rows) gathers each band from them, so the
    whole ``W`` is never formed.
    """

    def __init__(self, w, m: int, comm, keep: bool):
        self.comm = comm
        self.keep = keep
        P, me = comm.Get_size(), comm.Get_rank()
        parts = w if isinstance(w, list) else [w]
        c = sum(p.shape[1] for p in parts)
        self.dtype = np.dtype(parts[0].dtype)
        self.rows = [min(block_range(m, P, q)[1] - block_range(m, P, q)[0], c) for q in range(P)]
        xp = _local.xp_of(parts[0])
        if parts[0].shape[0] == 0:
            self.q_leaf, r = xp.empty((0, 0), dtype=self.dtype), np.empty((0, c), dtype=self.dtype)
        elif keep:
            self.q_leaf, r = _local.qr(w, "reduced")
        else:
            self.q_leaf, r = None, _local.qr_r(w)
        self.merges, self.parent = [], None
        self.r = self._up(np.ascontiguousarray(_device.asnumpy(r)), P, me, c)

    def _up(self, r, P: int, me: int, c: int):
        """Reduce the R factors up the tree: rank 0's result is R of ``W``; a rank that sent has no R."""
        rows = list(self.rows)
        s = 1
        while s < P and self.parent is None:
            for q in range(0, P - s, 2 * s):
                if me == q and rows[q + s]:
                    other = np.empty((rows[q + s], c), dtype=self.dtype)
                    with watch("TSQR's reduction tree", f"R of rank {q + s} to rank {q}"):
                        self.comm.Recv(other, source=q + s, tag=_UP)
                    stack = np.concatenate([r, other])
                    if self.keep:
                        u, r = _local.qr(stack, "reduced")
                        self.merges.append((q + s, rows[q], u))
                    else:
                        r = _local.qr_r(stack, overwrite=True)
                elif me == q + s:
                    if rows[q + s]:
                        self.comm.Send(np.ascontiguousarray(r), dest=q, tag=_UP)
                    self.parent = (q, rows[q + s])
                rows[q] = min(rows[q] + rows[q + s], c)
            s *= 2
        return np.ascontiguousarray(r) if self.parent is None else None

    def down(self, t_root, k: int):
        """This rank's rows of ``Q_W T_root`` (``m_p x k``, on the blocks' side). Collective over the tree.

        ``t_root`` is given on rank 0 (``min(m, c) x k``, host) and ignored elsewhere: the identity gives Q,
        the SVD's ``U_R`` gives the left singular vectors.
        """
        if self.parent is None:
            t = np.asarray(t_root, dtype=self.dtype)
        else:
            q, rows = self.parent
            t = np.empty((rows, k), dtype=self.dtype)
            if rows:
                with watch("TSQR's tree, Q down", f"from rank {q}"):
                    self.comm.Recv(t, source=q, tag=_DOWN)
        for partner, own, u in reversed(self.merges):
            self.comm.Send(np.ascontiguousarray(u[own:] @ t), dest=partner, tag=_DOWN)
            t = u[:own] @ t
        xp = _local.xp_of(self.q_leaf)
        if self.q_leaf.shape[0] == 0:
            return xp.empty((0, k), dtype=self.dtype)
        return _mul(self.q_leaf, xp.asarray(np.ascontiguousarray(t)))


def _from_root(where: str, tree: _Tree, finish):
    """``finish(R)`` computed on rank 0 and broadcast (pickled: a few ``n x n`` arrays); agreed if it fails."""
    out = None
    if tree.comm.Get_rank() == 0:
        try:
            out = (None, finish(tree.r))
        except np.linalg.LinAlgError as e:
            out = (str(e), None)
    with watch("TSQR's broadcast of R", where):
        err, out = tree.comm.bcast(out, root=0)
    if err is not None:
        raise agreed(np.linalg.LinAlgError(f"{where}: the SVD of R did not converge ({err})"))
    return out


# -- the routines -------------------------------------------------------------------------------------------------
def qr(a, mode: str = "reduced"):
    """QR factorization of a tall-skinny distributed matrix by TSQR: ``A = Q R``.

    Collective over ``a.grid.cart``: every rank calls it with the same arguments.

    Parameters
    ----------
    a : DistMatrix
        Global ``m x n`` with ``m >= n >= 1``, float32, float64, complex64 or complex128, host or device blocks,
        on any ``pr x pc`` grid. ``n x n`` must fit one rank's memory (R is reduced on rank 0 and broadcast).
    mode : {"reduced", "economic", "r", "full"}
        ``"reduced"`` (``"economic"``, SciPy's word, is the same): Q ``m x n`` and R ``n x n``. ``"r"``: R only,
        as SciPy returns it (a tuple ``(R,)``), no Q formed. ``"full"``: served for square A only (where it
        is ``"reduced"``); a Q of ``m x m`` is not formed for ``m > n``.

    Returns
    -------
    Q : DistMatrix
        ``m x n``, orthonormal columns, on ``a``'s grid, dtype and side. Not for ``mode="r"``.
    R : DistMatrix
        ``n x n`` upper triangular, on ``a``'s grid: every rank keeps its block of the R it was broadcast (no
        more communication; ``R.gather()`` brings it whole to one rank).

    Raises
    ------
    TypeError
        ``a`` is no DistMatrix, or of another dtype.
    ValueError
        ``a`` is wide (``m < n``) or empty; an unknown ``mode``, or ``"full"`` for ``m > n``; arguments that differ
        across the ranks; NaN or inf in ``a``.
    MemoryError
        The row blocks, Q and the tree's R's do not fit (before any work).

    All are raised on every rank, before any other communication (``hpcgpu.linalg._checks``).

    Notes
    -----
    ``a`` is moved into row blocks over all ``P`` ranks by one ``Alltoallv`` (none on a ``P x 1`` grid), each
    rank factors its block (``2 m_p n^2`` flops), the R's are reduced up a binary tree (``ceil(log2 P)``
    levels, ``n x n`` each, a ``2n x n`` QR per level) to rank 0, which broadcasts R. For Q, each tree node sends
    its child the child's rows of the node's Q factor times the factors above (``n x n``, back down the tree),
    and each rank multiplies its leaf's Q by it (``2 m_p n^2``), then one ``Alltoallv`` back to ``a``'s grid.
    In all ``2 m n^2 - 2 n^3 / 3`` flops spread over the ranks (twice that with Q), ``O(n^2 log P)`` words
    along the tree's critical path, plus the two moves of ``m n / P`` elements a rank. The tree is on the host
    (SciPy) also for device blocks: its stacked R's are small.

    ScaLAPACK's name for it: ``pdgeqrf`` (:data:`hpcgpu.linalg.pdgeqrf` is this function).

    References
    ----------
    J. Demmel, L. Grigori, M. Hoemmen and J. Langou, "Communication-optimal parallel and sequential QR and LU
    factorizations", SIAM J. Sci. Comput. 34(1), 2012.

    Examples
    --------
    >>> a = hpcgpu.DistMatrix.random((10000, 50), seed=1)   # doctest: +SKIP
    >>> q, r = hpcgpu.linalg.qr(a)                          # doctest: +SKIP
    >>> q.gshape, r.gshape                                  # doctest: +SKIP
    [0/4] ((10000, 50), (50, 50))
    """
    err = None
    if not isinstance(mode, str) or mode not in ("reduced", "economic", "r", "full"):
        err = ValueError(f"qr: mode must be 'reduced', 'economic', 'r' or 'full', got {mode!r}")
    elif mode == "full" and getattr(a, "gshape", (0, 0))[0] > getattr(a, "gshape", (0, 0))[1]:
        m, n = a.gshape
        err = ValueError(f"qr: mode 'full' (Q of {m} x {m}) is not served for a tall A ({m} x {n}); "
                         f"mode 'reduced' gives Q {m} x {n} and R {n} x {n}")
    want_q = mode != "r"
    _enter("qr", a, None, {"mode": mode}, err, extra_cols=0, want_q=want_q)
    n = a.gshape[1]
    tree = _Tree(_to_rows(a), a.gshape[0], a.grid.cart, keep=want_q)
    r = _from_root("qr", tree, lambda r: np.triu(r))
    rd = _from_replicated(r, a.grid, a.xp)
    if not want_q:
        return (rd,)
    q = tree.down(np.eye(n, dtype=a.dtype), n)
    return _from_rows(q, a.gshape, a.grid), rd


def lstsq(a, b, cond=None):
    """Least-squares solution of ``A x = B`` for a tall-skinny distributed A, by TSQR of ``[A | B]``.

    SciPy's ``scipy.linalg.lstsq`` (the ``gelsd`` driver's results). Collective over ``a.grid.cart``.

    Parameters
    ----------
    a : DistMatrix
        Global ``m x n`` with ``m >= n >= 1``, float32, float64, complex64 or complex128, host or device.
    b : DistMatrix
        Global ``m x nrhs``, on ``a``'s grid, of ``a``'s dtype.
    cond : float, optional
        Singular values of A at most ``cond * s[0]`` are taken as zero (the rank); ``None`` means the dtype's
        machine epsilon, as SciPy's.

    Returns
    -------
    x : DistMatrix
        ``n x nrhs`` on ``a``'s grid, dtype and side: the minimum-norm least-squares solution.
    residues : xp.ndarray, shape ``(nrhs,)`` or ``(0,)``
        The squared 2-norms of the columns of ``b - a x`` (real) when ``rank == n`` and ``m > n``; empty
        otherwise (as NumPy's ``lstsq``, and SciPy's before 1.18, which gives NaNs there). The same on every rank,
        on ``a``'s side.
    rank : int
        The effective rank of ``a``, the same on every rank.
    s : xp.ndarray, shape ``(n,)``
        The singular values of ``a`` (real, descending), the same on every rank.

    Raises
    ------
    TypeError
        ``a`` or ``b`` is no DistMatrix, or of another dtype; ``a`` and ``b`` differ in dtype.
    ValueError
        ``a`` is wide (``m < n``: an underdetermined system is not served) or empty; ``b`` has other rows or
        another grid; ``cond`` is not a number >= 0; arguments that differ across the ranks; NaN or inf.
    MemoryError
        The row blocks of ``[A | B]`` or the tree's R's do not fit (before any work).
    numpy.linalg.LinAlgError
        The SVD of R did not converge (agreed, on every rank).

    All but the last are raised on every rank before any other communication.

    Notes
    -----
    ``[A | B]`` is factored together by TSQR (see :func:`qr`): its ``(n + nrhs)``-column R is
    ``[[R11, C], [0, D]]`` with ``C = Q^H B`` and the columns of ``D`` as long as those of the residual, so Q is
    never formed and the residues need no second pass over ``b``. Rank 0 takes the SVD of ``R11`` (A's singular
    values, and its rank from ``cond``), solves ``R11 x = C`` (full rank) or ``x = V S^+ U^H C`` over the
    ``rank`` leading singular triplets (rank-deficient: the minimum-norm solution, as ``gelsd``), and
    broadcasts ``x``, ``residues``, ``rank`` and ``s``; each rank keeps its block of ``x``. Cost as
    :func:`qr`'s R with ``n + nrhs`` columns: ``2 m (n + nrhs)^2`` flops over the ranks, ``O((n + nrhs)^2
    log P)`` words, one ``Alltoallv`` each for A and B into row blocks (none on a ``P x 1`` grid).

    ScaLAPACK's name: ``pdgels`` (:data:`hpcgpu.linalg.pdgels` is this function).

    References
    ----------
    J. Demmel, L. Grigori, M. Hoemmen and J. Langou, "Communication-optimal parallel and sequential QR and LU
    factorizations", SIAM J. Sci. Comput. 34(1), 2012.
    """
    err = None
    if cond is not None and (isinstance(cond, bool) or not isinstance(cond, numbers.Real)
                             or not cond >= 0 or not math.isfinite(cond)):
        err = ValueError(f"lstsq: cond must be None or a finite number >= 0, got {cond!r}")
    nrhs = b.gshape[1] if getattr(b, "gshape", None) is not None and len(b.gshape) == 2 else 0
    _enter("lstsq", a, b, {"cond": cond}, err, extra_cols=nrhs, want_q=False)
    m, n = a.gshape
    xp = a.xp
    tree = _Tree([_to_rows(a), _to_rows(b)], m, a.grid.cart, keep=False)  # [A | B], never formed
    eps = np.finfo(a.dtype).eps
    x, residues, rank, s = _from_root("lstsq", tree, lambda r: _solve(r, m, n, eps if cond is None else cond))
    return _from_replicated(x, a.grid, xp), xp.asarray(residues), rank, xp.asarray(s)


def _solve(r, m: int, n: int, cond: float):
    """x, residues, rank, s from the R of ``[A | B]`` (rank 0's part of :func:`lstsq`; host arrays)."""
    r11, c, d = np.triu(r[:n, :n]), r[:n, n:], r[n:, n:]
    u, s, vh = _local.svd(r11)
    rank = int(np.count_nonzero(s > cond * s[0])) if s[0] > 0 else 0
    if rank == n:
        x = _local.trsm(r11, np.ascontiguousarray(c), lower=False)
    else:
        y = (u[:, :rank].conj().T @ c) / s[:rank, None]
        x = vh[:rank].conj().T @ y
    residues = np.sum(np.abs(d) ** 2, axis=0) if m > n and rank == n else np.empty(0, dtype=s.dtype)
    return np.ascontiguousarray(x), residues, rank, s


def svd(a, full_matrices: bool = False, compute_uv: bool = True):
    """Singular value decomposition of a tall-skinny distributed matrix: ``A = U diag(s) V^H``, by TSQR.

    Collective over ``a.grid.cart``. NumPy's and SciPy's signature and results.

    Parameters
    ----------
    a : DistMatrix
        Global ``m x n`` with ``m >= n >= 1``, float32, float64, complex64 or complex128, host or device.
    full_matrices : bool
        ``True`` (an ``m x m`` U) is served for square A only, where it is the thin SVD.
    compute_uv : bool
        ``False``: ``s`` alone, and no Q formed.

    Returns
    -------
    U : DistMatrix
        ``m x n``, orthonormal columns, on ``a``'s grid, dtype and side.
    s : xp.ndarray, shape ``(n,)``
        Real, descending, the same on every rank, on ``a``'s side.
    Vh : DistMatrix
        ``n x n`` on ``a``'s grid (each rank keeps its block of the broadcast ``V^H``).

    Raises
    ------
    TypeError
        ``a`` is no DistMatrix, or of another dtype; ``full_matrices`` or ``compute_uv`` not a bool.
    ValueError
        ``a`` is wide or empty; ``full_matrices=True`` for ``m > n``; arguments that differ across the ranks;
        NaN or inf.
    MemoryError
        As :func:`qr`.
    numpy.linalg.LinAlgError
        The SVD of R did not converge (agreed, on every rank).

    Notes
    -----
    TSQR gives R (see :func:`qr`); rank 0 takes its SVD ``R = U_R diag(s) V^H`` (``O(n^3)``) and broadcasts it.
    U is ``Q U_R`` with Q applied from the tree, never formed: ``U_R`` goes down the tree in Q's place, so
    each rank's rows of U are its leaf's Q times an ``n x n`` matrix. That costs what forming Q costs
    (``2 m n^2`` flops over the ranks, ``n^2`` words a tree level) and no distributed GEMM; then one
    ``Alltoallv`` back to ``a``'s grid.

    References
    ----------
    J. Demmel, L. Grigori, M. Hoemmen and J. Langou, "Communication-optimal parallel and sequential QR and LU
    factorizations", SIAM J. Sci. Comput. 34(1), 2012; the R-SVD: G. H. Golub and C. F. Van Loan, "Matrix
    Computations", 4th ed., section 8.6.
    """
    err = None
    for name, v in (("full_matrices", full_matrices), ("compute_uv", compute_uv)):
        if not isinstance(v, (bool, np.bool_)):
            err = err or TypeError(f"svd: {name} must be True or False, got {v!r}")
    shape = getattr(a, "gshape", (0, 0))
    if err is None and full_matrices and shape[0] > shape[1]:
        err = ValueError(f"svd: full_matrices=True (U of {shape[0]} x {shape[0]}) is not served for a tall A "
                         f"({shape[0]} x {shape[1]}); full_matrices=False gives U {shape[0]} x {shape[1]}")
    _enter("svd", a, None, {"full_matrices": bool(full_matrices), "compute_uv": bool(compute_uv)}, err,
           extra_cols=0, want_q=bool(compute_uv))
    tree = _Tree(_to_rows(a), a.gshape[0], a.grid.cart, keep=bool(compute_uv))
    xp = a.xp
    if not compute_uv:
        s = _from_root("svd", tree, lambda r: _local.svd(np.triu(r), compute_uv=False))
        return xp.asarray(s)
    kept = {}

    def finish(r):
        kept["u"], s, vh = _local.svd(np.triu(r))  # U_R stays on rank 0, the tree's root
        return s, vh

    s, vh = _from_root("svd", tree, finish)
    u = tree.down(kept.get("u"), a.gshape[1])
    return _from_rows(u, a.gshape, a.grid), xp.asarray(s), _from_replicated(vh, a.grid, xp)
