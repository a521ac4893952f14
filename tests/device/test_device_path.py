"""hpcgpu's device path, run on every commit through the CuPy stand-in, and on a real GPU where one is.

Each multi-rank test runs its script under mpiexec with a backend: ``standin``
(tests/device/standin first on PYTHONPATH: one device, kernels that land
only at synchronize) or ``cupy`` (the real CuPy; skipped without a GPU).
"""

import json
import os
import sys

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import _mpi
from _data import blobs, write_h5
from _standin_env import HERE, run_standin

SCRIPTS = os.path.join(HERE, "mpi")


def _real_gpu() -> bool:
    import hpcgpu._device as d

    cupy = d.cupy_or_none()
    return cupy is not None and not cupy.__version__.endswith("+standin") and d.device_count() > 0


BACKENDS = ["standin", pytest.param("cupy", marks=pytest.mark.gpu)]


def run(backend, nprocs, args, env=None, timeout=120):
    if backend == "standin":
        return run_standin(nprocs, args, env=env, timeout=timeout)
    if not _real_gpu():
        pytest.skip("no CuPy with a GPU on this machine")
    return _mpi.run(nprocs, args, env=env, timeout=timeout)


def _nccl_cases(backend, nprocs):
    """NCCL on a real GPU node only with a GPU for each rank (NCCL refuses two ranks on one)."""
    if backend == "cupy":
        import hpcgpu._device as d

        if d.device_count() < nprocs:
            pytest.skip(f"NCCL needs a GPU for each of {nprocs} ranks; this node has {d.device_count()}")


def _aware_cases(backend):
    """The CUDA-aware path only where it can run: always on the stand-in (its device memory is host
    memory), on a real GPU only when this MPI says it is CUDA-aware (forcing it crashes a host-only MPI)."""
    if backend == "cupy":
        import hpcgpu

        if not hpcgpu.detect_cuda_aware(MPI.COMM_SELF)[0]:
            pytest.skip("this MPI is not CUDA-aware")


OWN_GPUS = {"HPCGPU_STANDIN_DEVICES": "4"}  # a stand-in GPU for each of up to 4 ranks: NCCL serves them
PATHS = {"staged": {"HPCGPU_CUDA_AWARE_MPI": "0"},
         "aware": {"HPCGPU_CUDA_AWARE_MPI": "1"},
         "nccl": {**OWN_GPUS, "HPCGPU_CUDA_AWARE_MPI": "0"},
         "aware, Ibcast staged": {"HPCGPU_CUDA_AWARE_MPI": "1", "HPCGPU_NONBLOCKING_DEVICE": "0"}}


# -- collectives and SUMMA at 1-4 ranks, both paths ----------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_collectives_on_device_arrays(backend, path, nprocs):
    if path == "nccl":
        _nccl_cases(backend, nprocs)
    elif path != "staged":
        _aware_cases(backend)
    n = "1000" if backend == "standin" else str(1 << 24)  # a real GPU: kernels long enough to still run
    p = run(backend, nprocs, [os.path.join(SCRIPTS, "collective_checks.py"), n], env=PATHS[path], timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    took = "staged" if path == "nccl" and nprocs == 1 else path.split(",")[0]  # one rank: no collective runs
    assert f"collective checks: ok {took}" in p.stdout


SUMMA_CASES = [("staged", n) for n in _mpi.cases([1, 2, 3, 4], [1, 3])] + [("aware", 4)] + \
    [("nccl", n) for n in _mpi.cases([3, 4], [3])]
"""Staged panels at every rank count; NCCL's at 3 (uneven blocks, 1x3 and 3x1: its own communicators of odd
size) and 4 (a 2x2 grid: row and column broadcasts, an empty row block); CUDA-aware MPI's at 4, where it hands
the device buffers to the same broadcasts the staged path makes at 3: what the path changes is how a panel
moves. Every check (the PDGEMM interface's table, every dtype with every shape) at 3 ranks staged: what the
table checks (op, alpha, beta, the local GEMM of each dtype) depends neither on how a panel moves nor on the
grid's shape, whose index arithmetic the host pass's table checks at every rank count, 2 x 2 and 2 x 3 included
(tests/test_summa.py); at 4 ranks it took 45 s of the host pass under load against 7-15 s for the transport checks.
The others check what a path and a rank count change (``summa_checks.py gpu transport``: every dtype and panel
width on every grid, taking turns over the shapes), a third of the time."""
SUMMA_ALL = {("staged", 3)}


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path,nprocs", SUMMA_CASES)
def test_summa_on_device_every_grid_and_dtype(backend, path, nprocs):
    """The grid shapes of P ranks (tests/mpi/summa_checks.py), all four dtypes, empty blocks (1x13x9 on 2x2: an
    empty row block); over NCCL the panels' broadcasts are NCCL's."""
    if path == "aware":
        _aware_cases(backend)
    if path == "nccl":
        _nccl_cases(backend, nprocs)
    which = "all" if (path, nprocs) in SUMMA_ALL else "transport"
    p = run(backend, nprocs, [os.path.join(_mpi.SCRIPTS, "summa_checks.py"), "gpu", which], env=PATHS[path],
            timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "summa checks: ok" in p.stdout and p.stdout.rstrip().endswith(which)
    assert f"collectives={'nccl' if path == 'nccl' else 'mpi'}" in p.stdout


# -- the trainer -----------------------------------------------------------------------------

MODEL_16_8 = sorted(f"fc{i}.{w}" for i in range(3) for w in ("weight", "bias"))  # /model of --hidden 16,8


def _history(path):
    with h5py.File(path) as f:
        return {k: f["metrics"][k][()] for k in ("train_loss", "test_loss", "test_accuracy") if k in f["metrics"]}, \
            {k: f["model"][k][()] for k in f["model"]}, f.attrs["device"]


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_trainer_on_device_matches_the_cpu_run(backend, nprocs, tmp_path):
    X, y = blobs(240, d=10, c=4)
    Xt, yt = blobs(61, d=10, c=4, seed=1)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
    opts = ["-m", "hpcgpu.train", "--data", data, "--epochs", "2", "--batch-size", "24", "--hidden", "16,8",
            "--progress", "lines"]
    cpu = _mpi.run(nprocs, [*opts, "--device", "cpu", "--out", str(tmp_path / "cpu.h5")], timeout=120)
    assert cpu.returncode == 0, cpu.stderr
    gpu = run(backend, nprocs, [*opts, "--device", "gpu", "--out", str(tmp_path / "gpu.h5")], timeout=120)
    assert gpu.returncode == 0, gpu.stdout + gpu.stderr
    assert gpu.stderr == "", gpu.stderr  # no Python warning on a GPU node
    first = gpu.stdout.splitlines()[0]  # a node with a GPU for each rank takes NCCL
    assert " on gpu (MPI is" in first or " on gpu (device buffers over NCCL" in first, first
    (hc, mc, dc), (hg, mg, dg) = _history(tmp_path / "cpu.h5"), _history(tmp_path / "gpu.h5")
    assert (dc, dg) == ("cpu", "gpu")
    assert sorted(mg) == sorted(mc) == MODEL_16_8, (sorted(mc), sorted(mg))
    for k in hc:
        np.testing.assert_allclose(hg[k], hc[k], rtol=2e-4, atol=1e-5, err_msg=k)
    for k in mc:
        np.testing.assert_allclose(mg[k], mc[k], rtol=1e-3, atol=1e-5, err_msg=k)


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("precision, nprocs", [("bf16-mixed", 1), ("16-mixed", 2)])
def test_mixed_precision_on_device_matches_the_cpu_run(backend, precision, nprocs, tmp_path):
    """bf16-mixed and 16-mixed on a GPU (16-bit GEMM operands to cublasGemmEx, float32 compute): the host's
    run up to rounding, the same loss scales and skipped steps."""
    X, y = blobs(240, d=10, c=4)
    Xt, yt = blobs(61, d=10, c=4, seed=1)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
    opts = ["-m", "hpcgpu.train", "--data", data, "--epochs", "2", "--batch-size", "24", "--hidden", "16,8",
            "--progress", "lines", "--precision", precision, "--lr", "0.02"]
    cpu = _mpi.run(nprocs, [*opts, "--device", "cpu", "--out", str(tmp_path / "cpu.h5")], timeout=120)
    assert cpu.returncode == 0, cpu.stderr
    gpu = run(backend, nprocs, [*opts, "--device", "gpu", "--out", str(tmp_path / "gpu.h5")], timeout=120)
    assert gpu.returncode == 0, gpu.stdout + gpu.stderr
    assert f"precision {precision}" in gpu.stdout.splitlines()[0]
    with h5py.File(tmp_path / "cpu.h5") as c, h5py.File(tmp_path / "gpu.h5") as g:
        if backend == "standin":  # the same float32 products as the host: the same overflow verdicts
            for k in ("loss_scale", "skipped_steps"):
                np.testing.assert_array_equal(g["metrics"][k][()], c["metrics"][k][()], err_msg=k)
        else:  # cuBLAS's last bits may tip a borderline |softmax - onehot| * 2**16 over float16's largest
            assert abs(int(g["metrics/skipped_steps"][()].sum()) - int(c["metrics/skipped_steps"][()].sum())) <= 1
        np.testing.assert_allclose(g["metrics/train_loss"][()], c["metrics/train_loss"][()], rtol=2e-2)
        assert sorted(g["model"]) == sorted(c["model"]) == MODEL_16_8, (list(c["model"]), list(g["model"]))
        for k in c["model"]:
            assert g["model"][k].dtype == np.float32
            np.testing.assert_allclose(g["model"][k][()], c["model"][k][()], rtol=5e-2, atol=5e-3, err_msg=k)


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", list(PATHS))
def test_tensor_parallel_and_zero_on_device_match_the_cpu_run(backend, path, tmp_path):
    """2 data x 2 tensor with ZeRO-1 on GPUs: the tensor group's Allreduces, the Reduce_scatter and the
    Allgather move device buffers (staged, CUDA-aware or over NCCL); the model is the host's."""
    if "aware" in path:
        _aware_cases(backend)
    if path == "nccl":
        _nccl_cases(backend, 4)
    X, y = blobs(240, d=10, c=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    opts = ["-m", "hpcgpu.train", "--data", data, "--epochs", "2", "--batch-size", "24", "--hidden", "16,8",
            "--progress", "lines", "--tensor-parallel", "2", "--zero-stage", "1", "--dtype", "float64"]
    cpu = _mpi.run(4, [*opts, "--device", "cpu", "--out", str(tmp_path / "cpu.h5")], timeout=120)
    assert cpu.returncode == 0, cpu.stderr
    gpu = run(backend, 4, [*opts, "--device", "gpu", "--out", str(tmp_path / "gpu.h5")], env=PATHS[path],
              timeout=120)
    assert gpu.returncode == 0, gpu.stdout + gpu.stderr
    (_, mc, _), (_, mg, dg) = _history(tmp_path / "cpu.h5"), _history(tmp_path / "gpu.h5")
    assert dg == "gpu"
    assert sorted(mg) == sorted(mc) == MODEL_16_8, (sorted(mc), sorted(mg))
    for k in mc:
        np.testing.assert_allclose(mg[k], mc[k], rtol=1e-10, atol=1e-12, err_msg=k)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([2, 4], [3]))
@pytest.mark.parametrize("bucket_mb", _mpi.cases(["25", "0.0005"], ["0.0005"]))
def test_trainer_over_nccl_is_the_staged_model(nprocs, bucket_mb, tmp_path):
    """The same run over NCCL (each rank its own stand-in GPU) and staged through the host (ranks sharing one):
    the same model in float64, with one bucket and with several (the buckets' Iallreduces posted from the
    backward pass on NCCL's stream); the first line says which path and why."""
    X, y = blobs(240, d=10, c=4)
    Xt, yt = blobs(61, d=10, c=4, seed=1)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
    opts = ["-m", "hpcgpu.train", "--data", data, "--epochs", "2", "--batch-size", "24", "--hidden", "16,8",
            "--progress", "lines", "--device", "gpu", "--dtype", "float64", "--bucket-mb", bucket_mb]
    staged = run_standin(nprocs, [*opts, "--out", str(tmp_path / "staged.h5")], timeout=180)
    assert staged.returncode == 0, staged.stdout + staged.stderr
    assert "not NCCL: ranks share a GPU" in staged.stdout.splitlines()[0], staged.stdout
    nccl = run_standin(nprocs, [*opts, "--out", str(tmp_path / "nccl.h5")], env=OWN_GPUS, timeout=180)
    assert nccl.returncode == 0, nccl.stdout + nccl.stderr
    assert nccl.stderr == "", nccl.stderr
    assert "device buffers over NCCL: NCCL " in nccl.stdout.splitlines()[0], nccl.stdout
    (hs, ms, _), (hn, mn, _) = _history(tmp_path / "staged.h5"), _history(tmp_path / "nccl.h5")
    assert sorted(mn) == sorted(ms) == MODEL_16_8
    for k in hs:
        np.testing.assert_allclose(hn[k], hs[k], rtol=1e-6, err_msg=k)
    for k in ms:
        np.testing.assert_allclose(mn[k], ms[k], rtol=1e-6, atol=1e-12, err_msg=k)


STEP_COST = """
import json, sys, cupy, hpcgpu
from hpcgpu.train.trainer import Trainer, TrainConfig
rt = hpcgpu.init("gpu")
out = {}
for graphs in ("off", "auto"):
    for hidden in [(16,), (16, 8, 8)]:
        tr = Trainer(TrainConfig(data=sys.argv[1], out=sys.argv[2], hidden=hidden, batch_size=24, epochs=2,
                                 progress="none", cuda_graphs=graphs, schedule="constant"), rt)
        tr.fit(epochs=1)  # bound to its data; with graphs the first step captures: the second epoch is counted
        cupy._standin.reset_counters()
        tr.sampler.start_epoch(tr.epoch)  # the epoch's start, counted apart from its steps
        start = cupy._standin.counters()["launches"]
        cupy._standin.reset_counters()
        tr.train_epoch()
        c = cupy._standin.counters()
        out[f"{graphs} {len(hidden) + 1}"] = dict(c, launches=(c["launches"] - start) / tr.sampler.steps,
                                                   steps=tr.sampler.steps, collectives=rt.collectives)
every = rt.comm.gather(out, root=0)  # one line, from rank 0
if rt.rank == 0:
    print(json.dumps(every))
"""

# Kernel launches (and cuBLAS calls, host-to-device copies) of one training step on a GPU, as the
# stand-in counts them, so that the count can only go down (CuPy's array form alone: 26 + 8 per layer).
# Fixed: the batch gather (2), the softmax cross-entropy kernel and its sum (2), the loss's row (1), the
# update (1); less the first layer's input gradient and ReLU backward (2) and the last layer's bias (1,
# in the loss kernel).
LAUNCHES_FIXED = 3
LAUNCHES_PER_LAYER = 6  # forward: GEMM, bias+ReLU; backward: 2 GEMMs, bias gradient, ReLU backward
# With a CUDA graph, whatever the depth: the batch gather (2), the graph (1), the
# loss's row (1), the update (1).
LAUNCHES_GRAPH = 5


@pytest.mark.mpi
def test_a_step_at_one_rank_never_waits_for_the_gpu(tmp_path):
    """One rank on a GPU: no host synchronization and no copy to the host in a
    step (the losses are read once, at the epoch's end), and no more launches than the budget: per layer
    without a CUDA graph, a constant with one (every step of the epoch a replay)."""
    X, y = blobs(240, d=10, c=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    p = run_standin(1, ["-c", STEP_COST, data, str(tmp_path / "o.h5")])
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr, p.stderr
    counts, = json.loads(p.stdout.strip().splitlines()[-1])
    assert sorted(counts) == ["auto 2", "auto 4", "off 2", "off 4"], p.stdout  # every case STEP_COST runs
    for key, c in counts.items():
        graphs, layers = key.split()
        assert c["steps"] == 10 and c["host_syncs"] == 1 and c["device_to_host"] == 1, (key, c)
        if graphs == "off":
            assert c["graph_launches"] == 0, (key, c)
            assert c["launches"] <= LAUNCHES_FIXED + LAUNCHES_PER_LAYER * int(layers), (key, c)
        else:
            assert c["graph_launches"] == c["steps"], (key, c)
            assert c["launches"] <= LAUNCHES_GRAPH, (key, c)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([2, 4], [2]))
def test_a_step_over_nccl_never_waits_for_the_gpu(nprocs, tmp_path):
    """Several ranks, each on a GPU of its own: the gradient goes over NCCL, one collective a step, and the host
    waits for the GPU once an epoch, as at one rank (the reduced losses stay on the device until the epoch's
    end; a stop request is agreed on the host). The CUDA graph still replays every step."""
    X, y = blobs(240, d=10, c=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    p = run_standin(nprocs, ["-c", STEP_COST, data, str(tmp_path / "o.h5")], env=OWN_GPUS, timeout=240)
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr, p.stderr
    ranks = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(ranks) == nprocs
    for counts in ranks:
        assert sorted(counts) == ["auto 2", "auto 4", "off 2", "off 4"], p.stdout
        for key, c in counts.items():
            assert c["collectives"] == "nccl", (key, c)
            assert c["steps"] == 10 and c["host_syncs"] == 1 and c["device_to_host"] == 1, (key, c)
            assert c["nccl_calls"] == c["steps"], (key, c)  # one Allreduce of the gradient and its statistics
            assert c["graph_launches"] == (c["steps"] if key.startswith("auto") else 0), (key, c)


@pytest.mark.mpi
@pytest.mark.parametrize("checkpoints", [True, False])
def test_divergence_at_one_rank_on_a_gpu_names_the_step(checkpoints, tmp_path):
    """lr = 1e200: step 2's loss is NaN. The losses stay on the device, yet the error names step 2, and
    a checkpoint after step 2 is never written."""
    X, y = blobs(240, d=6)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    ck = tmp_path / "ck.h5"
    extra = ["--checkpoint", str(ck), "--checkpoint-every", "1"] if checkpoints else []
    p = run_standin(1, ["-m", "hpcgpu.train", "--data", data, "--out", str(tmp_path / "o.h5"), "--device", "gpu",
                        "--progress", "none", "--dtype", "float64", "--hidden", "16,8", "--epochs", "3",
                        "--batch-size", "20", "--lr", "1e200", "--warmup-epochs", "0", *extra])
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "hpcgpu.train: error: training diverged: the loss of step 2 (epoch 1) is nan; "
        "the last checkpoint is kept; start again with a smaller --lr "
        "(a resume keeps the checkpoint's --lr)"], p.stderr
    assert not (tmp_path / "o.h5").exists()
    if checkpoints:
        from hpcgpu.train.checkpoint import read_checkpoint

        good = read_checkpoint(str(ck), 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3)
        assert good.step == 1 and np.isfinite(good.params).all()


@pytest.mark.mpi
def test_stop_at_one_rank_on_a_gpu_checkpoints_every_step_and_resumes_exactly(tmp_path):
    """The stop file is there from the start: the run stops after step 1 with the loss of that step in the
    checkpoint (read from the device at the stop), and the resumed run ends where an uninterrupted one does."""
    X, y = blobs(240, d=6)
    Xt, yt = blobs(61, d=6, seed=1)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
    opts = ["-m", "hpcgpu.train", "--data", data, "--device", "gpu", "--progress", "none", "--hidden", "16,8",
            "--epochs", "2", "--batch-size", "20"]
    full = run_standin(1, [*opts, "--out", str(tmp_path / "full.h5")])
    assert full.returncode == 0, full.stderr
    stop = tmp_path / "STOP"
    stop.write_text("")
    ck = tmp_path / "ck.h5"
    p = run_standin(1, [*opts, "--out", str(tmp_path / "part.h5"), "--checkpoint", str(ck), "--stop-file", str(stop)])
    assert p.returncode == 3, p.stderr
    from hpcgpu.train.checkpoint import read_checkpoint

    state = read_checkpoint(str(ck), 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3)
    totals = np.asarray(state.parts["progress"]["epoch_totals"])
    assert state.step == 1 and totals[0] > 0 and np.isfinite(totals).all()
    stop.unlink()
    p = run_standin(1, [*opts, "--out", str(tmp_path / "part.h5"), "--checkpoint", str(ck), "--resume"])
    assert p.returncode == 0, p.stderr
    (h1, m1, _), (h2, m2, _) = _history(tmp_path / "full.h5"), _history(tmp_path / "part.h5")
    assert sorted(m2) == sorted(m1) == MODEL_16_8, (sorted(m1), sorted(m2))
    for k in m1:
        np.testing.assert_array_equal(m1[k], m2[k], err_msg=k)
    for k in h1:
        np.testing.assert_array_equal(h1[k], h2[k], err_msg=k)


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_written_on_device_resumes_on_cpu_and_back(backend, tmp_path):
    X, y = blobs(120, d=6, c=3)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    # float64: a GPU's cuBLAS sums in another order than the host's OpenBLAS, and in float32 18 steps at lr 0.1
    # grew that past 1e-4 on an H200 (4e-5 absolute on a weight of 0.018); in float64 the same order gives
    # 1e-12, so a resume that lost any state (momentum, the sampler's place) still shows
    opts = ["-m", "hpcgpu.train", "--data", data, "--epochs", "3", "--batch-size", "20", "--lr", "0.1",
            "--dtype", "float64", "--progress", "none", "--checkpoint", str(tmp_path / "ck.h5")]
    full = _mpi.run(2, [*opts, "--device", "cpu", "--out", str(tmp_path / "full.h5"),
                        "--checkpoint", str(tmp_path / "full-ck.h5")], timeout=120)
    assert full.returncode == 0, full.stderr
    # Epoch 1 on the device; the stop file stops it after a step; epoch 2 on the CPU; the rest on the device.
    stop = tmp_path / "stop"
    stop.write_text("")
    a = run(backend, 2, [*opts, "--device", "gpu", "--cuda-graphs", "off", "--out", str(tmp_path / "a.h5"),
                         "--stop-file", str(stop)])
    assert a.returncode == 3, a.stdout + a.stderr
    stop.unlink()
    b = _mpi.run(2, [*opts, "--device", "cpu", "--resume", "--epochs", "3", "--out", str(tmp_path / "b.h5"),
                     "--stop-file", str(stop)], timeout=120)
    assert b.returncode == 0, b.stderr
    c = run(backend, 2, [*opts, "--device", "gpu", "--cuda-graphs", "off", "--resume", "--out", str(tmp_path / "c.h5")])
    assert c.returncode == 0, c.stdout + c.stderr
    (_, mf, _), (_, mc, dev) = _history(tmp_path / "full.h5"), _history(tmp_path / "c.h5")
    assert dev == "gpu"
    for k in mf:  # two summation orders (OpenBLAS, cuBLAS or the stand-in's NumPy) and two update paths: last bits
        np.testing.assert_allclose(mc[k], mf[k], rtol=1e-9, atol=1e-12, err_msg=k)


# -- defect 1 and 2: no usable GPU is one line, exit 2; auto says why it fell back ------------------

CLIS = {"info": ["-m", "hpcgpu", "info"], "matmul": ["-m", "hpcgpu", "matmul", "--bench", "16"],
        "train": ["-m", "hpcgpu.train", "--epochs", "1"]}
NO_GPU = {"no device visible": ({"CUDA_VISIBLE_DEVICES": ""}, "cudaErrorNoDevice"),
          "no driver": ({"HPCGPU_STANDIN_FAIL": "driver"}, "cudaErrorInsufficientDriver"),
          "CUDA libraries missing at import": ({"HPCGPU_STANDIN_FAIL": "import"}, "libcudart.so.12"),
          "no NVRTC": ({"HPCGPU_STANDIN_FAIL": "nvrtc"}, "libnvrtc"),
          "no cuBLAS": ({"HPCGPU_STANDIN_FAIL": "cublas"}, "libcublas")}


@pytest.mark.mpi
@pytest.mark.parametrize("cli", list(CLIS))
@pytest.mark.parametrize("case", list(NO_GPU))
def test_device_gpu_without_a_usable_gpu_is_one_line(cli, case, tmp_path):
    env, cause = NO_GPU[case]
    out = ["--out", str(tmp_path / "o.h5")] if cli == "train" else []
    p = run_standin(2, [*CLIS[cli], "--device", "gpu", *out], env=env, timeout=90)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device gpu:" in lines[0] and cause in lines[0], p.stderr
    assert not (tmp_path / "o.h5").exists()


@pytest.mark.mpi
@pytest.mark.gpu
@pytest.mark.parametrize("cli", list(CLIS))
def test_real_gpu_hidden_by_cuda_visible_devices_is_one_line(cli, tmp_path):
    out = ["--out", str(tmp_path / "o.h5")] if cli == "train" else []
    p = run("cupy", 2, [*CLIS[cli], "--device", "gpu", *out], env={"CUDA_VISIBLE_DEVICES": ""}, timeout=90)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].count("--device gpu:") == 1, p.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["no device visible", "no NVRTC"])
def test_auto_falls_back_to_the_cpu_and_says_why_once(case, tmp_path):
    env, cause = NO_GPU[case]
    X, y = blobs(60)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    p = run_standin(2, ["-m", "hpcgpu.train", "--data", data, "--epochs", "1", "--batch-size", "10",
                        "--progress", "lines", "--out", str(tmp_path / "o.h5")], env=env)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    first = p.stdout.splitlines()[0]
    assert " on cpu (auto: " in first and cause in first, first
    assert sum(cause in ln for ln in p.stdout.splitlines()) == 1  # once, in the first line
    info = run_standin(2, ["-m", "hpcgpu", "info"], env=env)
    assert info.returncode == 0 and info.stderr == "", info.stderr
    lines = info.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["[0/2]", "[1/2]"], info.stdout  # one line per rank
    assert all("device=cpu (auto: " in ln and cause in ln for ln in lines), info.stdout


@pytest.mark.mpi
def test_not_cuda_aware_is_said_in_the_first_line_not_as_a_warning(tmp_path):
    p = run_standin(2, ["-m", "hpcgpu", "matmul", "--bench", "32"], env={"HPCGPU_CUDA_AWARE_MPI": None})
    assert p.returncode == 0 and p.stderr == "", p.stderr
    first = p.stdout.splitlines()[0]
    assert "on gpu (MPI is not CUDA-aware: device buffers are staged through pinned host memory" in first
    p = run_standin(2, ["-m", "hpcgpu", "info"], env={"HPCGPU_CUDA_AWARE_MPI": "1"})
    assert p.returncode == 0 and "cuda_aware=yes (HPCGPU_CUDA_AWARE_MPI=1, forced against the MPI's own answer" \
        in p.stdout, p.stdout


# -- defect 4: the GPU is chosen before MPI_Init ----------------------------------------------------

BINDING = """
import sys
import hpcgpu                      # chooses the GPU from the launcher's local rank, before MPI_Init
import cupy
rt = hpcgpu.init("gpu")
import json
row = dict(rank=rt.rank, local=rt.local_rank, device=rt.device_id, current=cupy.cuda.runtime.getDevice(),
           contexts=cupy._standin.contexts(), binding=rt.binding, sharing=rt.gpu_sharing, summary=rt.summary())
sys.stdout.write(json.dumps(row) + "\\n")  # one write: two ranks' lines must not interleave (print writes twice)
sys.stdout.flush()
"""

LATE = "from mpi4py import MPI\n" + BINDING  # MPI initialized first: the binding comes after it


def _binding_rows(p):
    """The rows BINDING's ranks printed, by rank (a caller checks there is one per rank)."""
    return sorted((json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")), key=lambda d: d["rank"])


@pytest.mark.mpi
def test_gpu_is_chosen_from_the_launcher_before_mpi_init():
    p = run_standin(2, ["-c", BINDING], env={"HPCGPU_STANDIN_DEVICES": "2"})
    assert p.returncode == 0, p.stderr
    rows = _binding_rows(p)
    assert [d["rank"] for d in rows] == [0, 1], p.stdout
    for d in rows:
        assert d["device"] == d["current"] == d["local"] % 2
        assert d["contexts"] == [d["device"]], d  # no extra context on GPU 0
        # Hydra (MPICH, Intel MPI) sets MPI_LOCALRANKID, Open MPI OMPI_COMM_WORLD_LOCAL_RANK: whichever came first
        var = {"openmpi": "OMPI_COMM_WORLD_LOCAL_RANK="}.get(_mpi.flavor(), "MPI_LOCALRANKID=")
        assert "before MPI_Init" in d["binding"] and d["binding"].startswith(var), d
        assert d["sharing"] == 1 and "share a GPU" not in d["summary"], d
    # three ranks on two GPUs: two share one, and the run's first line says so
    shared = run_standin(3, ["-c", BINDING], env={"HPCGPU_STANDIN_DEVICES": "2"})
    assert shared.returncode == 0, shared.stderr
    rows = _binding_rows(shared)
    assert [d["rank"] for d in rows] == [0, 1, 2], shared.stdout
    for d in rows:
        assert d["sharing"] == 2 and "up to 2 ranks share a GPU" in d["summary"], d
    # one GPU a rank by CUDA_VISIBLE_DEVICES (as --gpus-per-task=1): every rank's "GPU 0", none shared
    own = run_standin(2, ["-c", "import os; os.environ['CUDA_VISIBLE_DEVICES'] = os.environ['PMI_RANK' if "
                          "'PMI_RANK' in os.environ else 'OMPI_COMM_WORLD_RANK']\n" + BINDING],
                      env={"HPCGPU_STANDIN_DEVICES": "2"})
    assert own.returncode == 0, own.stderr
    rows = _binding_rows(own)
    assert [d["rank"] for d in rows] == [0, 1], own.stdout
    for d in rows:
        assert d["device"] == 0 and d["sharing"] == 1, d
    late = run_standin(2, ["-c", LATE], env={"HPCGPU_STANDIN_DEVICES": "2"})
    assert late.returncode == 0, late.stderr
    rows = _binding_rows(late)
    assert [d["rank"] for d in rows] == [0, 1], late.stdout
    for d in rows:
        assert "after MPI_Init (MPI was initialized before hpcgpu was imported)" in d["binding"], d
        assert d["device"] == d["local"] % 2


# -- in this process: defects 3, 7 and 9 on the stand-in ------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_loss_kernel_is_numpys_softmax_cross_entropy(cp, dtype):
    """The one-launch softmax cross-entropy (hpcgpu/_kernels.py, compiled from its C++ by the stand-in)
    against the loss's NumPy form: gradient, loss sum and correct count, with a tie (the first maximum
    wins, as numpy.argmax), a NaN logit (the loss stays NaN: divergence is still seen), an infinite one,
    and a saturated row (p_y below the smallest normal: the loss is clamped, not infinite)."""
    from hpcgpu.nn import SoftmaxCrossEntropy

    rng = np.random.default_rng(3)
    z = rng.standard_normal((9, 5)).astype(dtype) * 3
    y = rng.integers(0, 5, 9)
    z[1] = [2, 7, 7, 1, 0]
    y[1] = 2  # a tie at 1 and 2: not correct
    z[2, 3] = np.nan
    z[3, 0] = np.inf
    z[4] = [0, 0, 0, 0, 1e4]
    y[4] = 0
    host, dev = SoftmaxCrossEntropy(), SoftmaxCrossEntropy()
    assert dev.takes_bias(cp) and not host.takes_bias(np)
    b = rng.standard_normal(5).astype(dtype)
    db = cp.asarray(b)
    want_slots = np.zeros(2, dtype)
    with np.errstate(invalid="ignore"):
        want = host.terms(z + b, y, want_slots)
    slots = cp.zeros(2, dtype)
    cp._standin.reset_counters()
    got = dev.terms(cp.asarray(z), cp.asarray(y), slots, bias=db).get()
    assert cp._standin.counters()["launches"] <= 4  # two copies in, the kernel, the sum
    tol = {"float32": 1e-5, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)  # NaN where NumPy has NaN
    ok = np.isfinite(want).all(axis=1)
    assert not ok[2] and not ok[3] and ok[[0, 1, 4, 5, 6, 7, 8]].all()
    g = slots.get()
    assert np.isnan(g[0]) and np.isnan(want_slots[0])
    assert g[1] == want_slots[1]
    finite = np.delete(np.arange(9), [2, 3])
    fs, ws = cp.zeros(2, dtype), np.zeros(2, dtype)
    host.terms((z + b)[finite], y[finite], ws)
    dev.terms(cp.asarray(z[finite]), cp.asarray(y[finite]), fs, bias=db)
    np.testing.assert_allclose(fs.get(), ws, rtol=tol)
    assert np.isfinite(fs.get()).all()  # the saturated row: -log(tiny), not inf


def test_accumulated_micro_batches_on_the_device(cp):
    """Gradient accumulation on a GPU: the weight gradients accumulate through cuBLAS's beta = 1, the bias
    gradients and statistics by small kernels; the sum equals the host's whole-batch gradient."""
    from hpcgpu.nn import MLP

    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(21, 6)), rng.integers(0, 3, 21)
    host, dev = MLP([6, 8, 3], np, "float64", seed=2), MLP([6, 8, 3], cp, "float64", seed=2)
    host.loss_and_grad(X, y)
    cp._standin.clear_gemm_log()
    for k, (lo, hi) in enumerate([(0, 7), (7, 14), (14, 21)]):
        dev.loss_and_grad(cp.asarray(X[lo:hi]), cp.asarray(y[lo:hi]), accumulate=k > 0)
    np.testing.assert_allclose(dev.grad.get(), host.grad, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dev.stats.get(), host.stats, rtol=1e-12)
    betas = [g.get("beta") for g in cp._standin.gemm_log()]
    assert betas.count(1.0) == 2 * 2, betas  # micro-batches 2 and 3: both weight gradients accumulate


def test_empty_blocks_never_reach_cublas(cp):
    from hpcgpu import _gemm

    for m, k, n in [(0, 3, 2), (3, 0, 2), (3, 2, 0), (0, 0, 0)]:
        a, b = cp.ones((m, k)), cp.ones((k, n))
        c = cp.full((m, n), 5.0)
        _gemm.gemm(a, b, c, beta=1.0)
        np.testing.assert_array_equal(c.get(), np.full((m, n), 5.0))
        _gemm.gemm(a, b, c)
        np.testing.assert_array_equal(c.get(), np.zeros((m, n)))
    from cupy import cublas

    with pytest.raises(cp.cuda.cublas.CUBLASError):  # what the guard keeps away: ld = 0
        cublas.gemm("N", "N", cp.ones((0, 3)), cp.ones((3, 2)), out=cp.empty((0, 2)), beta=1.0)


def test_requests_in_flight_get_their_own_staging(cp):
    from hpcgpu import _device
    from hpcgpu.comm import OUT, _dispatch

    bufs = [cp.zeros(7), cp.zeros(7)]
    reqs = [_dispatch(lambda h: MPI.COMM_SELF.Ibcast(h, root=0), [(b, OUT)], cuda_aware=False,
                      nonblocking=True) for b in bufs]
    hosts = [r._back[0][0] for r in reqs]
    assert not np.shares_memory(hosts[0], hosts[1])
    for r in reqs:
        r.Wait()
    assert not any(s.busy for s in _device._SLOTS.values())


def test_device_collective_before_init_needs_the_awareness(cp, monkeypatch):
    import hpcgpu
    from hpcgpu import _context, runtime

    monkeypatch.setattr(runtime, "_RUNTIME", None)
    monkeypatch.setattr(_context, "_CURRENT", None)
    comm = MPI.COMM_SELF.Dup()
    try:
        a = cp.arange(4.0)
        with pytest.raises(ValueError, match="call hpcgpu.init"):
            hpcgpu.comm._dispatch(lambda b: comm.Allreduce(MPI.IN_PLACE, b), [(a, "inout")], cuda_aware=None)
        assert runtime._RUNTIME is None and _context.current() is None  # no init() behind the user's back
        hpcgpu.Allreduce(a, comm=comm, cuda_aware=False)
        np.testing.assert_array_equal(a.get(), np.arange(4.0))
    finally:
        comm.Free()


# -- the local GEMM follows the TF32 mode a CuPy user chose -------------------------------------------

def _compute_types(cp):
    return [(e["api"], e["compute_type"]) for e in cp._standin.gemm_log()]


@pytest.mark.parametrize("tf32_env, math_mode, dtype, want", [
    ("1", "default", "float32", "CUBLAS_COMPUTE_32F_FAST_TF32"),
    ("0", "default", "float32", "CUBLAS_COMPUTE_32F"),
    ("1", "full", "float32", "CUBLAS_COMPUTE_32F"),
    ("0", "tf32", "float32", "CUBLAS_COMPUTE_32F_FAST_TF32"),
    ("1", "default", "complex64", "CUBLAS_COMPUTE_32F_FAST_TF32"),
    ("1", "default", "float64", "CUBLAS_COMPUTE_64F"),
    ("0", "tf32", "float64", "CUBLAS_COMPUTE_64F"),
])
def test_local_gemm_keeps_the_math_mode(load, tf32_env, math_mode, dtype, want):
    """Both GEMMs of SUMMA: the first panel's (beta = 0) and the accumulating ones (beta = 1)."""
    cp = load(CUPY_TF32=tf32_env)
    from cupy.cuda import cublas as lib
    from cupy.cuda import device

    from hpcgpu import _gemm

    rng = np.random.default_rng(0)
    a, b = cp.asarray(rng.random((6, 5)).astype(dtype)), cp.asarray(rng.random((5, 4)).astype(dtype))
    c = cp.empty((6, 4), dtype=dtype)
    cp._standin.clear_gemm_log()
    _gemm.gemm(a, b, c, math_mode=math_mode)
    _gemm.gemm(a, b, c, beta=1.0, math_mode=math_mode)
    assert [ct for _, ct in _compute_types(cp)] == [want, want], cp._standin.gemm_log()
    assert lib.getMathMode(device.get_cublas_handle()) == lib.CUBLAS_DEFAULT_MATH  # put back after the call
    np.testing.assert_allclose(c.get(), 2 * (a.get() @ b.get()), rtol=2e-3 if "FAST_TF32" in want else 1e-5)


def test_summa_one_rank_is_cupy_matmul_and_keeps_tf32(load):
    import hpcgpu

    cp = load(CUPY_TF32="1")
    g = hpcgpu.ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    a = hpcgpu.DistMatrix.random((40, 30), g, "float32", seed=1, xp=cp)
    b = hpcgpu.DistMatrix.random((30, 20), g, "float32", seed=2, xp=cp)
    cp._standin.clear_gemm_log()
    hpcgpu.matmul(a, b)
    assert _compute_types(cp) == [("matmul", "CUBLAS_COMPUTE_32F_FAST_TF32")]
    with pytest.raises(ValueError, match="math_mode must be one of"):
        hpcgpu.matmul(a, b, math_mode="half")
    cp._standin.clear_gemm_log()
    hpcgpu.matmul(a, b, math_mode="full")
    assert _compute_types(cp) == [("gemm", "CUBLAS_COMPUTE_32F")], cp._standin.gemm_log()
    g.free()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_goes_to_gemm_ex_with_float32_compute(load, dtype):
    """SUMMA's accumulator (float32 C) and a half C: cublasGemmEx, CUBLAS_COMPUTE_32F, under every math mode."""
    cp = load(CUPY_TF32="1")
    import hpcgpu
    from hpcgpu import _gemm

    dt = np.dtype(dtype)  # ml_dtypes registered the name when hpcgpu imported it
    rng = np.random.default_rng(0)
    ha, hb = rng.random((6, 5)).astype(dt), rng.random((5, 4)).astype(dt)
    a, b = cp.asarray(ha), cp.asarray(hb)
    acc = cp.empty((6, 4), dtype=np.float32)
    cp._standin.clear_gemm_log()
    _gemm.gemm(a, b, acc)
    _gemm.gemm(a, b, acc, beta=1.0, math_mode="tf32")
    half = cp.empty((6, 4), dtype=dt)
    _gemm.gemm(a, b, half, math_mode="full")
    log = cp._standin.gemm_log()
    assert [(e["api"], e["c_dtype"], e["compute_type"]) for e in log] == [
        ("gemmEx", "float32", "CUBLAS_COMPUTE_32F")] * 2 + [("gemmEx", dtype, "CUBLAS_COMPUTE_32F")], log
    want = ha.astype(np.float32) @ hb.astype(np.float32)
    np.testing.assert_allclose(acc.get(), 2 * want, rtol=1e-6)
    np.testing.assert_array_equal(half.get(), want.astype(dt))
    # transposed views (the mixed-precision backward pass's a.T and w.T) go as CUBLAS_OP_T: one call, no copy
    at, bt = cp.asarray(np.ascontiguousarray(ha.T)), cp.asarray(np.ascontiguousarray(hb.T))
    for x, y in ((at.T, b), (a, bt.T), (at.T, bt.T)):
        cp._standin.reset_counters()
        _gemm.gemm(x, y, acc)
        assert cp._standin.counters()["launches"] == 1, (x.flags.f_contiguous, y.flags.f_contiguous)
        np.testing.assert_allclose(acc.get(), want, rtol=1e-6)
    g = hpcgpu.ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    A = hpcgpu.DistMatrix(a, (6, 5), g)
    B = hpcgpu.DistMatrix(b, (5, 4), g)
    cp._standin.clear_gemm_log()
    C = hpcgpu.matmul(A, B)  # one rank: one GEMM, as cupy.matmul would do it (float16) or gemmEx (bfloat16)
    assert C.dtype == dt
    assert _compute_types(cp) == [("matmul" if dtype == "float16" else "gemmEx", "CUBLAS_COMPUTE_32F")]
    np.testing.assert_array_equal(C.local.get(), want.astype(dt))
    g.free()


@pytest.mark.mpi
def test_summa_panels_keep_tf32_at_several_ranks():
    code = ("import hpcgpu, cupy, json\n"
            "rt = hpcgpu.init('gpu')\n"
            "a = hpcgpu.DistMatrix.random((64, 64), dtype='float32', seed=1)\n"
            "cupy._standin.clear_gemm_log()\n"
            "hpcgpu.matmul(a, a, panel=8)\n"
            "print(json.dumps(sorted({e['compute_type'] for e in cupy._standin.gemm_log()})), flush=True)\n")
    p = run_standin(3, ["-c", code], env={"CUPY_TF32": "1"})
    assert p.returncode == 0, p.stderr
    import re

    lists = re.findall(r"\[[^\]]*\]", p.stdout)  # one per rank; their lines may interleave
    assert lists == ['["CUBLAS_COMPUTE_32F_FAST_TF32"]'] * 3, p.stdout


# -- the staged path's copies on a second stream, and where the time goes -------------

@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_staged_summa_never_waits_for_the_compute_stream(nprocs):
    """Staged panels: the host synchronizes only the copy stream (so MPI and copies overlap the GEMMs),
    and the result is right (a missing copy-stream wait would send the stand-in's NaN poison).
    With timings, every phase is reported per rank, and copies show where they happen."""
    code = ("import hpcgpu, cupy, json, numpy as np\n"
            "from hpcgpu import _device\n"
            "rt = hpcgpu.init('gpu')\n"
            "a = hpcgpu.DistMatrix.random((48, 40), dtype='float64', seed=1)\n"
            "b = hpcgpu.DistMatrix.random((40, 24), dtype='float64', seed=2)\n"
            "A, B = a.gather(), b.gather()\n"
            "null = cupy.cuda.Stream.null._queue()\n"
            "before = null.syncs\n"
            "c = hpcgpu.matmul(a, b, panel=5)\n"
            "compute_syncs = null.syncs - before\n"
            "copy_syncs = _device.copy_stream()._queue().syncs\n"
            "C = c.gather()\n"
            "t = {}\n"
            "hpcgpu.matmul(a, b, panel=5, timings=t)\n"
            "ok = bool(rt.rank != 0 or np.abs(C - A @ B).max() < 1e-12)\n"
            "rows = rt.comm.gather(dict(rank=rt.rank, compute_syncs=compute_syncs, copy_syncs=copy_syncs,\n"
            "      ok=ok, timings=t, grid=list(c.grid.shape)))\n"
            "if rt.rank == 0:\n"
            "    print('RESULT', json.dumps(rows), flush=True)\n")
    p = run_standin(nprocs, ["-c", code], env={"HPCGPU_CUDA_AWARE_MPI": "0"})
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert len(rows) == nprocs, p.stdout
    for r in rows:
        assert r["ok"], r
        assert r["compute_syncs"] == 0, r  # the host never waited for a GEMM inside matmul
        assert r["copy_syncs"] >= 8, r  # one per panel posted (40 / 5)
        t = r["timings"]
        assert set(t) == {"gemm", "d2h", "h2d", "mpi", "total"}, t
        assert all(v >= 0 for v in t.values()) and t["total"] >= t["mpi"] and t["gemm"] > 0, t
    pr, pc = rows[0]["grid"]
    assert any(r["timings"]["h2d"] > 0 for r in rows), rows  # someone received a panel


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_a_model_of_ones_own_is_checked_on_device_arrays(cp):
    """The first loss_and_grad's contract check and Dense(units)'s width read CuPy arrays by their own shape
    (numpy.shape refuses them: the first step of every device run of a model that returns its outputs failed)."""
    from mpi4py import MPI

    from hpcgpu.nn._model import ContractError, FlatModel
    from hpcgpu.train import build

    class Lin:
        def __init__(self, rows):
            self.rows = rows

        def init(self, rng):
            return {"W": np.zeros((4, 3)), "b": np.zeros(3)}

        def loss_and_grad(self, p, x, y):
            z = x @ p["W"] + p["b"]
            return float((z * z).sum()), {"W": 2 * x.T @ z, "b": 2 * z.sum(0)}, z[: self.rows]

        def predict(self, p, x):
            return x @ p["W"] + p["b"]

    X, y = cp.asarray(np.ones((5, 4))), cp.asarray(np.array([0, 1, 2, 0, 1]))
    FlatModel(Lin(5), cp, "float64", task="classification").loss_and_grad(X, y)  # outputs of every row: taken
    with pytest.raises(ContractError, match=r"outputs have shape \(2, 3\), not one row for each of the batch's 5"):
        FlatModel(Lin(2), cp, "float64", task="classification").loss_and_grad(X, y)
    assert build.array_shape(X) == (5, 4) and build.input_width((X, y), MPI.COMM_SELF) == 4
    assert build.input_width((X[:, 0], y), MPI.COMM_SELF) == 0
