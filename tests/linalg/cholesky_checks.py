"""Rank program of tests/linalg/test_cholesky.py: cholesky, cho_factor and cho_solve on every grid of this many
ranks, every dtype, block sizes no shape divides and empty blocks; then the refusals.

Usage: cholesky_checks.py [cpu|auto] (the runtime's device; ``auto`` takes the device path where a GPU, or the
stand-in, is present). Each case checks, on the gathered matrices: the factor's backward error
``||A - L L^H||_F / (||A||_F n eps) < 16`` (LAPACK's test), the other triangle exactly zero, the factor the same
whatever junk the unread triangle of ``A`` holds, and ``cho_solve``'s HPL scaled residual
``||A x - b||_inf / (eps (||A||_inf ||x||_inf + ||b||_inf) n) < 16`` for a kept factor and a DistMatrix one. On one
rank, a factorization is one ``potrf`` call. Refusals: one agreed line, the same on every rank. Rank 0 prints
``ok``, the device and each rank's ``cases/refusals``; anything unexpected aborts the launch.
"""

import sys

import numpy as np

import hpcgpu
from hpcgpu import _device
from hpcgpu.errors import AgreedError
from hpcgpu.linalg import CyclicMatrix, _local, cho_factor, cho_solve, cholesky, solve
from hpcgpu.linalg.chol import CholeskyFactor
from hpcgpu.linalg.cyclic import to_cyclic

from _common import dist

rt = hpcgpu.init(sys.argv[1] if len(sys.argv) > 1 else "cpu")
comm = rt.comm
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(11)
GRIDS = {1: [(1, 1)], 2: [(1, 2), (2, 1)], 3: [(1, 3), (3, 1)], 4: [(2, 2), (4, 1)], 6: [(2, 3), (3, 2)]}
CASES = [  # n, nb, dtype, lower, nrhs
    (37, 3, "float64", True, 3), (50, 8, "float32", False, 2), (37, 1, "complex128", False, 1),
    (50, None, "float64", False, 4), (5, 8, "complex128", True, 2), (0, 2, "float64", True, 1),
    (1, 1, "float32", True, 1), (29, 4, "complex128", True, 3), (13, 3, "float32", False, 0),
    (23, 8, "float64", True, 5)]


def spd(n, dtype):
    x = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((n, n))
    return (x @ x.conj().T / max(n, 1) + np.eye(n)).astype(dtype)


def junk_in_other_triangle(g, lower):
    """``g`` with the triangle the factorization must not read replaced by other (finite) values."""
    j = rng.standard_normal(g.shape).astype(g.dtype) * 100
    return np.tril(g) + np.triu(j, 1) if lower else np.triu(g) + np.tril(j, -1)


def factor_error(g, f, lower):
    n = g.shape[0]
    r = f @ f.conj().T if lower else f.conj().T @ f
    return np.linalg.norm(g - r) / (np.linalg.norm(g) * n * np.finfo(g.dtype).eps)


def hpl_residual(a, x, b):
    inf = lambda m: np.abs(m).sum(axis=1).max()  # noqa: E731
    n = a.shape[0]
    return inf(a @ x - b) / (np.finfo(a.dtype).eps * (inf(a) * inf(x) + inf(b)) * n)


def main():
    cases = refusals = 0
    grids = GRIDS[size]
    for gi, dims in enumerate(grids):
        grid = hpcgpu.ProcessGrid(dims)
        for n, nb, dtype, lower, nrhs in CASES[gi::len(grids)]:  # grids share the cases: the suite stays fast
            g = spd(n, dtype)
            b = rng.standard_normal((n, nrhs)).astype(dtype)
            a = dist(junk_in_other_triangle(g, lower), grid)
            f = cholesky(a, lower=lower, nb=nb)
            assert f.gshape == (n, n) and f.dtype == np.dtype(dtype) and f.grid is grid
            assert _device.is_device_array(f.local) == _device.is_device_array(a.local)
            c, low = cho_factor(a, lower=lower, nb=nb)
            assert isinstance(c, CholeskyFactor) and low is lower and c.lower is lower
            bd = dist(b, grid)
            x1 = cho_solve((c, lower), bd)
            x2 = cho_solve((f, lower), bd, nb=nb)
            assert x1.gshape == (n, nrhs) and x1.dtype == np.dtype(dtype) and x1.grid is grid
            got, kept, x1, x2 = f.gather(), c.to_distmatrix().gather(), x1.gather(), x2.gather()
            if rank == 0 and n:
                assert np.array_equal(got, np.tril(got) if lower else np.triu(got)), (dims, n, nb, dtype)
                assert np.array_equal(got, kept), (dims, n, nb, dtype)
                err = factor_error(g, got, lower)
                assert err < 16, (dims, n, nb, dtype, lower, err)
                ref = np.linalg.cholesky(g.astype(np.complex128))
                ref = ref if lower else ref.conj().T
                assert np.allclose(got, ref, atol=100 * np.finfo(dtype).eps * n), (dims, n, nb, dtype, lower)
                if nrhs:
                    for x in (x1, x2):
                        res = hpl_residual(g, x, b)
                        assert res < 16, (dims, n, nb, dtype, lower, res)
            cases += 1
        # a factor on a padded row stride (cyclic.padded_empty): each rank's rows (and the upper form's) a multiple
        # of 512 bytes, so the padded array is the one factored, lower and upper (cholesky's upper form: the
        # transpose view to_cyclic gives with transposed=True, whose .T is the padded array; real and complex)
        n = 64 * size
        for dtype, lower in (("float64", True), ("complex128", False), ("float64", False)):
            g = spd(n, dtype)
            a = dist(junk_in_other_triangle(g, lower), grid)
            local, _ = to_cyclic(a, 16, triangle="lower" if lower else "upper", padded=True, transposed=not lower)
            work = local if lower else local.T
            assert _device.is_device_array(work) or work.strides[0] > work.shape[1] * work.itemsize, work.strides
            got = cholesky(a, lower=lower, nb=16).gather()
            if rank == 0:
                assert np.array_equal(got, np.tril(got) if lower else np.triu(got)), (dims, dtype)
                assert factor_error(g, got, lower) < 16, (dims, dtype, lower)
            cases += 1

        # A kept block-cyclic (DistMatrix.to_cyclic): factored in its own layout, the factor left there; the same
        # factor as the DistMatrix's at that nb, solves from it by HPL's residual
        for n, nb, dtype, lower in ((37, 4, "complex128", False), (29, 3, "float64", True), (6, 8, "float32", False)):
            g = spd(n, dtype)
            a = dist(junk_in_other_triangle(g, lower), grid)
            c = a.to_cyclic(nb)
            f = cholesky(c, lower=lower)
            assert isinstance(f, CyclicMatrix) and f.nb == nb and f.grid is grid and f.gshape == (n, n), f
            assert _device.is_device_array(f.local) == _device.is_device_array(a.local)
            kept, low = cho_factor(c, lower=lower)
            assert kept.layout.grid is grid and kept.nb == nb and low is lower
            rhs = rng.standard_normal((n, 2)).astype(dtype)
            x1 = cho_solve((kept, lower), dist(rhs, grid))
            x2 = solve(dist(g, grid).to_cyclic(nb), dist(rhs, grid), assume_a="pos")  # (reads the upper triangle)
            got, ref, x1, x2 = f.gather(), cholesky(a, lower=lower, nb=nb).gather(), x1.gather(), x2.gather()
            if rank == 0:
                assert np.allclose(got, ref, rtol=0, atol=8 * np.finfo(dtype).eps * n), (dims, n, nb, dtype, lower)
                assert np.array_equal(got, np.tril(got) if lower else np.triu(got)), (dims, n, nb, dtype)
                assert factor_error(g, got, lower) < 16, (dims, n, nb, dtype, lower)
                for x in (x1, x2):
                    assert hpl_residual(g, x, rhs) < 16, (dims, n, nb, dtype, lower)
            cases += 1

    if size == 1:  # one rank: the matrix is its own block-cyclic layout, one potrf and nothing else
        calls = []
        potrf = _local.potrf

        def counted(*args, **kw):
            calls.append(args[0].shape)
            return potrf(*args, **kw)

        _local.potrf = counted
        try:
            grid = hpcgpu.ProcessGrid((1, 1))
            for nb in (4, None):
                calls.clear()
                cholesky(dist(spd(30, "float64"), grid), nb=nb)
                assert calls == [(30, 30)], calls
                cases += 1
        finally:
            _local.potrf = potrf

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
    g = spd(50, "float64")
    g[36, 36] = 0  # the leading minors up to order 36 stay positive definite, that of order 37 is not
    notpd = dist(g, grid)
    for nb in (3, 8, None):
        refused(lambda nb=nb: cholesky(notpd, nb=nb), np.linalg.LinAlgError,
                "cholesky: A is not positive definite: the leading minor of order 37 is not (column 36 of 0..49)")
        refused(lambda nb=nb: cho_factor(notpd, lower=True, nb=nb), np.linalg.LinAlgError,
                "cho_factor: A is not positive definite: the leading minor of order 37 is not (column 36 of 0..49)")
    neg = dist(-np.eye(6), grid)
    refused(lambda: cholesky(neg, nb=2), np.linalg.LinAlgError,
            "cholesky: A is not positive definite: the leading minor of order 1 is not (column 0 of 0..5)")
    g = spd(11, "float64")
    g[4, 9] = np.nan
    refused(lambda: cholesky(dist(g, grid), nb=2), ValueError,
            "cholesky: A holds NaN or inf (at row 4, column 9): the solvers need finite values")
    ok = dist(spd(11, "float64"), grid)
    c = cho_factor(ok, nb=3)
    b = rng.standard_normal((11, 2))
    b[7, 1] = np.inf
    refused(lambda: cho_solve(c, dist(b, grid)), ValueError,
            "cho_solve: B holds NaN or inf (at row 7, column 1): the solvers need finite values")
    cho_solve(c, dist(np.full((11, 2), 1e308), grid))  # finite, its sum overflows (the check's first scan): taken
    cases += 1
    refused(lambda: cho_solve(c, dist(np.ones((7, 2)), grid)), ValueError,
            "cho_solve: shapes do not conform: A is 11 x 11, B has 7 rows (A's 11 needed)")
    refused(lambda: cho_solve(c, dist(np.ones((11, 2), "float32"), grid)), TypeError,
            "cho_solve: A is float64 and B is float32: give both one dtype (b.astype(a.dtype))")
    refused(lambda: cho_solve((c[0], True), dist(np.ones((11, 2)), grid)), ValueError,
            "cho_solve: lower=True but the factor was made with lower=False")
    refused(lambda: cho_solve(ok, dist(np.ones((11, 2)), grid)), TypeError,
            "cho_solve: c_and_lower must be (factor, lower) with the factor from cho_factor or cholesky (a "
            "CholeskyFactor or DistMatrix), got DistMatrix")
    refused(lambda: cholesky(dist(np.eye(4, dtype="float16"), grid)), TypeError,
            "cholesky: A is float16; the solvers take float32, float64, complex64, complex128 (a.astype(\"float64\"))")
    refused(lambda: cholesky(dist(np.ones((5, 4)), grid)), ValueError, "cholesky: A must be square, got 5 x 4")
    refused(lambda: cholesky(ok, nb=0), ValueError, "cholesky: nb must be >= 1, got 0")
    refused(lambda: cho_factor(ok, nb=2.0), TypeError,
            "cho_factor: nb must be an int (a block size, >= 1) or None, got float")
    refused(lambda: cholesky(ok, lower="yes"), TypeError, "cholesky: lower must be True or False, got 'yes'")
    refused(lambda: cholesky(np.eye(3)), TypeError,
            "cholesky: A must be an hpcgpu.DistMatrix or CyclicMatrix, got ndarray")
    # a CyclicMatrix: its own nb only; NaN named at its global place (the layout's); not positive definite alike
    c = ok.to_cyclic(3)
    refused(lambda: cholesky(c, nb=4), ValueError, "cholesky: nb=4 but A is block-cyclic with nb 3: leave nb out (A "
            "is factored in its own layout), or make A with a.to_distmatrix().to_cyclic(nb)")
    g = spd(11, "float64")
    g[4, 9] = np.nan
    refused(lambda: cho_factor(dist(g, grid).to_cyclic(2)), ValueError,
            "cho_factor: A holds NaN or inf (at row 4, column 9): the solvers need finite values")
    refused(lambda: cholesky(notpd.to_cyclic(4), lower=True), np.linalg.LinAlgError,
            "cholesky: A is not positive definite: the leading minor of order 37 is not (column 36 of 0..49)")
    if size > 1:
        refused(lambda: cholesky(ok, nb=2 + (rank == 1)), ValueError,
                "cholesky: nb differs across ranks: 2 on %s, 3 on rank 1"
                % {2: "rank 0", 3: "ranks 0, 2"}.get(size, f"ranks 0, 2-{size - 1}"))
        # one rank's own refusal (nb=0) is agreed with the others' arguments before any other collective
        refused(lambda: cholesky(ok, nb=0 if rank == 1 else 2), ValueError,
                "cholesky: nb differs across ranks: 2 on %s, 0 on rank 1"
                % {2: "rank 0", 3: "ranks 0, 2"}.get(size, f"ranks 0, 2-{size - 1}"))

    counts = comm.gather((cases, refusals))
    if rank == 0:
        print("ok", "gpu" if _device.is_device_array(ok.local) else "cpu", *(f"{c}/{r}" for c, r in counts),
              flush=True)


main()  # an assert on one rank aborts the launch (_common)
sys.exit(0)
