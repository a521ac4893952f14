"""CUDA graphs: the stand-in's capture and replay, hpcgpu's capture, the trainer's step graph.

The stand-in models what makes a graph go wrong on a GPU: nothing captured
runs until a launch, a replay reads and writes the memory captured (not
the arrays the code holds now), memory freed after the capture is an
illegal address at the replay, CuPy refuses ``cupy.matmul`` (it sets the
cuBLAS stream) and copies to the host while a stream captures, and a
synchronization invalidates the capture. Every test that starts ranks has
a timeout (``run_standin``).
"""

import numpy as np
import pytest

import _mpi
from _data import blobs, write_h5
from conftest import run_standin


def _capture(cp, fn):
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        try:
            fn()
        except BaseException:
            try:
                s.end_capture()  # a stream left capturing would fail every later synchronization
            except Exception:
                pass
            raise
        return s.end_capture()


# ---------------------------------------------------------------------------
# the stand-in
# ---------------------------------------------------------------------------


def test_captured_work_runs_only_when_launched_and_reads_the_memory_of_then(cp):
    x = cp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    z = cp.zeros((2, 3), cp.float32)
    k = cp.ElementwiseKernel("T x", "T z", "z = x * (T)2 + (T)1", "twice_plus_one")
    before = cp._standin.counters()

    kept = []

    def work():
        k(x, z)
        kept.append(z.sum(axis=0))  # a new array: alive as long as the graph is replayed

    g = _capture(cp, work)
    assert cp._standin.counters() == before  # nothing launched
    np.testing.assert_array_equal(z.get(), 0)  # nothing ran
    cp._standin.reset_counters()
    g.launch()
    c = cp._standin.counters()
    assert c["launches"] == 1 and c["graph_launches"] == 1
    np.testing.assert_array_equal(z.get(), 2 * np.arange(6).reshape(2, 3) + 1)
    np.testing.assert_array_equal(kept[0].get(), [8, 12, 16])
    x[...] = cp.full((2, 3), 5, cp.float32)  # new input in the same memory: the replay sees it
    g.launch()
    np.testing.assert_array_equal(z.get(), 11)
    x = cp.full((2, 3), 7, cp.float32)  # a new array; the old one, which the graph reads, is freed
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        g.launch()


def test_a_replay_into_memory_freed_after_the_capture_is_an_illegal_address(cp):
    x = cp.ones(4, cp.float32)
    out = cp.zeros(4, cp.float32)

    def work():
        t = x * 2  # a temporary, freed when the function returns: the pool may hand it out again
        out[...] = t

    g = _capture(cp, work)
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        g.launch()


def test_capture_refuses_what_cupy_and_cuda_refuse(cp):
    x = cp.ones((2, 2), cp.float32)
    with pytest.raises(RuntimeError, match="default .legacy. stream"):
        cp.cuda.Stream.null.begin_capture()
    with pytest.raises(NotImplementedError, match="cuBLAS API during stream capture"):
        _capture(cp, lambda: x @ x)  # cupy.matmul sets the cuBLAS stream: CuPy refuses it
    with pytest.raises(RuntimeError, match="D2H transfers are disallowed"):
        _capture(cp, lambda: x.get())
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="cudaErrorStreamCaptureUnsupported"):
            s.synchronize()
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="cudaErrorStreamCaptureInvalidated"):
            s.end_capture()
    assert not s.is_capturing()


def test_every_cupy_cublas_call_is_refused_under_capture_but_cublas_itself_is_captured(cp):
    """CuPy's cuBLAS wrappers (``cupy.cublas.gemm``, ``cupy.cuda.cublas.gemmEx``) set the handle's stream to the
    current one first, which CuPy refuses under capture; cuBLAS's own ``cublasGemmEx`` (the library CuPy loaded,
    called through ctypes) runs on the handle's stream and is captured when that stream captures."""
    import ctypes

    from cupy import cublas
    from cupy.cuda import cublas as lib, device

    from hpcgpu import _device

    a = cp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = cp.asarray(np.ones((3, 2), np.float32))
    c = cp.zeros((2, 2), cp.float32)
    with pytest.raises(NotImplementedError, match="cuBLAS API during stream capture"):
        _capture(cp, lambda: cublas.gemm("N", "N", a, b, out=c))
    gemm_ex, why = _device._libcublas()
    assert gemm_ex is not None, why
    handle = device.get_cublas_handle()
    one, zero = ctypes.c_float(1), ctypes.c_float(0)

    def raw():  # c.T = b.T @ a.T in column-major terms
        assert gemm_ex(handle, 0, 0, 2, 2, 3, ctypes.addressof(one), b.data.ptr, 0, 2, a.data.ptr, 0, 3,
                       ctypes.addressof(zero), c.data.ptr, 0, 2, 68, 99) == 0

    g = _capture(cp, raw)  # the handle is on the null stream: cuBLAS runs there, at once, not captured
    np.testing.assert_array_equal(c.get(), a.get() @ b.get())
    c[...] = 0
    g.launch()
    np.testing.assert_array_equal(c.get(), 0)
    s = cp.cuda.Stream(non_blocking=True)
    lib.setStream(handle, s.ptr)  # before the capture: what hpcgpu._device.capture does
    with s:
        s.begin_capture()
        raw()
        one.value = 2.0  # a host scalar is read at the capture
        g = s.end_capture()
    lib.setStream(handle, 0)
    np.testing.assert_array_equal(c.get(), 0)
    g.launch()
    np.testing.assert_array_equal(c.get(), a.get() @ b.get())


def test_a_kernel_the_standin_cannot_replay_is_refused_not_skipped(cp):
    x = cp.ones(3, cp.float32)
    with pytest.raises(RuntimeError, match="H2D transfers are disallowed"):
        _capture(cp, lambda: cp.asarray(np.ones(3)))  # as CuPy
    with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph by the stand-in"):
        _capture(cp, lambda: cp.arange(3))  # a kernel the stand-in has not made replayable
    assert x.get().sum() == 3


# ---------------------------------------------------------------------------
# hpcgpu._device.capture and the step graph
# ---------------------------------------------------------------------------


def test_capture_holds_its_temporaries_and_puts_the_cublas_stream_back(cp):
    from cupy.cuda import cublas as lib, device

    from hpcgpu import _device, _gemm

    a = cp.asarray(np.arange(12, dtype=np.float64).reshape(3, 4))
    w = cp.asarray(np.linspace(-1, 1, 8).reshape(4, 2))
    out = cp.zeros((3, 2), cp.float64)

    def work():
        t = cp.empty((3, 2), cp.float64)  # allocated under capture, dropped on return
        _gemm.gemm(a, w, t)  # not cupy.matmul: cuBLAS on the capturing handle
        out[...] = t * 2

    handle = device.get_cublas_handle()
    before = lib.getStream(handle)
    graph, held = _device.capture(work)
    assert lib.getStream(handle) == before and not _device._capturing()
    assert len(held) >= 2  # the temporaries (t, t * 2) live as long as the graph's caller keeps them
    np.testing.assert_array_equal(out.get(), 0)
    graph.launch()
    np.testing.assert_allclose(out.get(), 2 * a.get() @ w.get(), rtol=1e-14)
    a[...] = 1
    graph.launch()
    np.testing.assert_allclose(out.get(), 2 * np.ones((3, 4)) @ w.get(), rtol=1e-14)

    def bad():
        _gemm.gemm(a, w, out)
        out.get()  # a copy to the host: refused under capture

    with pytest.raises(RuntimeError, match="D2H"):
        _device.capture(bad)
    assert lib.getStream(handle) == before and not _device._capturing()


def _model(cp, dtype="float64"):
    from hpcgpu.nn import MLP

    rng = np.random.default_rng(3)
    m = MLP([6, 16, 8, 3], cp, dtype, seed=1)
    X = cp.asarray(rng.standard_normal((20, 6)).astype(dtype))
    y = cp.asarray(rng.integers(0, 3, 20))
    return m, X, y, rng


def test_step_graph_replays_the_step_and_captures_again_for_new_buffers(cp):
    from hpcgpu.train.cuda_graphs import StepGraph

    m, X, y, rng = _model(cp)
    warnings = []
    g = StepGraph(m, warn=warnings.append)
    for _ in range(3):
        X[...] = cp.asarray(rng.standard_normal((20, 6)))  # the sampler's buffer, refilled every step
        g.step(X, y)
        got = m.grad.get().copy(), m.stats.get().copy()
        m.loss_and_grad(X, y)  # the same step, eagerly
        np.testing.assert_allclose(got[0], m.grad.get(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got[1], m.stats.get(), rtol=1e-12)
    assert (g.captures, g.replays, g.on) == (1, 3, True) and not warnings
    X2 = X.copy()  # another buffer: another graph
    g.step(X2, y)
    assert g.captures == 2
    g.step(X2, y, loss_scale=4.0)  # another loss scale (a captured scalar): another graph
    assert g.captures == 3


def test_step_graph_turns_off_with_a_warning_when_the_capture_fails(cp, monkeypatch):
    from hpcgpu import _device
    from hpcgpu.train.cuda_graphs import StepGraph

    m, X, y, _ = _model(cp)
    m.loss_and_grad(X, y)
    want = m.grad.get().copy()
    m.grad[...] = 0

    def refuse(fn, stream=None):
        raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")

    monkeypatch.setattr(_device, "capture", refuse)
    warnings = []
    g = StepGraph(m, warn=warnings.append)
    g.step(X, y)
    assert not g.on and len(warnings) == 1 and "CUDA graphs off for this run" in warnings[0]
    assert "NotImplementedError" in warnings[0]
    np.testing.assert_array_equal(m.grad.get(), want)  # the eager step's result stands
    g.step(X, y)
    assert len(warnings) == 1 and g.captures == 0


def test_step_graph_turns_off_when_the_replay_disagrees(cp, monkeypatch):
    from hpcgpu import _device
    from hpcgpu.train.cuda_graphs import StepGraph

    m, X, y, _ = _model(cp)
    real = _device.capture

    def stale(fn, stream=None):  # a graph that misses the work: its replay leaves the buffers as they are
        graph, held = real(lambda: None, stream)
        m.grad[...] = 0
        return graph, held

    monkeypatch.setattr(_device, "capture", stale)
    warnings = []
    g = StepGraph(m, warn=warnings.append)
    g.step(X, y)
    assert not g.on and "disagreed" in warnings[0]
    got = m.grad.get().copy()
    m.loss_and_grad(X, y)
    np.testing.assert_array_equal(got, m.grad.get())


# ---------------------------------------------------------------------------
# the trainer
# ---------------------------------------------------------------------------


def _train(tmp_path, nprocs, name, *extra, data=None):
    out = tmp_path / f"{name}.h5"
    p = run_standin(nprocs, ["-m", "hpcgpu.train", "--data", data, "--epochs", "2", "--batch-size", "24",
                             "--hidden", "16,8", "--dtype", "float64", "--device", "gpu", "--progress", "lines",
                             "--out", str(out), *extra], timeout=120)
    return p, out


def _params(path):
    import h5py

    with h5py.File(path) as h:
        return {k: h["model"][k][...] for k in h["model"]}


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 3], [3]))
def test_the_trainer_with_cuda_graphs_trains_the_model_it_trains_without(nprocs, tmp_path):
    X, y = blobs(240, d=10, c=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    on, on_h5 = _train(tmp_path, nprocs, "on", "--bucket-mb", "1000", data=data)
    off, off_h5 = _train(tmp_path, nprocs, "off", "--cuda-graphs", "off", data=data)
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert "CUDA graphs on" in on.stdout.splitlines()[0] and "warning" not in on.stderr, on.stdout + on.stderr
    assert "CUDA graphs off (--cuda-graphs off)" in off.stdout.splitlines()[0], off.stdout
    a, b = _params(on_h5), _params(off_h5)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-11, atol=1e-13, err_msg=k)


@pytest.mark.mpi
@pytest.mark.parametrize("extra, why", _mpi.cases([
    (("--grad-accum-steps", "2"), "gradient accumulation"),
    (("--precision", "bf16-mixed", "--dtype", "float32"), "mixed precision"),
], [(("--grad-accum-steps", "2"), "gradient accumulation")]))
def test_the_first_line_says_why_there_is_no_cuda_graph(extra, why, tmp_path):
    X, y = blobs(96, d=10, c=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    p, _ = _train(tmp_path, 1, "o", *extra, data=data)
    assert p.returncode == 0, p.stderr
    assert f"CUDA graphs off ({why})" in p.stdout.splitlines()[0], p.stdout


@pytest.mark.mpi
def test_a_run_with_cuda_graphs_resumes_exactly(tmp_path):
    """Stopped after its first step and resumed: the same model, bitwise, as the run that never stopped (every
    step of both is a replay; the resumed run captures at its first step, as the first run did)."""
    X, y = blobs(240, d=10, c=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    full, full_h5 = _train(tmp_path, 1, "full", data=data)
    assert full.returncode == 0, full.stderr
    ck, stop = tmp_path / "ck.h5", tmp_path / "stop"
    stop.write_text("")
    part, _ = _train(tmp_path, 1, "part", "--checkpoint", str(ck), "--stop-file", str(stop), data=data)
    assert part.returncode == 3, part.stderr  # stopped after its first step, checkpointed
    stop.unlink()
    rest, rest_h5 = _train(tmp_path, 1, "rest", "--checkpoint", str(ck), "--resume", data=data)
    assert rest.returncode == 0, rest.stderr
    a, b = _params(full_h5), _params(rest_h5)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
