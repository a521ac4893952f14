"""The host BLAS: NumPy's own library for every GEMM and update, one thread pool per rank."""

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from hpcgpu import _blas
from hpcgpu import _gemm


def _operand(rng, shape, dtype, order):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    return np.asfortranarray(x) if order == "F" else np.ascontiguousarray(x)


def test_numpy_blas_is_found_and_bound():
    lib = _blas.numpy_blas()
    assert lib is not None, threadpool_info()
    assert set(lib.gemms) == set("sdcz") and set(lib.axpys) == set("sd")
    scipys = ("scipy.libs", f"{os.sep}scipy{os.sep}")  # where SciPy's own BLAS lives (wheels, source builds)
    assert not any(d in lib.filepath for d in scipys), lib.filepath  # NumPy's, not SciPy's


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("orders", ["CC", "FC", "CF", "FF"])
@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
def test_gemm_is_blas_gemm(dtype, orders, beta):
    rng = np.random.default_rng(0)
    a = _operand(rng, (7, 5), dtype, orders[0])
    b = _operand(rng, (5, 3), dtype, orders[1])
    c0 = _operand(rng, (7, 3), dtype, "C")
    c = c0.copy()
    if beta == 0:
        c[0, 0] = np.nan  # BLAS: beta = 0 ignores C
    assert _blas.gemm(a, b, c, 2.0, beta)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    want = 2.0 * (a.astype(wide) @ b.astype(wide)) + (beta * c0.astype(wide) if beta else 0)
    tol = 1e-12 if np.dtype(dtype) in (np.float64, np.complex128) else 1e-5
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol)


def test_gemm_declines_what_it_cannot_take():
    a = np.ones((4, 4))
    assert not _blas.gemm(a[:, ::2], a[::2], np.zeros((4, 2)), 1.0, 0.0)  # strided operand
    c = np.asfortranarray(np.zeros((4, 3)))
    assert not _blas.gemm(a, a[:, :3].copy(), c, 1.0, 0.0) and not c.any()  # a C that is not C-ordered
    assert not _blas.gemm(a.astype(np.float32), a, np.zeros((4, 4)), 1.0, 0.0)  # mixed dtypes


def test_summa_local_gemm_accumulates_through_numpys_blas(monkeypatch):
    """_gemm.gemm with beta goes to NumPy's BLAS, not SciPy's (whose pool would fight NumPy's)."""
    monkeypatch.setattr(_gemm, "_scipy_gemm", lambda dtype: pytest.fail("SciPy's BLAS was called"))
    rng = np.random.default_rng(1)
    a, b = rng.random((6, 4)), rng.random((4, 5))
    c = rng.random((6, 5))
    want = a @ b + c
    _gemm.gemm(a, b, c, beta=1.0)
    np.testing.assert_allclose(c, want, rtol=1e-13)


def test_sgd_update_runs_on_numpys_blas(monkeypatch):
    """The optimizer's axpy/scal come from NumPy's library too (SciPy's would wake a second pool)."""
    import scipy.linalg.blas

    from hpcgpu.optim import SGD

    monkeypatch.setattr(scipy.linalg.blas, "get_blas_funcs", lambda *a, **k: pytest.fail("SciPy's BLAS"))
    p = np.arange(5, dtype=np.float32)
    opt = SGD(1.0, momentum=0.5, weight_decay=0.1)
    state = opt.init(p)
    assert _blas.vector_ops(p, state["velocity"])
    g = np.ones(5, np.float32)
    want_v = 0.5 * 0 + 0.25 * g + 0.1 * np.arange(5, dtype=np.float32)
    opt.update(g, state, p, lr=2.0, scale=0.25)
    np.testing.assert_allclose(state["velocity"], want_v, rtol=1e-6)
    np.testing.assert_allclose(p, np.arange(5) - 2.0 * want_v, rtol=1e-6)
    opt.update(g, state, p, lr=1.0, scale=1.0)  # momentum: v = 0.5 v + g + 0.1 p
    want_v2 = 0.5 * want_v + g + 0.1 * (np.arange(5) - 2.0 * want_v)
    np.testing.assert_allclose(state["velocity"], want_v2, rtol=1e-6)


def test_axpby_axpy_scal():
    x, y = np.arange(4.0), np.ones(4)
    assert _blas.axpby(2.0, x, 3.0, y)
    np.testing.assert_array_equal(y, 2 * np.arange(4.0) + 3)
    assert _blas.axpy(-1.0, x, y) and _blas.scal(0.5, y)
    np.testing.assert_array_equal(y, 0.5 * (np.arange(4.0) + 3))
    assert not _blas.axpy(1.0, x[::2], y[:2])  # strided: declined, nothing done
