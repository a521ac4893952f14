"""The same code on NumPy and CuPy: each test runs on NumPy here and on CuPy where a GPU is present."""

import numpy as np
import pytest
from mpi4py import MPI

import hpcgpu
from hpcgpu import _device, _gemm
from hpcgpu.train import MLP

HAS_GPU = _device.device_count() > 0

pytestmark = pytest.mark.device  # every test here reaches the device path


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    if not HAS_GPU:
        pytest.skip("no CuPy or no GPU on this machine")
    import cupy

    return cupy


def test_mlp_gradient_matches_numpy(xp):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(33, 7)), rng.integers(0, 4, 33)
    ref = MLP([7, 12, 4], np, "float64", seed=2)
    ref.loss_and_grad(X, y)
    m = MLP([7, 12, 4], xp, "float64", seed=2)
    m.loss_and_grad(xp.asarray(X), xp.asarray(y))
    np.testing.assert_allclose(_device.asnumpy(m.grad), ref.grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_gemm_accumulates(xp, dtype):
    rng = np.random.default_rng(1)
    a, b, c = (rng.random(s).astype(dtype) for s in ((5, 4), (4, 6), (5, 6)))
    d = xp.array(c)  # a copy: np.asarray would alias c
    _gemm.gemm(xp.asarray(a), xp.asarray(b), d, beta=1.0)
    np.testing.assert_allclose(_device.asnumpy(d), c + a @ b, rtol=1e-5)


def test_one_rank_matmul(xp):
    g = hpcgpu.ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    a = hpcgpu.DistMatrix.random((20, 9), g, "float64", seed=1, xp=xp)
    b = hpcgpu.DistMatrix.random((9, 7), g, "float64", seed=2, xp=xp)
    c = hpcgpu.matmul(a, b, panel=2)
    assert c.xp is xp
    np.testing.assert_allclose(c.gather(), a.gather() @ b.gather(), rtol=1e-12)
    g.free()


@pytest.mark.parametrize("aware", [True, False])
def test_one_rank_collectives_both_paths(xp, aware):
    """At one rank no MPI call is made, on either path; the results are the identities."""
    if xp is not np and aware and not hpcgpu.detect_cuda_aware(MPI.COMM_SELF)[0]:
        pytest.skip("this MPI is not CUDA-aware: device pointers would crash it")
    a = xp.arange(10, dtype=xp.float64)
    out = xp.empty_like(a)
    hpcgpu.Allreduce(a, out, comm=MPI.COMM_SELF, cuda_aware=aware)
    np.testing.assert_array_equal(_device.asnumpy(out), np.arange(10.0))
    hpcgpu.Bcast(a, root=0, comm=MPI.COMM_SELF, cuda_aware=aware)
    hpcgpu.Ibcast(a, root=0, comm=MPI.COMM_SELF, cuda_aware=aware).Wait()
    np.testing.assert_array_equal(_device.asnumpy(a), np.arange(10.0))
