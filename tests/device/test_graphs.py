"""CUDA graphs: the stand-in's capture and replay, hpcgpu's capture, the trainer's step graph.

The stand-in models what makes a graph go wrong on a GPU: nothing captured
runs until a launch, a replay reads and writes the memory captured (not
the arrays the code holds now), memory freed after the capture is an
illegal address at the replay, CuPy refuses ``cupy.matmul`` (it sets the
cuBLAS stream) and copies to the host while a stream captures, and a
synchronization invalidates the capture. cuBLAS under a capture goes through
nvmath-python's binding (``tests/device/standin/nvmath``: no guard, the
handle's stream). Every test that starts ranks has a timeout (``run_standin``).
"""

import ast
import os
import sys

import numpy as np
import pytest

import _mpi
from _data import blobs, write_h5
from _standin_env import ROOT, run_standin


@pytest.fixture(autouse=True)
def _fresh_nvmath(monkeypatch):
    """Each test imports the nvmath stand-in anew (under the test's ``HPCGPU_STANDIN_FAIL``, over the CuPy
    stand-in the test loaded) and has hpcgpu make its cuBLAS handle anew."""
    from hpcgpu import _device

    def drop():
        for m in [m for m in sys.modules if m == "nvmath" or m.startswith("nvmath.")]:
            del sys.modules[m]

    drop()
    monkeypatch.setattr(_device, "_BLAS", {})
    yield
    drop()


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


def test_every_cupy_cublas_call_is_refused_under_capture_but_nvmath_cublas_is_captured(cp):
    """CuPy's cuBLAS wrappers (``cupy.cublas.gemm``, ``cupy.cuda.cublas.gemmEx``) set the handle's stream to the
    current one first, which CuPy refuses under capture; nvmath-python's binding calls ``cublasGemmEx`` as it is:
    on the handle's stream, captured when that stream captures, with host ``alpha``/``beta`` read at the capture.
    A call on a handle left on another stream would run at once, outside the graph: the stand-in flags it."""
    from cupy import cublas
    from cupy.cuda import cublas as lib, device
    from nvmath.bindings import cublas as nv

    a = cp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = cp.asarray(np.ones((3, 2), np.float32))
    c = cp.zeros((2, 2), cp.float32)
    with pytest.raises(NotImplementedError, match="cuBLAS API during stream capture"):
        _capture(cp, lambda: cublas.gemm("N", "N", a, b, out=c))
    handle = device.get_cublas_handle()
    with pytest.raises(NotImplementedError, match="cuBLAS API during stream capture"):
        _capture(cp, lambda: lib.gemmEx(handle, 0, 0, 2, 2, 3, 0, b.data.ptr, 0, 2, a.data.ptr, 0, 3, 0,
                                        c.data.ptr, 0, 2, 68, 99))
    h = nv.create()
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)

    def raw():  # c.T = b.T @ a.T in column-major terms
        nv.gemm_ex(h, nv.Operation.N, nv.Operation.N, 2, 2, 3, one.ctypes.data, b.data.ptr, 0, 2, a.data.ptr, 0,
                   3, zero.ctypes.data, c.data.ptr, 0, 2, nv.ComputeType.COMPUTE_32F, nv.GemmAlgo.DEFAULT_TENSOR_OP)

    assert nv.get_stream(h) == 0
    with pytest.raises(RuntimeError, match="does not capture: on a GPU it runs now, outside the graph"):
        _capture(cp, raw)  # the handle is on the legacy stream, not the capturing one
    np.testing.assert_array_equal(c.get(), 0)
    s = cp.cuda.Stream(non_blocking=True)
    ws = cp.empty(1 << 20, cp.uint8)
    nv.set_stream(h, s.ptr)  # before the capture: what hpcgpu._device.capture does
    nv.set_workspace(h, ws.data.ptr, ws.nbytes)  # after set_stream, which resets it
    cp._standin.clear_gemm_log()
    with s:
        s.begin_capture()
        raw()
        one[...] = 2.0  # a host scalar is read at the capture
        g = s.end_capture()
    (entry,) = cp._standin.gemm_log()
    assert entry["api"] == "nvmath.gemm_ex" and (entry["handle"], entry["stream"]) == (h, s.ptr)
    assert entry["workspace"] == ws.nbytes and entry["alpha"] == 1.0 and not entry["tf32"]
    np.testing.assert_array_equal(c.get(), 0)  # nothing ran
    g.launch()
    np.testing.assert_array_equal(c.get(), a.get() @ b.get())  # alpha as captured: 1
    assert lib.getStream(handle) == 0  # CuPy's handle was never touched
    del ws  # the workspace the graph's cuBLAS call uses, freed: the replay reaches freed memory
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="cudaErrorIllegalAddress"):
        g.launch()
    nv.set_stream(h, 0)
    assert nv.workspace_of(h) is None
    nv.destroy(h)
    with pytest.raises(nv.cuBLASError, match="CUBLAS_STATUS_NOT_INITIALIZED"):
        nv.get_stream(h)


def test_the_nvmath_standin_checks_gemm_ex_as_cublas_does(cp):
    from nvmath.bindings import cublas as nv

    h = nv.create()
    a = cp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = cp.asarray(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))
    c = cp.full((2, 2), 3, cp.float32)
    al, be = np.array(0.5, np.float32), np.array(2.0, np.float32)

    def call(compute=68, atype=0, ctype=0, lda=3):
        nv.gemm_ex(h, 0, 0, 2, 2, 3, al.ctypes.data, b.data.ptr, atype, 2, a.data.ptr, atype, lda,
                   be.ctypes.data, c.data.ptr, ctype, 2, compute, 99)

    call()  # eager, on the legacy stream: lands at a synchronize
    np.testing.assert_allclose(c.get(), 0.5 * a.get() @ b.get() + 6, rtol=1e-6)
    with pytest.raises(nv.cuBLASError, match=r"not supported \(CUBLAS_STATUS_NOT_SUPPORTED\)"):
        call(compute=70)  # float32 operands with 64F compute
    with pytest.raises(nv.cuBLASError, match="CUBLAS_STATUS_INVALID_VALUE"):
        call(lda=1)
    with pytest.raises(nv.cuBLASError, match="CUBLAS_STATUS_INVALID_VALUE"):
        nv.set_workspace(h, 12345, 64)  # not device memory
    nv.destroy(h)


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


def _spy_cupy_cublas(monkeypatch, calls):
    """Record every call of a CuPy cuBLAS function (``cupy.cuda.cublas``, ``cupy.cublas.gemm``) made while hpcgpu
    captures."""
    import cupy.cublas
    from cupy.cuda import cublas as lib

    from hpcgpu import _device

    for mod, names in ((lib, [n for n in vars(lib) if callable(getattr(lib, n)) and n[:1].islower()]),
                       (cupy.cublas, ["gemm"])):
        for name in names:
            real = getattr(mod, name)

            def spy(*args, _real=real, _name=name, **kwargs):
                if _device._capturing():
                    calls.append(_name)
                return _real(*args, **kwargs)

            monkeypatch.setattr(mod, name, spy)


def test_capture_calls_cublas_on_hpcgpu_own_handle_on_the_capturing_stream(cp, monkeypatch):
    """Inside ``_device.capture`` each GEMM is nvmath-python's ``gemm_ex`` on hpcgpu's own handle, whose stream is
    the capturing one and whose workspace is set after it, with no CuPy cuBLAS call; the replay gives the eager
    result, the capture's temporaries are held, and the handle's stream is put back (CuPy's is never touched)."""
    from cupy.cuda import cublas as lib, device
    from nvmath.bindings import cublas as nv

    from hpcgpu import _device, _gemm

    a = cp.asarray(np.arange(12, dtype=np.float64).reshape(3, 4))
    w = cp.asarray(np.linspace(-1, 1, 8).reshape(4, 2))
    out = cp.zeros((3, 2), cp.float64)
    streams = []

    def work():
        t = cp.empty((3, 2), cp.float64)  # allocated under capture, dropped on return
        _gemm.gemm(a, w, t)  # not cupy.matmul: cuBLAS on hpcgpu's handle
        _gemm.gemm(a, w, t, alpha=0.5, beta=1.0)  # t = 1.5 a @ w: host alpha and beta, read at the capture
        out[...] = t * 2
        streams.append(cp.cuda.get_current_stream())

    calls = []
    _spy_cupy_cublas(monkeypatch, calls)
    handle = device.get_cublas_handle()
    before = lib.getStream(handle)
    cp._standin.clear_gemm_log()
    graph, held = _device.capture(work)
    assert calls == []  # no CuPy cuBLAS function at all during the capture
    blas = _device._BLAS[_device.current_device()]
    assert blas is _device.capture_blas() and blas.lib is nv
    log = cp._standin.gemm_log()
    assert [(e["api"], e["handle"], e["stream"], e["workspace"], e["compute_type"], e["alpha"], e["beta"])
            for e in log] == [("nvmath.gemm_ex", blas.handle, streams[0].ptr, _device.WORKSPACE_HOPPER,
                               "CUBLAS_COMPUTE_64F", al, be) for al, be in ((1.0, 0.0), (0.5, 1.0))]
    assert nv.get_stream(blas.handle) == 0 and nv.get_math_mode(blas.handle) == nv.Math.DEFAULT_MATH
    assert lib.getStream(handle) == before and not _device._capturing()
    assert len(held) >= 2  # the temporaries (t, t * 2) live as long as the graph's caller keeps them
    np.testing.assert_array_equal(out.get(), 0)
    graph.launch()
    np.testing.assert_allclose(out.get(), 3 * a.get() @ w.get(), rtol=1e-14)
    a[...] = 1
    graph.launch()
    np.testing.assert_allclose(out.get(), 3 * np.ones((3, 4)) @ w.get(), rtol=1e-14)
    wf = cp.asfortranarray(w)  # an F-contiguous operand: passed as it lies, transposed (CUBLAS_OP_T)
    graph2, _ = _device.capture(lambda: _gemm.gemm(a, wf, out))  # the same handle, captured again
    assert _device.capture_blas() is blas and len(_device._BLAS) == 1
    graph2.launch()
    np.testing.assert_allclose(out.get(), np.ones((3, 4)) @ w.get(), rtol=1e-14)

    def bad():
        _gemm.gemm(a, w, out)
        out.get()  # a copy to the host: refused under capture

    with pytest.raises(RuntimeError, match="D2H"):
        _device.capture(bad)
    assert lib.getStream(handle) == before and nv.get_stream(blas.handle) == 0 and not _device._capturing()
    assert calls == []


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_captured_gemm_replays_the_eager_result_in_every_precision(cp, dtype):
    """float32 under ``tf32`` (CUBLAS_COMPUTE_32F_FAST_TF32, inputs rounded to TF32) and ``full``, 16-bit inputs
    into float32 (CUBLAS_COMPUTE_32F): the replay of the captured GEMM gives what the eager one gives."""
    import ml_dtypes

    from hpcgpu import _device, _gemm

    rng = np.random.default_rng(5)
    t = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    a = cp.asarray(rng.standard_normal((5, 7)).astype(t))
    w = cp.asarray(rng.standard_normal((7, 3)).astype(t))
    for mode, compute in ([("tf32", "CUBLAS_COMPUTE_32F_FAST_TF32"), ("full", "CUBLAS_COMPUTE_32F")]
                          if dtype == "float32" else [("default", "CUBLAS_COMPUTE_32F")]):
        eager, out = cp.zeros((5, 3), cp.float32), cp.zeros((5, 3), cp.float32)
        _gemm.gemm(a, w, eager, alpha=1.5, beta=0.0, math_mode=mode)
        cp._standin.clear_gemm_log()
        graph, _ = _device.capture(lambda out=out, mode=mode: _gemm.gemm(a, w, out, alpha=1.5, beta=0.0,
                                                                          math_mode=mode))
        (entry,) = cp._standin.gemm_log()
        assert (entry["api"], entry["compute_type"], entry["dtype"], entry["c_dtype"]) == (
            "nvmath.gemm_ex", compute, np.dtype(t).name, "float32")
        graph.launch()
        np.testing.assert_allclose(out.get(), eager.get(), rtol=1e-6, atol=1e-6)
        if mode != "default":
            full = 1.5 * a.get().astype(np.float64) @ w.get().astype(np.float64)
            err = np.abs(out.get() - full).max()
            assert (err > 1e-4) == (mode == "tf32"), (mode, err)  # TF32 keeps 10 mantissa bits


def test_without_nvmath_there_are_no_graphs_and_the_step_runs_eagerly(load):
    """``HPCGPU_STANDIN_FAIL=nvmath``: nvmath-python does not import, as where it is not installed;
    ``graphs_available`` says why, a capture fails with that import error, and the step graph runs eagerly."""
    cp = load(HPCGPU_STANDIN_FAIL="nvmath")
    from hpcgpu import _device
    from hpcgpu.train.cuda_graphs import StepGraph

    with pytest.raises(ImportError, match="No module named 'nvmath'"):
        import nvmath.bindings.cublas  # noqa: F401
    assert _device.graphs_available() == (False, "no nvmath-python (pip install 'hpcgpu[gpu]')")
    with pytest.raises(ImportError):
        _device.capture(lambda: None)
    assert not _device._capturing() and _device._BLAS == {}
    m, X, y, _ = _model(cp)
    m.loss_and_grad(X, y)
    want = m.grad.get().copy()
    m.grad[...] = 0
    warnings = []
    g = StepGraph(m, warn=warnings.append)
    g.step(X, y)
    assert not g.on and len(warnings) == 1 and "No module named 'nvmath'" in warnings[0]
    np.testing.assert_array_equal(m.grad.get(), want)


def test_no_module_of_hpcgpu_looks_for_cublas_in_the_process_maps():
    """cuBLAS is reached through CuPy or nvmath-python, never by reading ``/proc/self/maps`` for a libcublas to
    open with ctypes: no function of hpcgpu that reads the process's mappings mentions cuBLAS, and the device
    module has no ctypes at all."""
    from hpcgpu import _device

    package = os.path.join(ROOT, "hpcgpu")
    for dirpath, _, files in os.walk(package):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            source = open(path, encoding="utf-8").read()
            if "/maps" not in source:  # no function of it can read the mappings (get_source_segment below is
                continue  # linear in the file: every function of every file was 9 s of CPU)
            tree = ast.parse(source)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    body = ast.get_source_segment(source, node) or ""
                    if "/proc/self/maps" in body or "/maps" in body:
                        assert "cublas" not in body.lower(), f"{path}: {node.name} looks for cuBLAS in the maps"
            assert not ("/proc/self/maps" in source and "libcublas" in source), path
    device = open(_device.__file__, encoding="utf-8").read()
    imported = {a.name for n in ast.walk(ast.parse(device)) if isinstance(n, ast.Import) for a in n.names} | {
        n.module for n in ast.walk(ast.parse(device)) if isinstance(n, ast.ImportFrom)}
    assert "ctypes" not in imported and "/proc/self/maps" not in device and "CDLL" not in device
    assert not hasattr(_device, "_libcublas")


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


def _train(tmp_path, nprocs, name, *extra, data=None, env=None):
    out = tmp_path / f"{name}.h5"
    p = run_standin(nprocs, ["-m", "hpcgpu.train", "--data", data, "--epochs", "2", "--batch-size", "24",
                             "--hidden", "16,8", "--dtype", "float64", "--device", "gpu", "--progress", "lines",
                             "--out", str(out), *extra], env=env, timeout=120)
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
def test_a_partial_last_step_runs_eagerly_beside_the_graphs_and_trains_the_same_model(tmp_path):
    """--no-drop-last: 250 samples in batches of 24, the 11th step of 10 (at 3 ranks, local 3 or 4 rows) outside
    the graph of the full steps; the model is the one trained without graphs."""
    X, y = blobs(250, d=10, c=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    on, on_h5 = _train(tmp_path, 3, "on", "--bucket-mb", "1000", "--no-drop-last", data=data)
    off, off_h5 = _train(tmp_path, 3, "off", "--cuda-graphs", "off", "--no-drop-last", data=data)
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    first = on.stdout.splitlines()[0]
    assert "11 steps/epoch (the last of 10)" in first and "CUDA graphs on" in first, on.stdout + on.stderr
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
def test_without_nvmath_the_first_line_says_so_and_the_trainer_trains_eagerly(tmp_path):
    """No nvmath-python (``HPCGPU_STANDIN_FAIL=nvmath``): ``info`` and the run's first line say why there are no
    CUDA graphs, with no warning, and the run trains the model ``--cuda-graphs off`` trains, bit for bit."""
    env = {"HPCGPU_STANDIN_FAIL": "nvmath"}
    why = "no nvmath-python (pip install 'hpcgpu[gpu]')"
    info = run_standin(1, ["-m", "hpcgpu", "info", "--device", "gpu"], env=env, timeout=90)
    assert info.returncode == 0 and f"cuda_graphs=no ({why})" in info.stdout, info.stdout + info.stderr
    X, y = blobs(240, d=10, c=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    no, no_h5 = _train(tmp_path, 2, "no", data=data, env=env)
    off, off_h5 = _train(tmp_path, 2, "off", "--cuda-graphs", "off", data=data)
    assert no.returncode == 0 and off.returncode == 0, no.stderr + off.stderr
    assert f"CUDA graphs off ({why})" in no.stdout.splitlines()[0], no.stdout
    assert "warning" not in no.stderr, no.stderr
    a, b = _params(no_h5), _params(off_h5)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


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
