"""Rank program of tests/linalg/test_cyclic.py: every rank checks its block-cyclic blocks element by element against
ScaLAPACK's formulas, then the move back, for shapes no grid or nb divides, empty blocks and every dtype.

Rank 0 prints ``ok`` and each rank's number of cases checked (an assert on any rank fails the launch).
"""

import sys

import numpy as np

import hpcgpu
from hpcgpu._device import asnumpy
from hpcgpu.linalg import CyclicMatrix, solve_triangular
from hpcgpu.linalg.cyclic import Cyclic, default_nb, numroc, to_cyclic
from hpcgpu.linalg.distmatrix import from_cyclic

from _common import refused  # (and: an exception on one rank aborts the launch)

rt = hpcgpu.init()
rank, size = rt.comm.Get_rank(), rt.comm.Get_size()
cases = 0
grids = sorted({(pr, size // pr) for pr in range(1, size + 1) if size % pr == 0})
for dims in grids:
    grid = hpcgpu.ProcessGrid(dims)
    for (m, n), nb in [((7, 5), 2), ((1, 9), 4), ((13, 13), 3), ((0, 4), 2), ((5, 3), 8), ((16, 12), 4)]:
        for dtype in ("float64", "float32", "complex128"):
            g = (np.arange(m * n).reshape(m, n) + (1j if dtype == "complex128" else 0) * 0.5).astype(dtype)
            a = hpcgpu.DistMatrix.from_global(g if rank == 0 else None, grid)
            local, lay = to_cyclic(a, nb)  # on a device (the stand-in's pass) the blocks stay there
            assert type(local) is type(a.local)
            host = asnumpy(local)
            assert local.shape == lay.lshape == (numroc(m, nb, grid.row, dims[0]), numroc(n, nb, grid.col, dims[1]))
            for li, i in enumerate(lay.rows()):
                assert lay.row_owner(i) == grid.row and lay.local_row(i) == li == (i // (nb * dims[0])) * nb + i % nb
                for lj, j in enumerate(lay.cols()):
                    assert lay.col_owner(j) == grid.col and lay.local_col(j) == lj
                    assert host[li, lj] == g[i, j], (dims, m, n, nb, i, j)
            assert lay.local_row(m) == lay.lshape[0] and lay.local_col(n) == lay.lshape[1]
            b = from_cyclic(local, lay)
            assert b.gshape == (m, n) and b.dtype == np.dtype(dtype) and type(b.local) is type(a.local)
            assert np.array_equal(asnumpy(b.local), asnumpy(a.local)), (dims, m, n, nb)
            # into the layout of the transposed grid over the same ranks (LU's), and back onto this one
            wide = grid.wide()
            assert wide.shape == (min(dims), max(dims)) and (wide is grid) == (dims[0] <= dims[1])
            local, lay = to_cyclic(a, nb, wide)
            host = asnumpy(local)
            assert host.shape == (numroc(m, nb, wide.row, wide.shape[0]), numroc(n, nb, wide.col, wide.shape[1]))
            assert np.array_equal(host, g[np.ix_(lay.rows(), lay.cols())]), (dims, m, n, nb)
            b = from_cyclic(local, lay, grid)
            assert b.grid is grid and np.array_equal(asnumpy(b.local), asnumpy(a.local)), (dims, m, n, nb)
            cases += 1
    # one triangle (Cholesky's and the triangular solves' moves): every element of the triangle lands where the
    # whole move puts it; back, the triangle's blocks come home and the rest of the matrix is zero; square shapes
    # that no nb divides, nb of 1 (element pieces) and a cap of 2 blocks a side (the whole matrix moves instead)
    import hpcgpu.linalg.cyclic as cyc
    from hpcgpu import comm as hcomm

    for n, nb, cap in [(13, 3, None), (16, 4, None), (9, 1, None), (11, 2, 2), (0, 2, None), (5, 8, None)]:
        g = np.arange(n * n, dtype=np.float64).reshape(n, n) + 1
        a = hpcgpu.DistMatrix.from_global(g if rank == 0 else None, grid)
        whole, lay = to_cyclic(a, nb)
        rows, cols = lay.rows(), lay.cols()
        for tri in ("lower", "upper"):
            saved = cyc.MAX_TRIANGLE_BLOCKS
            cyc.MAX_TRIANGLE_BLOCKS = cap or saved
            try:
                part, lay2 = to_cyclic(a, nb, triangle=tri)
                want = np.tril(g) if tri == "lower" else np.triu(g)
                keep = (rows[:, None] >= cols[None, :]) if tri == "lower" else (rows[:, None] <= cols[None, :])
                host = asnumpy(part)
                assert np.array_equal(host[keep], asnumpy(whole)[keep]), (dims, n, nb, tri)
                factor = asnumpy(whole).copy()
                factor[~keep] = 0  # a triangular matrix, as a Cholesky factor is
                b = from_cyclic(rt.xp.asarray(factor), lay2, triangle=tri)
                full = b.gather()
                if rank == 0:
                    assert np.array_equal(full, want), (dims, n, nb, tri, cap)
                # the bytes moved: over every rank, fewer than the whole matrix's move, and the whole at the cap
                hcomm.reset_traffic()
                to_cyclic(a, nb)
                all_bytes = rt.comm.allreduce(hcomm.traffic()["received"])
                hcomm.reset_traffic()
                to_cyclic(a, nb, triangle=tri)
                tri_bytes = rt.comm.allreduce(hcomm.traffic()["received"])
                if cap is not None or all_bytes == 0:
                    assert tri_bytes == all_bytes, (dims, n, nb, tri, cap, tri_bytes, all_bytes)
                elif n >= 3 * nb and min(dims) > 1:  # blocks wholly off the triangle go to other ranks
                    assert tri_bytes < all_bytes, (dims, n, nb, tri, tri_bytes, all_bytes)
            finally:
                cyc.MAX_TRIANGLE_BLOCKS = saved
            cases += 1
    try:
        to_cyclic(a, 2, triangle="diagonal")
        raise AssertionError("a bad triangle was taken")
    except ValueError as e:
        assert "triangle must be" in str(e), e
    # sizes: every row and column on exactly one grid row/column
    lay = Cyclic((23, 17), grid, 3)
    assert sum(numroc(23, 3, p, dims[0]) for p in range(dims[0])) == 23
    assert sorted(np.concatenate([lay.cols(q) for q in range(dims[1])]).tolist()) == list(range(17))


def cyclic_refusals(grid, dims):
    """A CyclicMatrix's refusals on ``grid``: one agreed line on every rank; how many were checked."""
    n = 0
    c = hpcgpu.DistMatrix.from_global(np.eye(6) if rank == 0 else None, grid).to_cyclic(2)
    a = hpcgpu.DistMatrix.from_global(np.eye(6) if rank == 0 else None, grid)
    n += refused(lambda: c + a, ValueError, "CyclicMatrix +: the operands differ: 6 x 6 float64 block-cyclic nb 2 "
                 f"on grid {dims[0]}x{dims[1]} and 6 x 6 float64 on grid {dims[0]}x{dims[1]} (elementwise needs "
                 "one shape, layout and grid)")
    n += refused(lambda: c + a.to_cyclic(3), ValueError, "CyclicMatrix +: the operands differ: 6 x 6 float64 "
                 f"block-cyclic nb 2 on grid {dims[0]}x{dims[1]} and 6 x 6 float64 block-cyclic nb 3 on grid "
                 f"{dims[0]}x{dims[1]} (elementwise needs one shape, layout and grid)")
    n += refused(lambda: hpcgpu.matmul(a, c), ValueError, "matmul: b is a CyclicMatrix (block-cyclic, the "
                 "factorizations' layout): b.to_distmatrix() is the DistMatrix SUMMA multiplies")
    n += refused(lambda: c @ c, TypeError, "CyclicMatrix @: SUMMA multiplies DistMatrix blocks: "
                 "c.to_distmatrix() @ ...")
    n += refused(lambda: c.T, TypeError, "CyclicMatrix.T: a block-cyclic matrix has no transpose view: "
                 "c.to_distmatrix().T is one, and its .to_cyclic() the transpose in this layout")
    n += refused(lambda: np.asarray(c), TypeError, "np.asarray of a CyclicMatrix: it is distributed; .gather() "
                 "(collective) gives the whole of it on rank 0, .local this rank's block")
    n += refused(lambda: solve_triangular(c, a), TypeError, "solve_triangular: A must be an hpcgpu.DistMatrix, "
                 "got a CyclicMatrix (only the factorizations and solve take one): a.to_distmatrix()")
    n += refused(lambda: a.to_cyclic(0), ValueError, "to_cyclic: nb must be >= 1, got 0")
    n += refused(lambda: a.to_cyclic(grid=(1, size)), TypeError,
                 "to_cyclic: grid must be an hpcgpu.ProcessGrid over A's ranks or None, got tuple")
    if size > 1:
        n += refused(lambda: a.to_cyclic(2 + (rank == 1)), ValueError,
                     "to_cyclic: nb differs across ranks: 2 on %s, 3 on rank 1"
                     % {2: "rank 0", 3: "ranks 0, 2"}.get(size, f"ranks 0, 2-{size - 1}"))
    return n


# CyclicMatrix, the layout kept (DistMatrix.to_cyclic): ScaLAPACK's placement, its own grid and nb, the way back, its
# elementwise arithmetic in place, and its refusals: one agreed line on every rank
for dims in grids:
    grid = hpcgpu.ProcessGrid(dims)
    for (m, n), nb, dtype, on in [((13, 13), 3, "float64", None), ((7, 5), None, "complex128", grid.wide()),
                                  ((0, 4), 2, "float32", None), ((5, 3), 8, "float64", grid.wide())]:
        g = (np.arange(m * n).reshape(m, n) + (1j if dtype == "complex128" else 0) * 0.5).astype(dtype)
        a = hpcgpu.DistMatrix.from_global(g if rank == 0 else None, grid)
        c = a.to_cyclic(nb, grid=on)
        want_nb = nb or default_nb(a.xp, max(m, n), on or grid)
        assert isinstance(c, CyclicMatrix) and c.nb == want_nb and c.grid is (on or grid), (dims, c)
        assert c.shape == c.gshape == (m, n) and c.dtype == np.dtype(dtype) and c.ndim == 2 and c.size == m * n
        assert type(c.local) is type(a.local) and c.lshape == c.local.shape == c.layout.lshape
        host = asnumpy(c.local)
        assert np.array_equal(host, g[np.ix_(c.layout.rows(), c.layout.cols())]), (dims, m, n, nb)
        back = c.to_distmatrix()
        assert back.grid is (on or grid) and back.gshape == (m, n)
        whole = c.gather()
        d = (2 * c - c / 4 + c * c).conj()
        d += 1
        got = d.gather()
        if rank == 0:
            assert np.array_equal(whole, g), (dims, m, n, nb)
            assert np.allclose(got, (1.75 * g + g * g).conj() + 1), (dims, m, n, nb)
        assert isinstance(d, CyclicMatrix) and d.nb == c.nb and d.astype("complex128").dtype == np.complex128
        cases += 1
    cases += cyclic_refusals(grid, dims)
    try:
        CyclicMatrix(np.zeros((7, 7)), (6, 6), grid, 2)
        raise AssertionError("a wrong local shape was taken")
    except ValueError as e:
        assert str(e).startswith("CyclicMatrix: local blocks have shape (7, 7), expected "), e

counts = rt.comm.gather(cases)
if rank == 0:
    print("ok", *counts, flush=True)
sys.exit(0)
