"""Rank program of tests/linalg/test_triangular.py: solve_triangular (PDTRSM) on every grid of this many ranks,
every dtype, lower and upper, ``trans`` 0, 1 and 2, unit diagonal or not, block sizes no shape divides and empty
blocks; then the refusals.

Usage: triangular_checks.py [cpu|auto] (the runtime's device). Each case checks, on the gathered matrices, the
scaled residual ``||op(T) x - b||_inf / (eps (||op(T)||_inf ||x||_inf + ||b||_inf) n) < 16`` with ``T`` the
triangle read (the other holds junk, which must not be read). Refusals: one agreed line, the same on every rank.
Rank 0 prints ``ok``, the device and each rank's ``cases/refusals``; anything unexpected aborts the launch.
"""

import sys

import numpy as np

import hpcgpu
from hpcgpu import _device
from hpcgpu.errors import AgreedError
from hpcgpu.linalg import pdtrsm, solve_triangular

from _common import dist

rt = hpcgpu.init(sys.argv[1] if len(sys.argv) > 1 else "cpu")
comm = rt.comm
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(5)
GRIDS = {1: [(1, 1)], 2: [(1, 2), (2, 1)], 3: [(1, 3), (3, 1)], 4: [(2, 2), (4, 1)], 6: [(2, 3), (3, 2)]}
CASES = [  # n, nrhs, nb, dtype
    (37, 3, 3, "float64"), (50, 2, 8, "float32"), (37, 4, 1, "complex128"), (50, 5, None, "float64"),
    (5, 3, 8, "complex128"), (0, 2, 2, "float64"), (9, 0, 2, "float32"), (23, 7, 4, "complex128")]
SOME = [(True, 0, False), (False, 0, True), (True, 1, False), (False, 2, False), (True, "C", True)]
"""(lower, trans, unit_diagonal) of each case; the n = 23 one runs every combination."""


def residual(op, x, b):
    inf = lambda m: np.abs(m).sum(axis=1).max()  # noqa: E731
    return inf(op @ x - b) / (np.finfo(b.dtype).eps * (inf(op) * inf(x) + inf(b)) * op.shape[0])


def main():
    cases = refusals = 0
    grids = GRIDS[size]
    for gi, dims in enumerate(grids):
        grid = hpcgpu.ProcessGrid(dims)
        for n, nrhs, nb, dtype in CASES[gi::len(grids)]:
            g = rng.standard_normal((n, n)) + 4 * np.eye(n)
            if np.dtype(dtype).kind == "c":
                g = g + 1j * rng.standard_normal((n, n))
            g = g.astype(dtype)
            b = rng.standard_normal((n, nrhs)).astype(dtype)
            a, bd = dist(g, grid), dist(b, grid)
            every = [(lower, trans, unit) for lower in (True, False) for trans in (0, 1, 2, "N", "T", "C")
                     for unit in (False, True)]
            for lower, trans, unit in every if n == 23 else SOME:
                x = solve_triangular(a, bd, trans=trans, lower=lower, unit_diagonal=unit, nb=nb)
                assert x.gshape == (n, nrhs) and x.dtype == np.dtype(dtype) and x.grid is grid
                assert _device.is_device_array(x.local) == _device.is_device_array(a.local)
                x = x.gather()
                if rank == 0 and n and nrhs:
                    t = np.tril(g) if lower else np.triu(g)
                    if unit:
                        np.fill_diagonal(t, 1)
                    op = {0: t, 1: t.T, 2: t.conj().T}[{"N": 0, "T": 1, "C": 2}.get(trans, trans)]
                    res = residual(op, x, b)
                    assert res < 16, (dims, n, nrhs, nb, dtype, lower, trans, unit, res)
                cases += 1

    def refused(fn, kind, message):
        nonlocal refusals
        try:
            fn()
        except AgreedError as e:
            assert isinstance(e, kind) and str(e) == message, (type(e), str(e), message)
            refusals += 1
            return
        raise AssertionError(f"no refusal: {message}")

    grid = hpcgpu.ProcessGrid(grids[-1])
    a = dist(np.eye(11) + np.tril(np.ones((11, 11))), grid)
    b = dist(np.ones((11, 2)), grid)
    x1, x2 = pdtrsm(a, b, lower=True, nb=2).gather(), solve_triangular(a, b, lower=True, nb=2).gather()
    assert rank != 0 or np.array_equal(x1, x2)
    g = np.eye(11)
    g[4, 9] = np.nan
    refused(lambda: solve_triangular(dist(g, grid), b, lower=True), ValueError,
            "solve_triangular: A holds NaN or inf (at row 4, column 9): the solvers need finite values")
    g = np.ones((11, 2))
    g[10, 0] = -np.inf
    refused(lambda: solve_triangular(a, dist(g, grid)), ValueError,
            "solve_triangular: B holds NaN or inf (at row 10, column 0): the solvers need finite values")
    refused(lambda: solve_triangular(a, dist(np.ones((7, 2)), grid)), ValueError,
            "solve_triangular: shapes do not conform: A is 11 x 11, B has 7 rows (A's 11 needed)")
    refused(lambda: solve_triangular(a, dist(np.ones((11, 2), "float32"), grid)), TypeError,
            "solve_triangular: A is float64 and B is float32: give both one dtype (b.astype(a.dtype))")
    refused(lambda: solve_triangular(dist(np.ones((5, 4)), grid), b), ValueError,
            "solve_triangular: A must be square, got 5 x 4")
    refused(lambda: solve_triangular(a, b, nb=0), ValueError, "solve_triangular: nb must be >= 1, got 0")
    refused(lambda: solve_triangular(a, b, trans="X"), ValueError,
            "solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got 'X'")
    refused(lambda: solve_triangular(a, b, unit_diagonal=None), TypeError,
            "solve_triangular: unit_diagonal must be True or False, got None")
    refused(lambda: solve_triangular(a, np.ones((11, 2))), TypeError,
            "solve_triangular: B must be an hpcgpu.DistMatrix, got ndarray")
    if size > 1:
        refused(lambda: solve_triangular(a, b, lower=rank == 1), ValueError,
                "solve_triangular: lower differs across ranks: False on %s, True on rank 1"
                % {2: "rank 0", 3: "ranks 0, 2"}.get(size, f"ranks 0, 2-{size - 1}"))
        refused(lambda: solve_triangular(a, b, nb=0 if rank == 1 else 2), ValueError,
                "solve_triangular: nb differs across ranks: 2 on %s, 0 on rank 1"
                % {2: "rank 0", 3: "ranks 0, 2"}.get(size, f"ranks 0, 2-{size - 1}"))

    counts = comm.gather((cases, refusals))
    if rank == 0:
        print("ok", "gpu" if _device.is_device_array(a.local) else "cpu", *(f"{c}/{r}" for c, r in counts),
              flush=True)


main()  # an assert on one rank aborts the launch (_common)
sys.exit(0)
