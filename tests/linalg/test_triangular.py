"""solve_triangular (PDTRSM) on the block-cyclic layout: the scaled residual of every kind of solve at 1-6 ranks,
and its refusals as one agreed line on every rank."""

import os

import numpy as np
import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch(nprocs, device="cpu"):
    p = _mpi.run(nprocs, [os.path.join(HERE, "triangular_checks.py"), device], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 2 and len(set(words[2:])) == 1, p.stdout
    assert words[1] == ("gpu" if device == "auto" and _mpi.standin() else "cpu" if device == "cpu" else words[1])
    cases, refusals = (int(x) for x in words[2].split("/"))
    assert cases >= 40 and refusals >= 9 + 2 * (nprocs > 1), p.stdout


@pytest.mark.mpi
@pytest.mark.host  # --device cpu: its device-path twin below is marked device
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3, 4, 6], [1, 3, 4]))
def test_every_solve_has_a_small_residual_and_every_refusal_is_one_line(nprocs):
    """Every grid of ``nprocs`` ranks (1xP, Px1, 2x2, 4x1, 2x3, 3x2), float32, float64, complex128, lower and upper,
    trans 0/1/2 (and "N"/"T"/"C"), unit diagonal, nb in {1, 3, 4, 8, default}, shapes no nb divides, empty blocks,
    junk in the triangle not read; then NaN in A or B, nonconforming B, another dtype, not square, nb=0, a bad
    trans, a non-bool flag, no DistMatrix, lower differing across ranks (tests/linalg/triangular_checks.py)."""
    _launch(nprocs)


@pytest.mark.device
@pytest.mark.mpi
def test_every_solve_on_the_device_path():
    """The same checks with the runtime's device (the stand-in's, in its pass): cuSOLVER's and cuBLAS's kernels."""
    _launch(2, "auto")


def _xps():
    """NumPy, and CuPy (the stand-in's in its pass) where a device is present."""
    from hpcgpu import _device

    cupy = _device.cupy_or_none()
    return [np] + ([cupy] if cupy is not None and _device.device_count() else [])


@pytest.mark.parametrize("dtype", ["float64", "complex64", "complex128"])
def test_gemm_update_into_a_strided_view_with_every_op_and_layout(dtype):
    """``C += alpha op(A) op(B)`` into a row-strided view for each op (none, transpose, conjugate transpose) of
    each operand given C-contiguous, Fortran-contiguous or strided, with imaginary parts: a conjugate transpose
    passed to BLAS as CblasConjTrans (no copy) must conjugate, the others must not."""
    from hpcgpu.linalg import _local

    rng = np.random.default_rng(5)
    eps = np.finfo(dtype).eps

    def mat(r, c):
        x = rng.standard_normal((r, c)) + (1j * rng.standard_normal((r, c)) if "complex" in dtype else 0)
        return x.astype(dtype)

    ops = {0: lambda x: x, 1: lambda x: x.T, 2: lambda x: x.conj().T}
    layouts = {"C": lambda x: np.ascontiguousarray(x), "F": lambda x: np.asfortranarray(x),
               "strided": lambda x: np.repeat(x, 2, axis=1)[:, ::2]}
    m, n, k = 5, 6, 3
    for ta, tb in [(ta, tb) for ta in ops for tb in ops]:
        for la, lb in [("C", "C"), ("F", "C"), ("C", "F"), ("strided", "C"), ("C", "strided")]:
            a = layouts[la](mat(m, k) if ta == 0 else mat(k, m))
            b = layouts[lb](mat(k, n) if tb == 0 else mat(n, k))
            big = mat(9, 12)
            want = big.copy()
            want[2:2 + m, 4:4 + n] += 0.5 * ops[ta](a) @ ops[tb](b)
            _local.gemm_update(big[2:2 + m, 4:4 + n], a, b, 0.5, trans_a=ta, trans_b=tb)
            assert np.allclose(big, want, atol=1e2 * eps), (ta, tb, la, lb)


@pytest.mark.device
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_the_local_kernels_of_every_side(dtype):
    """hpcgpu.linalg._local on host and device arrays: LAPACK's info of potrf and getrf, trsm on both sides with
    every op, and gemm_update into a strided view (a trailing block of a rank's local array)."""
    from hpcgpu import _device
    from hpcgpu.linalg import _local

    rng = np.random.default_rng(3)
    eps = np.finfo(dtype).eps
    x = rng.standard_normal((9, 9)) + (1j * rng.standard_normal((9, 9)) if dtype == "complex128" else 0)
    spd = (x @ x.conj().T + 9 * np.eye(9)).astype(dtype)
    bad = spd.copy()
    bad[5, 5] = -1
    t, b = np.tril(x + 9 * np.eye(9)).astype(dtype), rng.standard_normal((9, 4)).astype(dtype)
    for xp in _xps():
        host = _device.asnumpy
        for lower in (True, False):
            f, info = _local.potrf(xp.asarray(spd), lower)
            f = host(f)
            assert info == 0 and np.array_equal(f, np.tril(f) if lower else np.triu(f))
            assert np.linalg.norm((f @ f.conj().T if lower else f.conj().T @ f) - spd) < 100 * eps * np.linalg.norm(spd)
            assert _local.potrf(xp.asarray(bad), lower)[1] == 6
        for trans, op in ((0, t), (1, t.T), (2, t.conj().T), ("C", t.conj().T)):
            left = host(_local.trsm(xp.asarray(t), xp.asarray(b), True, trans))
            right = host(_local.trsm(xp.asarray(t), xp.asarray(b.T.copy()), True, trans, side="R"))
            assert np.allclose(op @ left, b, atol=1e3 * eps) and np.allclose(right @ op, b.T, atol=1e3 * eps)
        sing = rng.standard_normal((8, 3)).astype(dtype)
        sing[:, 1] = 0
        lu, piv, info = _local.getrf(xp.asarray(sing))
        assert info == 2 and isinstance(piv, np.ndarray) and piv.shape == (3,)
        c = rng.standard_normal((7, 7)).astype(dtype)
        want = c.copy()
        a, bb = rng.standard_normal((3, 2)).astype(dtype), rng.standard_normal((4, 2)).astype(dtype)
        want[2:5, 3:7] -= a @ bb.conj().T
        cd = xp.asarray(c)
        _local.gemm_update(cd[2:5, 3:7], xp.asarray(a), xp.asarray(bb), -1.0, trans_b=2)
        assert np.allclose(host(cd), want, atol=1e2 * eps)
