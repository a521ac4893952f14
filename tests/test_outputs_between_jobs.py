"""Outputs no other job can touch: two real jobs on one file, and inputs that reach an output through a link.

A run holds each output for its whole duration (a lock beside it, with the holder's host and pid), so a second job
on the same file is refused in one line while the first writes, and a live writer's temporary is never taken for a
dead one's. An input is every file it reads: an HDF5 external link or a virtual dataset into an output makes the
output an input. (Named apart from tests/tasks/test_between_jobs.py, the task farm's: pytest needs distinct
basenames in this layout.)
"""

import os
import signal
import socket
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi

PAUSED = """
import os, runpy, sys, time
import hpcgpu._outputs as policy

claim = policy.claim


def paused_claim(*args, **kw):
    # the real claim, then a pause until the test says go: this job holds its outputs while another starts
    claim(*args, **kw)
    comm = kw["comm"]
    if comm.rank == 0:
        with open(os.environ["CLAIMED"] + ".part", "w") as f:
            f.write(str(os.getpid()))
        os.rename(os.environ["CLAIMED"] + ".part", os.environ["CLAIMED"])
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.05)
    comm.Barrier()


policy.claim = paused_claim
sys.argv = [os.environ["MODULE"], *sys.argv[1:]]
runpy.run_module(os.environ["MODULE"], run_name="__main__")
"""


@pytest.fixture
def matrices(tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(6, 4)), rng.normal(size=(4, 5))
    return write_h5(tmp_path / "a.h5", A=a), write_h5(tmp_path / "b.h5", B=b), a @ b


@pytest.fixture
def paused_job(tmp_path_factory):
    """Start ``mpiexec -n 2 python -m MODULE ARGS`` that stops right after its output claim until released:
    ``start(args, module="hpcgpu") -> (process, rank 0's pid)``; ``go(process)`` lets it finish."""
    procs = []
    sync = tmp_path_factory.mktemp("sync")  # apart from the job's files
    claimed, go = sync / "claimed", sync / "go"

    def start(args, module="hpcgpu"):
        env = _mpi.environment({"CLAIMED": str(claimed), "GO": str(go), "MODULE": module})
        p = subprocess.Popen([_mpi.mpiexec(), "-n", "2", sys.executable, "-c", PAUSED, *map(str, args)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
        procs.append(p)
        for _ in range(2400):  # 120 s at most for the job to start and claim
            if claimed.exists() or p.poll() is not None:
                break
            time.sleep(0.05)
        if not claimed.exists():
            out, err = p.communicate(timeout=60) if p.poll() is not None else ("", "")
            pytest.fail(f"the first job did not claim its output (exit {p.poll()})\n{out}\n{err}")
        return p, int(claimed.read_text())

    def release(p):
        go.touch()
        out, err = p.communicate(timeout=120)
        return p.returncode, out, _mpi.split_launcher(err)[0]

    start.go = release
    yield start
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _line(p):
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.mark.mpi
@pytest.mark.parametrize("second", ["C2", "C1"])
def test_a_second_job_on_a_file_another_job_writes_is_refused(tmp_path, matrices, paused_job, second):
    """Two matmul jobs adding datasets to one file: the second, started while the first holds the file, is one
    line naming the first (its host and rank 0's pid), and the first's live temporary is left alone; once the
    first has ended, the second runs and the file holds both datasets (each job's was lost to the other's
    rename before)."""
    a, b, c = matrices
    shared = tmp_path / "shared.h5"
    first, pid = paused_job(["matmul", a, b, "-o", f"{shared}:C1"])
    live = tmp_path / ".shared.h5.k3y8w2qz.tmp"  # the first job's temporary, as it would be while it writes
    live.write_bytes(b"being written")
    p = _mpi.run(2, ["-m", "hpcgpu", "matmul", a, b, "-o", f"{shared}:{second}"], timeout=120)
    assert _line(p) == (f"hpcgpu: error: -o {shared}:{second}: is being written by another job (host "
                        f"{socket.gethostname()}, pid {pid}): wait for it to end, or write elsewhere")
    assert live.read_bytes() == b"being written"  # a live writer's temporary is not a dead one's
    live.unlink()
    code, out, err = paused_job.go(first)
    assert code == 0 and f"wrote {shared}:C1" in out, (out, err)
    p = _mpi.run(2, ["-m", "hpcgpu", "matmul", a, b, "-o", f"{shared}:C2"], timeout=120)
    assert p.returncode == 0, p.stderr
    with h5py.File(shared, "r") as f:
        assert sorted(f) == ["C1", "C2"]
        np.testing.assert_allclose(f["C1"][()], c, rtol=1e-12)
        np.testing.assert_allclose(f["C2"][()], c, rtol=1e-12)
    assert sorted(os.listdir(tmp_path)) == ["a.h5", "b.h5", "shared.h5"]  # no lock file or temporary left


@pytest.mark.mpi
def test_a_second_run_on_a_checkpoint_another_run_writes_is_refused(tmp_path, paused_job):
    """Two training runs with one --checkpoint, the second with --resume: the second is one line naming the first,
    before it removes anything (its start-up removed the first's live temporary, and the first died writing); once
    the first has ended, the second resumes from its checkpoint."""
    X, y = blobs(80, d=4)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    ckpt = tmp_path / "c.h5"
    train = ["--data", data, "--checkpoint", ckpt, "--hidden", "4", "--batch-size", "20", "--schedule", "constant",
             "--progress", "none"]
    first, pid = paused_job([*train, "--out", tmp_path / "r1.h5", "--epochs", "1"], module="hpcgpu.train")
    p = _mpi.run(2, ["-m", "hpcgpu.train", *train, "--out", tmp_path / "r2.h5", "--epochs", "2", "--resume"],
                 timeout=120)
    assert _line(p) == (f"hpcgpu.train: error: --checkpoint {ckpt}: is being written by another job (host "
                        f"{socket.gethostname()}, pid {pid}): wait for it to end, or write elsewhere")
    code, out, err = paused_job.go(first)
    assert code == 0, (out, err)
    p = _mpi.run(2, ["-m", "hpcgpu.train", *train, "--out", tmp_path / "r2.h5", "--epochs", "2", "--resume"],
                 timeout=120)
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "r2.h5", "r") as f:  # the first epoch's metrics from the checkpoint, then the second
        assert list(f["metrics/epoch"][()]) == [1, 2]
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".")) == []  # no lock file or temporary left


@pytest.mark.mpi
def test_a_dead_jobs_lock_file_and_temporary_are_taken(tmp_path, matrices):
    """A job killed while writing leaves its lock file and its temporary; no process holds the lock, so the next
    job takes the lock, removes the temporary (saying so) and writes."""
    a, b, c = matrices
    out = tmp_path / "out.h5"
    (tmp_path / ".out.h5.lock").write_text("node17 4242\n")
    (tmp_path / ".out.h5.a1b2c3d4.tmp").write_bytes(b"half")
    p = _mpi.run(2, ["-m", "hpcgpu", "matmul", a, b, "-o", out], timeout=120)
    assert p.returncode == 0, p.stderr
    assert "removed" in p.stderr and ".out.h5.a1b2c3d4.tmp" in p.stderr, p.stderr
    with h5py.File(out, "r") as f:
        np.testing.assert_allclose(f["C"][()], c, rtol=1e-12)
    assert sorted(os.listdir(tmp_path)) == ["a.h5", "b.h5", "out.h5"]


def _links(t):
    """The hostile tester's layouts: an input reaching an output (an hpcgpu file) through a link."""
    X, y = blobs(60, d=4)
    with h5py.File(t / "feat.h5", "w") as f:  # a file hpcgpu wrote, now the training data's home
        f.attrs["hpcgpu_version"] = "0"
        f["X"], f["y"] = X, y
    with h5py.File(t / "ext.h5", "w") as f:
        f["train/X"] = h5py.ExternalLink("feat.h5", "/X")  # relative: resolved beside ext.h5, as HDF5 does
        f["train/y"] = h5py.ExternalLink("feat.h5", "/y")
    with h5py.File(t / "vds.h5", "w") as f:
        for name, arr in (("X", X), ("y", y)):
            layout = h5py.VirtualLayout(arr.shape, arr.dtype)
            layout[...] = h5py.VirtualSource("feat.h5", name, shape=arr.shape)
            f.create_virtual_dataset(f"train/{name}", layout)
    rng = np.random.default_rng(1)
    with h5py.File(t / "C.h5", "w") as f:
        f.attrs["hpcgpu_version"] = "0"
        f["C"] = rng.normal(size=(5, 4))
        f["C"].attrs["hpcgpu_version"] = "0"
    write_h5(t / "b.h5", B=rng.normal(size=(4, 3)))
    with h5py.File(t / "lnk.h5", "w") as f:
        f["A"] = h5py.ExternalLink(str(t / "C.h5"), "/C")  # absolute
    os.symlink(t / "C.h5", t / "soft.h5")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_an_output_reached_through_a_link_is_an_input(tmp_path, nprocs):
    """An external link, a virtual dataset or a soft link that leads an input into the output: one line naming
    the output, the input and the link, on every program, and nothing changes (train exited 0 and replaced
    feat.h5, its own data)."""
    _links(tmp_path)
    t = tmp_path
    train = ["-m", "hpcgpu.train", "--epochs", "1", "--batch-size", "20", "--hidden", "4", "--progress", "none"]
    rows = {
        "external": [*train, "--data", t / "ext.h5", "--out", t / "feat.h5"],
        "virtual": [*train, "--data", t / "vds.h5", "--out", t / "feat.h5"],
        "matmul": ["-m", "hpcgpu", "matmul", f"{t}/lnk.h5:A", t / "b.h5", "-o", f"{t}/C.h5:C", "--overwrite"],
        "soft": ["-m", "hpcgpu", "matmul", f"{t}/soft.h5:C", t / "b.h5", "-o", f"{t}/C.h5:C", "--overwrite"],
    }
    before = {n: (t / n).read_bytes() for n in sorted(os.listdir(t))}
    got = _mpi.cli_rows(nprocs, rows, timeout=240)
    tail = "writing it would replace what is read: choose another output"
    expected = {
        "external": f"hpcgpu.train: error: --out {t}/feat.h5: is also an input (--data {t}/ext.h5, through the "
                    f"external link {t}/ext.h5:/train/X); {tail}",
        "virtual": f"hpcgpu.train: error: --out {t}/feat.h5: is also an input (--data {t}/vds.h5, through the "
                   f"virtual dataset {t}/vds.h5:/train/X); {tail}",
        "matmul": f"hpcgpu: error: -o {t}/C.h5:C: is also an input (A {t}/lnk.h5:A, through the external link "
                  f"{t}/lnk.h5:/A); {tail}",
        "soft": f"hpcgpu: error: -o {t}/C.h5:C: is also an input (A {t}/soft.h5:C); {tail}",
    }
    for case, line in expected.items():
        r = got[case]
        assert r.returncode == 2, (case, r.stderr)
        assert r.stderr.strip().splitlines() == [line], (case, r.stderr)
    assert {n: (t / n).read_bytes() for n in sorted(os.listdir(t))} == before  # nothing touched, nothing left
