"""NCCL for device buffers, on the CuPy stand-in's NCCL: which path is taken and why, its errors, its rules.

Ranks each get a stand-in GPU of their own with HPCGPU_STANDIN_DEVICES (ranks bind local_rank % devices);
with one device they share it, which NCCL refuses, and hpcgpu stays on MPI. The collectives, SUMMA and the
trainer over NCCL are checked in test_device_path.py (the "nccl" path).
"""

import json

import numpy as np
import pytest

import _mpi
from _data import blobs, write_h5
from _standin_env import run_standin

OWN = {"HPCGPU_STANDIN_DEVICES": "4"}
SHARED = {"HPCGPU_STANDIN_DEVICES": "1"}

INFO = ["-m", "hpcgpu", "info", "--device", "gpu"]


def _collectives(stdout: str) -> list[str]:
    return [line.split(" collectives=", 1)[1].split(" cuda_graphs=")[0] for line in stdout.splitlines()
            if " collectives=" in line]


@pytest.mark.mpi
@pytest.mark.parametrize("case", _mpi.cases(["own GPUs", "shared GPU", "no NCCL library", "asked for MPI", "one rank"],
                                            ["own GPUs", "shared GPU"]))
def test_info_says_which_path_and_why(case):
    nprocs, env, args, want = {
        "own GPUs": (2, OWN, [], "nccl (NCCL 2.30.7: every rank has a GPU of its own)"),
        "shared GPU": (3, SHARED, [], "mpi (ranks share a GPU (up to 3 on one), which NCCL refuses)"),
        "no NCCL library": (2, {**OWN, "HPCGPU_STANDIN_FAIL": "nccl"}, [], "mpi (CuPy found no NCCL library"),
        "asked for MPI": (2, OWN, ["--collectives", "mpi"], "mpi (asked for (collectives='mpi'))"),
        "one rank": (1, OWN, [], "mpi (one rank: no collective runs)"),
    }[case]
    p = run_standin(nprocs, [*INFO, *args], env=env, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    found = _collectives(p.stdout)
    assert len(found) == nprocs and all(f.startswith(want) for f in found), p.stdout


CLIS = {"info": INFO, "matmul": ["-m", "hpcgpu", "matmul", "--bench", "16", "--device", "gpu"],
        "train": ["-m", "hpcgpu.train", "--epochs", "1", "--device", "gpu"]}
CANNOT = {"shared GPU": (SHARED, "gpu", "ranks share a GPU (up to 2 on one), which NCCL refuses"),
          "no NCCL library": ({**OWN, "HPCGPU_STANDIN_FAIL": "nccl"}, "gpu", "CuPy found no NCCL library"),
          "cpu": (OWN, "cpu", "needs a GPU on every rank, and the device is the cpu")}


@pytest.mark.mpi
@pytest.mark.parametrize("cli", _mpi.cases(list(CLIS), ["train"]))
@pytest.mark.parametrize("case", _mpi.cases(list(CANNOT), ["shared GPU"]))
def test_nccl_asked_for_where_it_cannot_serve_is_one_line(cli, case, tmp_path):
    env, device, cause = CANNOT[case]
    out = ["--out", str(tmp_path / "o.h5")] if cli == "train" else []
    args = [a if a != "gpu" else device for a in CLIS[cli]]
    p = run_standin(2, [*args, "--collectives", "nccl", *out], env=env, timeout=90)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "collectives='nccl'" in lines[0] and cause in lines[0], p.stderr
    assert not (tmp_path / "o.h5").exists()


ASYNC = """
import time
import hpcgpu
from hpcgpu import comm as C
rt = hpcgpu.init("gpu")
a = rt.xp.ones(8)
C.Allreduce(a)  # the peer "dies" in it: NCCL reports ncclRemoteError asynchronously
print("issued", flush=True)
time.sleep(120)  # the monitor ends the job long before
print("not aborted", flush=True)
"""


@pytest.mark.mpi
def test_an_asynchronous_nccl_error_ends_the_job_with_one_line():
    p = run_standin(2, ["-c", ASYNC], env={**OWN, "HPCGPU_STANDIN_FAIL": "nccl_async"}, timeout=90)
    assert p.returncode != 0 and "not aborted" not in p.stdout, p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("hpcgpu: NCCL error")]
    assert errors, p.stderr
    assert "asynchronous error of a communicator of 2 ranks: ncclRemoteError" in errors[0], errors
    assert errors[0].endswith("aborting the job"), errors


STALL = """
import time
import hpcgpu
from hpcgpu import comm as C
rt = hpcgpu.init("gpu")
a = rt.xp.ones(8)
C.Allreduce(a)  # both: the NCCL communicator is made (its bootstrap is MPI's, which MPI's watchdog covers)
if rt.rank == 0:
    C.Allreduce(a)  # rank 1 never arrives
else:
    time.sleep(120)
print("not aborted", flush=True)
"""


@pytest.mark.mpi
def test_a_nccl_collective_a_rank_never_reaches_ends_the_job_at_the_stall_timeout():
    """On a GPU the host returns from the call and the operation waits on the GPU (the monitor's event query);
    on the stand-in the host waits inside the call: either way the stall timeout ends the job with one line."""
    p = run_standin(2, ["-c", STALL], env={**OWN, "HPCGPU_STALL_TIMEOUT": "3"}, timeout=90)
    assert p.returncode != 0 and "not aborted" not in p.stdout, p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("hpcgpu: NCCL error on rank 0")]
    assert len(errors) == 1, p.stderr
    assert "Allreduce over 2 ranks" in errors[0] and "(stall timeout 3 s): a rank has not arrived" in errors[0]


SUBCOMMS = """
import numpy as np
import hpcgpu
from hpcgpu import _nccl, comm as C
rt = hpcgpu.init("gpu")
half = rt.comm.Split(rt.rank % 2, key=rt.rank)  # ranks 0, 2 and ranks 1, 3
a = rt.xp.full(5, float(rt.rank))
C.Allreduce(a, comm=half)
assert np.array_equal(a.get(), np.full(5, 2.0 + 2 * (rt.rank % 2))), a.get()
mine = _nccl.communicator(half)
assert mine.size == 2 and mine is _nccl.communicator(half)  # made once, then cached on the communicator
b = rt.xp.full(3, 1.0)
C.Allreduce(b)  # the runtime's communicator: a NCCL communicator of its own
assert np.array_equal(b.get(), np.full(3, 4.0))
assert _nccl.communicator(rt.comm).size == 4
half.Free()  # frees its NCCL communicator too
assert not mine.alive
from cupy.cuda import nccl
ops = [(c["op"], c["size"]) for c in nccl.calls()]
assert ops == [("allReduce", 2), ("allReduce", 4)], ops
done = rt.comm.gather(rt.rank)  # one line, from rank 0 (the launcher interleaves the ranks' prints)
if rt.rank == 0:
    print("ok", *done, flush=True)
"""


@pytest.mark.mpi
def test_each_communicator_gets_its_own_nccl_communicator_freed_with_it():
    p = run_standin(4, ["-c", SUBCOMMS], env=OWN, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.split() == "ok 0 1 2 3".split(), p.stdout


@pytest.mark.mpi
def test_a_stop_over_nccl_checkpoints_and_resumes_exactly(tmp_path):
    """Over NCCL the stop request is agreed on the host (the reduced flag stays on the device): every rank
    stops after the same step, and the resumed run ends where the uninterrupted one does."""
    X, y = blobs(120, d=6, c=3)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    opts = ["-m", "hpcgpu.train", "--data", data, "--epochs", "2", "--batch-size", "20", "--progress", "none",
            "--device", "gpu", "--dtype", "float64", "--checkpoint", str(tmp_path / "ck.h5")]
    full = run_standin(2, [*opts, "--out", str(tmp_path / "full.h5"), "--checkpoint", str(tmp_path / "f.h5")],
                       env=OWN, timeout=120)
    assert full.returncode == 0, full.stdout + full.stderr
    stop = tmp_path / "stop"
    stop.write_text("")
    a = run_standin(2, [*opts, "--out", str(tmp_path / "a.h5"), "--stop-file", str(stop)], env=OWN, timeout=120)
    assert a.returncode == 3, a.stdout + a.stderr
    stop.unlink()
    b = run_standin(2, [*opts, "--resume", "--out", str(tmp_path / "b.h5")], env=OWN, timeout=120)
    assert b.returncode == 0, b.stdout + b.stderr
    import h5py

    with h5py.File(tmp_path / "full.h5") as f, h5py.File(tmp_path / "b.h5") as g:
        for k in f["model"]:
            np.testing.assert_array_equal(g["model"][k][()], f["model"][k][()], err_msg=k)
        np.testing.assert_array_equal(g["metrics"]["train_loss"][()], f["metrics"]["train_loss"][()])


SUMMA_SYNCS = """
import json
import numpy as np
import cupy
import hpcgpu
from cupy.cuda import nccl
rt = hpcgpu.init("gpu")
grid = hpcgpu.ProcessGrid(comm=rt.comm)
a = hpcgpu.DistMatrix.random((37, 29), grid, np.float64, seed=1)
b = hpcgpu.DistMatrix.random((29, 23), grid, np.float64, seed=2)
cupy.cuda.Device().synchronize()
nccl.clear_calls()
cupy._standin.reset_counters()
c = hpcgpu.matmul(a, b, panel=4)
counts = cupy._standin.counters()
calls = len(nccl.calls())
A, B, C = a.gather(), b.gather(), c.gather()
every = rt.comm.gather((counts["host_syncs"], calls))
if rt.rank == 0:
    np.testing.assert_allclose(C, A @ B, rtol=1e-12)
    print(json.dumps(every), flush=True)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([2, 4], [4]))
def test_summa_over_nccl_never_waits_for_the_gpu(nprocs):
    """SUMMA's panel broadcasts over NCCL: the host never waits for the GPU during the multiply (the stand-in
    counts), and every rank broadcasts over NCCL."""
    p = run_standin(nprocs, ["-c", SUMMA_SYNCS], env=OWN, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    every = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(every) == nprocs
    for syncs, calls in every:
        assert syncs == 0, p.stdout
        assert calls > 0, p.stdout


# -- the stand-in's NCCL keeps NCCL's rules --------------------------------------------------------

RULES = """
import sys
import numpy as np
from mpi4py import MPI
import cupy
from cupy.cuda import nccl

comm = MPI.COMM_WORLD
cupy.cuda.Device(comm.rank % cupy.cuda.runtime.getDeviceCount()).use()
uid = comm.bcast(nccl.get_unique_id() if comm.rank == 0 else None)
assert isinstance(uid, bytes) and len(uid) == 128
case = sys.argv[1]


def say(text):  # one line a rank, printed by rank 0 (the launcher interleaves the ranks' prints)
    lines = comm.gather(text)
    if comm.rank == 0:
        print("\\n".join(lines), flush=True)
    sys.exit(0)


try:
    c = nccl.NcclCommunicator(comm.size, uid, comm.rank)
except nccl.NcclError as e:
    say(f"init {e.status}")
s = cupy.cuda.Stream(non_blocking=True)
a = cupy.full(4, float(comm.rank + 1))
if case == "ordered":
    s.wait_event(cupy.cuda.get_current_stream().record())
    c.allReduce(a.data.ptr, a.data.ptr, 4, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, s.ptr)
    # stream-ordered: nothing has landed for the host until the stream is synchronized
    landed = np.frombuffer((np.ctypeslib.ctypes.c_char * 32).from_address(a.__cuda_array_interface__["data"][0]),
                           np.float64)
    assert not np.array_equal(landed, np.full(4, 3.0)), landed
    s.synchronize()
    assert np.array_equal(a.get(), np.full(4, 3.0)), a.get()
    b = cupy.zeros(4)
    s.wait_event(cupy.cuda.get_current_stream().record())  # b's zeros before the gather writes it
    nccl.groupStart()
    c.bcast(a.data.ptr, 4, nccl.NCCL_FLOAT64, 1, s.ptr)
    c.allGather(a.data.ptr, b.data.ptr, 2, nccl.NCCL_FLOAT64, s.ptr)
    assert nccl.calls()[-1]["op"] == "allReduce"  # held until groupEnd
    nccl.groupEnd()
    s.synchronize()
    assert [x["op"] for x in nccl.calls()] == ["allReduce", "bcast", "allGather"]
    assert np.array_equal(b.get(), np.full(4, 3.0)), b.get()
    say("ok")
elif case == "capture":  # NCCL 2.9.6+: a collective captured in a CUDA graph runs at each replay
    s.wait_event(cupy.cuda.get_current_stream().record())
    s.synchronize()
    s.begin_capture()
    c.allReduce(a.data.ptr, a.data.ptr, 4, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, s.ptr)
    g = s.end_capture()
    s.synchronize()
    assert np.array_equal(a.get(), np.full(4, comm.rank + 1.0)), a.get()  # nothing captured has run
    g.launch(s)
    g.launch(s)
    s.synchronize()
    say(f"replayed {a.get().tolist()}")
elif case == "unordered":
    try:  # the buffer's last kernel is on the current stream, and the NCCL stream does not wait for it
        c.allReduce(a.data.ptr, a.data.ptr, 4, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, s.ptr)
    except RuntimeError as e:
        say(f"refused: {'nothing ordering it before the collective' in str(e)}")
"""


@pytest.mark.mpi
@pytest.mark.parametrize("case, env, want", [
    ("ordered", OWN, ["ok", "ok"]),
    ("unordered", OWN, ["refused: True", "refused: True"]),
    ("capture", OWN, ["replayed [6.0, 6.0, 6.0, 6.0]"] * 2),  # (1 + 2) summed twice
    ("ordered", SHARED, ["init 5", "init 5"]),  # two ranks on one GPU: ncclInvalidUsage on every rank
])
def test_the_standin_nccl_keeps_ncclS_rules(case, env, want):
    p = run_standin(2, ["-c", RULES, case], env=env, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines() == want, p.stdout + p.stderr

