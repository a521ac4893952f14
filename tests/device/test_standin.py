"""Tests of the CuPy stand-in (tests/device/standin/cupy) itself.

The stand-in is imported per test with a clean state and its own
environment, and removed from ``sys.modules`` afterwards, so other tests
never see it.
"""

import ctypes
import re
import importlib
import os

import numpy as np
import pytest

import _mpi

from _standin_env import ENV, HERE, ROOT, STANDIN


def landed(a):
    """What MPI would read: the bytes behind the CUDA array interface pointer (no synchronization)."""
    cai = a.__cuda_array_interface__
    assert cai["strides"] is None
    n = int(np.prod(cai["shape"]))
    buf = (ctypes.c_char * (n * a.itemsize)).from_address(cai["data"][0])
    return np.frombuffer(buf, dtype=a.dtype, count=n).reshape(cai["shape"]).copy()


def poke(a, values):
    """Write ``values`` where MPI would (a receive into the landed bytes)."""
    cai = a.__cuda_array_interface__
    values = np.ascontiguousarray(values, dtype=a.dtype)
    ctypes.memmove(cai["data"][0], values.ctypes.data, values.nbytes)


def sync(cp):
    cp.cuda.get_current_stream().synchronize()


# ---------------------------------------------------------------------------
# the landing model
# ---------------------------------------------------------------------------


def test_import_finds_the_standin(cp):
    assert cp.__name__ == "cupy"
    assert cp.__version__ == "13.99.0+standin"
    assert cp.__file__.startswith(STANDIN)
    assert cp.get_array_module(cp.zeros(1)) is cp and cp.get_array_module(np.zeros(1)) is np


def test_kernels_land_only_at_synchronize(cp):
    x = cp.asarray(np.arange(4, dtype=np.float32))
    assert np.isnan(landed(x)).all()  # the host-to-device copy is queued, not landed
    sync(cp)
    np.testing.assert_array_equal(landed(x), np.arange(4))
    y = x * 2 + 1
    assert np.isnan(landed(y)).all()  # new memory is poison
    x += 10
    np.testing.assert_array_equal(landed(x), np.arange(4))  # stale: the old values
    sync(cp)
    np.testing.assert_array_equal(landed(y), 2 * np.arange(4) + 1)
    np.testing.assert_array_equal(landed(x), np.arange(4) + 10)


def test_poison_of_new_memory(cp):
    i = cp.empty(3, dtype=np.int64)
    assert (landed(i).view(np.uint8) == 0x5A).all()
    z = cp.zeros((2, 2))  # a memset is a queued write too
    assert np.isnan(landed(z)).all()
    cp.cuda.Device().synchronize()
    assert (landed(z) == 0).all()


def test_get_synchronizes_the_current_stream(cp):
    x = cp.arange(5, dtype=np.float64) ** 2
    np.testing.assert_array_equal(x.get(), np.arange(5) ** 2)
    np.testing.assert_array_equal(landed(x), np.arange(5) ** 2)  # get() synchronized
    assert x[2].item() == 4.0
    assert x.tolist() == [0.0, 1.0, 4.0, 9.0, 16.0]
    np.testing.assert_array_equal(cp.asnumpy(x), np.arange(5) ** 2)
    np.testing.assert_array_equal(cp.asnumpy([1, 2]), [1, 2])  # host input, as CuPy


def test_get_on_another_stream_does_not_land_this_one(cp):
    x = cp.arange(3, dtype=np.float32) + 1
    other = cp.cuda.Stream(non_blocking=True)
    assert np.isnan(x.get(stream=other)).all()  # as CuPy: only `other` was synchronized
    np.testing.assert_array_equal(x.get(), [1, 2, 3])


def test_exposed_memory_takes_external_writes(cp):
    x = cp.zeros(4, dtype=np.float64)
    sync(cp)
    poke(x, [1, 2, 3, 4])  # "MPI" wrote into the exposed buffer
    np.testing.assert_array_equal((x * 10).get(), [10, 20, 30, 40])
    x += 1
    np.testing.assert_array_equal(x.get(), [2, 3, 4, 5])
    # a kernel still pending keeps its bytes: the external write there is lost, the rest is taken
    y = cp.zeros(4, dtype=np.float64)
    sync(cp)
    y[:2] = 7.0  # pending
    poke(y, [1, 1, 1, 1])
    np.testing.assert_array_equal((y + 0).get(), [7, 7, 1, 1])


# ---------------------------------------------------------------------------
# strictness
# ---------------------------------------------------------------------------


def test_implicit_conversion_to_numpy_raises(cp):
    x = cp.arange(3, dtype=np.float32)
    msg = "Implicit conversion to a NumPy array is not allowed"
    for f in (np.asarray, np.array, lambda a: np.array([a, a]), lambda a: np.ascontiguousarray(a)):
        with pytest.raises(TypeError, match=msg):
            f(x)
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        np.concatenate([x, np.zeros(3)])  # dispatched to the stand-in, which refuses host arrays
    with pytest.raises(TypeError):
        np.array(list(x))  # iteration gives device arrays, as CuPy
    assert all(isinstance(v, cp.ndarray) and v.shape == () for v in x)
    with pytest.raises(TypeError, match="no implementation found"):
        np.linalg.norm(x)
    assert not hasattr(x, "__dlpack__")
    with pytest.raises(TypeError):
        memoryview(x)


def test_numpy_functions_dispatch_to_the_device(cp):
    x = cp.arange(4, dtype=np.float64)
    for r in (np.exp(x), np.sum(x), np.add(x, 1), np.concatenate([x, x]), np.maximum(x, 2.0)):
        assert isinstance(r, cp.ndarray)
    assert float(np.sum(x)) == 6.0


def test_scalar_conversions_synchronize_as_in_cupy(cp):
    x = cp.arange(4, dtype=np.float64) + 1
    assert float(x[1]) == 2.0 and int(x[2]) == 3 and bool(x[0])
    assert bool(cp.isfinite(x).all())
    with pytest.raises(ValueError, match="more than one element is ambiguous"):
        bool(x)
    with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
        len(x[0])
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        iter(x[0])


def test_strict_host_mode_refuses_implicit_host_reads(load):
    cp = load(HPCGPU_STANDIN_STRICT_HOST=1)
    x = cp.arange(3, dtype=np.float64)
    for f in (float, int, complex, bool, list, iter):
        with pytest.raises(TypeError, match="HPCGPU_STANDIN_STRICT_HOST"):
            f(x[0] if f is not list and f is not iter else x)
    assert x[1].item() == 1.0 and x.tolist() == [0.0, 1.0, 2.0]


def test_nonblocking_get_is_filled_at_the_next_synchronize(cp):
    x = cp.arange(3, dtype=np.float32) + 1
    h = x.get(blocking=False)
    assert np.isnan(h).all()
    sync(cp)
    np.testing.assert_array_equal(h, [1, 2, 3])


def test_host_arrays_do_not_mix_with_device_arrays(cp):
    x = cp.ones((2, 2), dtype=np.float32)
    h = np.ones((2, 2), dtype=np.float32)
    for f in (lambda: x + h, lambda: h + x, lambda: x * h, lambda: cp.matmul(x, h), lambda: x @ h,
              lambda: cp.maximum(x, h), lambda: cp.where(x > 0, h, x)):
        with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
            f()
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray cannot be used for fill"):
        x[...] = h
    with pytest.raises(TypeError, match="Output arguments must be cupy.ndarray"):
        cp.maximum(x, 0, out=h)
    x[...] = np.float32(3)  # scalars are fine
    x[0] = 2
    np.testing.assert_array_equal((x * 2.0 + np.float32(1)).get(), [[5, 5], [7, 7]])


def test_get_argument_checks(cp):
    x = cp.arange(6, dtype=np.float64).reshape(2, 3)
    with pytest.raises(TypeError, match="Only numpy.ndarray can be obtained fromcupy.ndarray"):
        x.get(out=[0] * 6)
    with pytest.raises(TypeError, match="float32 array cannot be obtained from float64 array"):
        x.get(out=np.empty((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"Shape mismatch. Expected shape: \(2, 3\), actual shape: \(3, 2\)"):
        x.get(out=np.empty((3, 2)))
    with pytest.raises(RuntimeError, match="`out` cannot be specified when copying to non-contiguous ndarray"):
        x.get(out=np.empty((2, 6))[:, ::2])
    f = np.empty((2, 3), order="F")
    assert x.get(out=f) is f
    np.testing.assert_array_equal(f, np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(x.T.get(), np.arange(6).reshape(2, 3).T)
    assert x.get(order="F").flags.f_contiguous
    assert cp.empty((0, 3)).get().shape == (0, 3)


def test_set_argument_checks_and_queueing(cp):
    x = cp.empty((2, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="Only numpy.ndarray can be set to cupy.ndarray"):
        x.set([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(TypeError, match="float64 array cannot be set to float32 array"):
        x.set(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"Shape mismatch. Old shape: \(2, 3\), new shape: \(3, 2\)"):
        x.set(np.zeros((3, 2), np.float32))
    with pytest.raises(RuntimeError, match="Cannot set to non-contiguous array"):
        x[:, ::2].set(np.zeros((2, 2), np.float32))
    x.set(np.full((2, 3), 5, np.float32))
    assert np.isnan(landed(x)).all()  # a queued copy
    sync(cp)
    assert (landed(x) == 5).all()


def test_out_arguments_must_be_device_arrays_of_the_right_shape(cp):
    a = cp.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(ValueError):
        a.sum(axis=0, out=cp.empty(3, np.float32))
    with pytest.raises(TypeError):
        a.sum(axis=0, out=np.empty(4, np.float32))
    with pytest.raises(ValueError, match="Output array has an invalid size"):
        cp.matmul(a, a.T, out=cp.empty((3, 4), np.float32))
    with pytest.raises(ValueError, match="Output shape mismatch"):
        cp.take(a, cp.arange(2), axis=0, out=cp.empty((3, 4), np.float32))
    out = cp.empty(4, np.float32)
    assert a.sum(axis=0, out=out) is out
    np.testing.assert_array_equal(out.get(), np.arange(12).reshape(3, 4).sum(0))


def test_numpy_mlp_operations_match_numpy(cp):
    rng = np.random.default_rng(0)
    z, y = rng.standard_normal((5, 3)), rng.integers(0, 3, 5)
    zd, yd = cp.asarray(z), cp.asarray(y)
    zd -= zd.max(axis=1, keepdims=True)
    cp.exp(zd, out=zd)
    zd /= zd.sum(axis=1, keepdims=True)
    zd[cp.arange(5), yd] -= 1
    ref = np.exp(z - z.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    ref[np.arange(5), y] -= 1
    np.testing.assert_allclose(zd.get(), ref)
    assert int((cp.argmax(zd, axis=1) == yd).sum()) == int((ref.argmax(1) == y).sum())
    rows = cp.asarray([4, 0, 2])
    out = cp.empty((3, 3))
    cp.take(zd, rows, axis=0, out=out)
    np.testing.assert_allclose(out.get(), ref[[4, 0, 2]])
    with pytest.raises(IndexError):
        cp.take(zd, cp.asarray([5]), axis=0)  # a GPU would wrap silently; the stand-in refuses


def test_views_share_memory(cp):
    flat = cp.zeros(10, dtype=np.float32)
    w = flat[2:8].reshape(2, 3)
    w += 1
    assert w.base is flat and not w.flags.owndata
    assert w.T.flags.f_contiguous and not w.T.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(flat.get(), [0, 0, 1, 1, 1, 1, 1, 1, 0, 0])
    assert w.T.__cuda_array_interface__["strides"] == (4, 12)
    assert cp.empty((0, 3)).__cuda_array_interface__["data"] == (0, False)


# ---------------------------------------------------------------------------
# cuBLAS
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("ashape,bshape,fails", [
    ((0, 4), (4, 6), True),  # m = 0: F-ordered empty a, lda = 0 < 1
    ((3, 0), (0, 6), True),  # k = 0: ldb = 0 < 1
    ((3, 4), (4, 0), False),  # n = 0: all leading dimensions valid, cuBLAS returns at once
])
def test_gemm_on_an_empty_block_fails_like_cublas(cp, ashape, bshape, fails):
    from cupy import cublas

    a, b = cp.ones(ashape), cp.ones(bshape)
    out = cp.zeros((ashape[0], bshape[1]))
    if fails:
        with pytest.raises(cp.cuda.cublas.CUBLASError, match="CUBLAS_STATUS_INVALID_VALUE") as info:
            cublas.gemm("N", "N", a, b, out=out, beta=1.0)
        assert info.value.status == 7
    else:
        assert cublas.gemm("N", "N", a, b, out=out, beta=1.0) is out
    assert cp.matmul(a, b).shape == out.shape  # matmul never calls cuBLAS for empty operands


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("transa,transb", [("N", "N"), ("T", "N"), ("N", "T"), ("H", "N")])
@pytest.mark.parametrize("order", ["C", "F"])
def test_gemm_matches_numpy(cp, dtype, transa, transb, order):
    from cupy import cublas

    rng = np.random.default_rng(1)
    m, n, k = 4, 5, 3

    def rand(*shape):
        x = rng.standard_normal(shape)
        return (x + 1j * rng.standard_normal(shape) if np.iscomplexobj(dtype(0)) else x).astype(dtype)

    a = rand(*((m, k) if transa == "N" else (k, m)))
    b = rand(*((k, n) if transb == "N" else (n, k)))
    c = np.asarray(rand(m, n), order=order)
    op = {"N": lambda x: x, "T": lambda x: x.T, "H": lambda x: x.conj().T}
    ref = 0.5 * op[transa](a) @ op[transb](b) + 2.0 * c
    cd = cp.array(c, order=order)
    assert cublas.gemm(transa, transb, cp.asarray(a), cp.asarray(b), out=cd, alpha=0.5, beta=2.0) is cd
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(cd.get(), ref, rtol=tol, atol=tol)
    new = cublas.gemm(transa, transb, cp.asarray(a), cp.asarray(b))
    assert new.flags.f_contiguous
    np.testing.assert_allclose(new.get(), op[transa](a) @ op[transb](b), rtol=tol, atol=tol)


def test_gemm_with_beta_zero_ignores_nan_in_out(cp):
    from cupy import cublas

    a, b = cp.ones((2, 3)), cp.ones((3, 2))
    out = cp.empty((2, 2))  # poison
    cublas.gemm("N", "N", a, b, out=out, beta=0.0)
    np.testing.assert_array_equal(out.get(), np.full((2, 2), 3.0))


def test_gemm_log_and_tf32(load):
    cp = load()
    a = cp.asarray(np.full((4, 3), 1 + 2.0**-15, np.float32))
    b = cp.ones((3, 2), dtype=np.float32)
    exact = (a @ b).get()
    from cupy import cublas

    cublas.gemm("N", "N", cp.ones((2, 2)), cp.ones((2, 2)))
    log = cp._standin.gemm_log()
    assert [(e["api"], e["dtype"], e["m"], e["n"], e["k"], e["compute_type"]) for e in log] == [
        ("matmul", "float32", 4, 2, 3, "CUBLAS_COMPUTE_32F"), ("gemm", "float64", 2, 2, 2, "CUBLAS_COMPUTE_64F")]
    assert all(e["math_mode"] == "CUBLAS_DEFAULT_MATH" for e in log)
    cp._standin.clear_gemm_log()
    assert cp._standin.gemm_log() == []

    cp = load(CUPY_TF32="1")  # read at the first float32 matmul, as CuPy
    a, b = cp.asarray(a.get()), cp.asarray(b.get())
    tf32 = (a @ b).get()
    (cp.ones((2, 2)) @ cp.ones((2, 2))).get()
    from cupy import cublas

    cublas.gemm("N", "N", a, b)
    log = cp._standin.gemm_log()
    assert [e["compute_type"] for e in log] == [
        "CUBLAS_COMPUTE_32F_FAST_TF32", "CUBLAS_COMPUTE_64F", "CUBLAS_COMPUTE_32F"]  # not for cublas.gemm
    np.testing.assert_array_equal(exact, np.float32(3 * (1 + 2.0**-15)))
    np.testing.assert_array_equal(tf32, np.float32(3.0))  # inputs rounded to 10 mantissa bits


# ---------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------


def test_pinned_memory(cp):
    pool = cp.get_default_pinned_memory_pool()
    assert cp._standin.pinned_stats() == (0, 0)
    mem = cp.cuda.alloc_pinned_memory(1000)
    assert mem.size() == 1024 and mem.ptr != 0  # 512-byte units, next power of two (CuPy's pool)
    host = np.frombuffer(mem, dtype=np.uint8, count=1000)
    assert host.ctypes.data == mem.ptr and (host == 0x5A).all()
    assert cp._standin.pinned_stats() == (1, 1024)
    del mem
    assert cp._standin.pinned_stats() == (1, 1024)  # the array holds the memory
    del host
    assert cp._standin.pinned_stats() == (0, 0)
    assert pool.n_free_blocks() == 1
    cp.cuda.alloc_pinned_memory(600)
    assert pool.n_free_blocks() == 1  # 600 -> 1024: reused, then freed again
    pool.free_all_blocks()
    assert pool.n_free_blocks() == 0
    assert cp._standin.pinned_allocations_total() == 2


def test_device_memory_pool(cp):
    pool = cp.get_default_memory_pool()
    base = pool.used_bytes()
    a = cp.empty(1000, dtype=np.float64)
    assert pool.used_bytes() - base == 8192
    cp._standin.reset_peak()
    b = cp.empty(100, dtype=np.float32)
    assert pool.used_bytes() - base == 8192 + 512
    del a, b
    assert pool.used_bytes() == base
    assert cp._standin.peak_device_bytes() == base + 8192 + 512
    assert pool.total_bytes() > pool.used_bytes()
    pool.free_all_blocks()
    assert pool.total_bytes() == pool.used_bytes()


def test_out_of_memory(load):
    cp = load(HPCGPU_STANDIN_MEMORY=4096)
    with pytest.raises(cp.cuda.memory.OutOfMemoryError, match="Out of memory allocating 8,192 bytes"):
        cp.empty(1024, dtype=np.float64)


# ---------------------------------------------------------------------------
# devices, contexts, failure modes
# ---------------------------------------------------------------------------


def test_contexts_are_created_lazily(load):
    cp = load(HPCGPU_STANDIN_DEVICES=2)
    assert cp.cuda.runtime.getDeviceCount() == 2
    cp.cuda.runtime.getDeviceProperties(0)
    assert cp._standin.contexts() == []
    cp.cuda.Device(1).use()
    cp.zeros(3) + 1
    assert cp._standin.contexts() == [1]
    assert cp.cuda.runtime.getDeviceProperties(1)["name"] == b"Stand-in GPU"
    assert cp.cuda.Device(0).compute_capability == "90"  # CuPy sets the device for this
    assert cp._standin.contexts() == [0, 1]


def test_switching_back_creates_the_previous_context(load):
    cp = load(HPCGPU_STANDIN_DEVICES=2)
    with cp.cuda.Device(1):
        cp.zeros(1)
    assert cp._standin.contexts() == [0, 1]  # as CuPy: __exit__ calls cudaSetDevice(0)
    cp = load(HPCGPU_STANDIN_DEVICES=2)
    cp.cuda.Device(1).use()
    cp.cuda.Device(1).synchronize()
    assert cp._standin.contexts() == [1]


def test_context_on_gpu0_before_binding(load):
    cp = load(HPCGPU_STANDIN_DEVICES=2)
    x = cp.zeros(2)  # before Device(1).use(): lands on device 0
    cp.cuda.Device(1).use()
    assert cp._standin.contexts() == [0, 1]
    with pytest.raises(ValueError, match=r"resides \(0\) is different from the current device \(1\)"):
        x + 1


def test_visible_devices(load):
    cp = load(HPCGPU_STANDIN_DEVICES=4, CUDA_VISIBLE_DEVICES="2,0")
    assert cp.cuda.runtime.getDeviceCount() == 2
    cp.cuda.Device(0).use()
    assert cp._standin.contexts() == [0] and cp._standin.contexts(physical=True) == [2]
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="cudaErrorInvalidDevice: invalid device ordinal"):
        cp.cuda.Device(2).use()
    for visible in ("", "5", "-1"):
        cp = load(HPCGPU_STANDIN_DEVICES=4, CUDA_VISIBLE_DEVICES=visible)
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as info:
            cp.cuda.runtime.getDeviceCount()
        assert str(info.value) == "cudaErrorNoDevice: no CUDA-capable device is detected"
        assert not cp.is_available()


def test_fail_import(load):
    with pytest.raises(ImportError, match="Failed to import CuPy"):
        load(HPCGPU_STANDIN_FAIL="import")


def test_fail_driver(load):
    cp = load(HPCGPU_STANDIN_FAIL="driver")
    msg = "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as info:
        cp.cuda.runtime.getDeviceCount()
    assert str(info.value) == msg and info.value.status == 35
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="InsufficientDriver"):
        cp.zeros(1)
    assert not cp.is_available()


def test_fail_nvrtc(load):
    cp = load(HPCGPU_STANDIN_FAIL="nvrtc")
    msg = ("CuPy failed to load libnvrtc.so.12: OSError: libnvrtc.so.12: "
           "cannot open shared object file: No such file or directory")
    x = cp.asarray(np.arange(4, dtype=np.float32))
    y = cp.zeros(4, np.float32)
    y[...] = x
    y.set(np.ones(4, np.float32))
    z = x.copy()
    (x @ cp.asarray(np.ones((4, 2), np.float32))).get()  # cuBLAS needs no NVRTC
    for kernel in (lambda: x + 1, lambda: cp.exp(x), lambda: x.sum(), lambda: cp.ones(3), lambda: x[cp.arange(2)]):
        with pytest.raises(RuntimeError) as info:
            kernel()
        assert str(info.value) == msg
    np.testing.assert_array_equal(z.get(), np.arange(4))


def test_fail_cublas(load):
    cp = load(HPCGPU_STANDIN_FAIL="cublas")
    msg = "libcublas.so.12: cannot open shared object file"
    a = cp.ones((2, 2), np.float32)
    for use in (lambda: a @ a, lambda: cp.matmul(a, a), lambda: cp.cuda.device.get_cublas_handle(),
                lambda: importlib.import_module("cupy.cublas")):
        with pytest.raises(ImportError, match=msg):
            use()
    np.testing.assert_array_equal((a + 1).get(), np.full((2, 2), 2))


# ---------------------------------------------------------------------------
# streams and events
# ---------------------------------------------------------------------------


def test_streams_land_their_own_kernels(cp):
    x = cp.arange(3, dtype=np.float64)
    sync(cp)
    s2 = cp.cuda.Stream(non_blocking=True)
    with s2:
        assert cp.cuda.get_current_stream() is s2
        y = x * 2
    assert cp.cuda.get_current_stream() is cp.cuda.Stream.null
    cp.cuda.Stream.null.synchronize()
    assert np.isnan(landed(y)).all()  # s2's kernel: not landed by the null stream
    s2.synchronize()
    np.testing.assert_array_equal(landed(y), [0, 2, 4])


def test_events(cp):
    x = cp.arange(3, dtype=np.float64)
    s2 = cp.cuda.Stream(non_blocking=True)
    start = cp.cuda.Event()
    start.record()
    with s2:
        y = x + 1
    done = s2.record()
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="cudaErrorNotReady"):
        cp.cuda.get_elapsed_time(start, done)
    cp.cuda.Stream.null.wait_event(done)
    cp.cuda.Stream.null.synchronize()  # lands what s2 had queued before the record
    np.testing.assert_array_equal(landed(y), [1, 2, 3])
    done.synchronize()
    assert cp.cuda.get_elapsed_time(start, done) >= 0.0


def test_legacy_null_stream_waits_for_blocking_streams(cp):
    x = cp.arange(3, dtype=np.float64)
    sync(cp)
    s = cp.cuda.Stream()  # blocking
    with s:
        y = x + 5
    z = x * 1  # a null-stream kernel after it waits for it (CUDA's legacy default stream)
    cp.cuda.Stream.null.synchronize()
    np.testing.assert_array_equal(landed(y), [5, 6, 7])
    np.testing.assert_array_equal(landed(z), [0, 1, 2])


# ---------------------------------------------------------------------------
# through mpi4py
# ---------------------------------------------------------------------------


@pytest.mark.mpi
def test_mpi_reads_only_landed_memory():
    env = {"PYTHONPATH": STANDIN + os.pathsep + ROOT}
    for var in ENV:
        env[var] = None
    p = _mpi.run(2, [os.path.join(HERE, "mpi_standin_check.py")], timeout=60, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(re.findall(r"OK (\d)", p.stdout)) == ["0", "1"], p.stdout  # the ranks' lines may interleave


def test_elementwise_kernel_compiles_its_c_and_fails_as_nvrtc_would(cp):
    """The stand-in compiles a kernel's own C++ for the host: results from the C as written, and a kernel
    that would not compile on a GPU (a const input written, an unknown name) does not compile here."""
    z = cp.asarray(np.array([[1.0, -2.0, np.nan], [0.5, -0.1, 3.0]], np.float32))
    b = cp.asarray(np.array([0.1, 0.2, 0.3], np.float32))
    k = cp.ElementwiseKernel("T b", "T z", "T v = z + b; z = v <= (T)0 ? (T)0 : v", "bias_relu")
    cp._standin.reset_counters()
    k(b, z)
    assert cp._standin.counters()["launches"] == 1
    want = np.maximum(np.array([[1.1, -1.8, np.nan], [0.6, 0.1, 3.3]], np.float32), 0)
    np.testing.assert_allclose(z.get(), want, rtol=1e-6)  # NaN kept, as numpy.maximum
    out = cp.ElementwiseKernel("T a, T c", "T y", "y = a * c + (T)1", "axpb")(z, b)
    assert out.shape == (2, 3) and out.dtype == np.float32
    from cupy.cuda.compiler import CompileException

    for bad in ("a = c", "y = undefined_name", "y = a +", "y = __syncthreads()"):
        with pytest.raises(CompileException):
            cp.ElementwiseKernel("T a, T c", "T y", bad, "bad")(z, b)
    with pytest.raises(CompileException):  # a raw input is const too
        cp.ElementwiseKernel("raw T a, T c", "T y", "a[i] = c; y = c", "bad")(z, b)
    with pytest.raises(NotImplementedError):
        cp.ElementwiseKernel("T a", "T y", "y = a", "k", preamble="#define X 1")
    with pytest.raises(TypeError, match="Type is mismatched"):
        cp.ElementwiseKernel("T a, T c", "T y", "y = a + c", "k")(z, cp.ones(3, np.float64))
    # CUDA's max drops a NaN (fmax): a kernel that relied on it to keep one fails here as on a GPU
    m = cp.ElementwiseKernel("T a, T c", "T y", "y = max(a, c)", "k")(cp.asarray(np.array([np.nan])), 1.0)
    assert m.get()[0] == 1.0
    # raw arguments, the element index i, an explicit scalar type, strided outputs written back
    rows = cp.asarray(np.arange(12, dtype=np.float64).reshape(4, 3))
    both = cp.zeros((4, 2), np.float64)
    cp.ElementwiseKernel("raw T r, int64 c", "T lo, T hi", "lo = r[i * c]; hi = r[i * c + c - 1]", "ends")(
        rows, 3, both[:, 0], both[:, 1])
    np.testing.assert_array_equal(both.get(), [[0, 2], [3, 5], [6, 8], [9, 11]])
