"""Between MPI stacks: a checkpoint written under one MPI resumes under another.

Runs where this checkout has another per-MPI environment beside the one
running the tests (``make test-mpi MPI=...`` builds them; CI has all four by
its later stages): the checkpoint is written under this MPI and resumed under
the other, and the other way round, at 2 ranks, where every Allreduce is one
addition and so the same bits under every MPI.
"""

import os
import shutil
import subprocess

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi

pytestmark = pytest.mark.mpi

OPTS = ("--progress", "none", "--dtype", "float64", "--hidden", "16,8", "--batch-size", "20", "--lr", "0.1",
        "--epochs", "3")


def _train(data, out, *extra, python=None):
    p = _mpi.run(2, ["-m", "hpcgpu.train", "--data", data, "--out", str(out), *OPTS, *map(str, extra)],
                 timeout=180, python=python)
    assert p.returncode == 0, (python, p.stderr)
    return p


def _state(path):
    with h5py.File(path) as f:
        return {k: f["model"][k][()] for k in f["model"]}, f["metrics/train_loss"][()], f.attrs["mpi_library"]


@pytest.mark.skipif(not _mpi.other_stacks(), reason="no other MPI environment in this checkout (make test-mpi MPI=...)")
@pytest.mark.parametrize("direction", ["here-to-there", "there-to-here"])
def test_checkpoint_resumes_under_another_mpi(tmp_path, direction):
    other = _mpi.other_stacks()[0]
    first, second = (None, other) if direction == "here-to-there" else (other, None)
    X, y = blobs(240, d=6)
    Xt, yt = blobs(61, d=6, seed=1)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
    _train(data, tmp_path / "full.h5", python=second)  # the uninterrupted run, under the resuming MPI
    ck = tmp_path / "a" / "ck.h5"
    _train(data, tmp_path / "a" / "out.h5", "--checkpoint", ck, "--checkpoint-every", "15",
           "--keep-checkpoints", "10", python=first)
    (mid,) = [f for f in os.listdir(ck.parent) if f.startswith("ck.h5.") and _step(ck.parent / f) == 15]
    os.makedirs(tmp_path / "b")
    shutil.copy(ck.parent / mid, tmp_path / "b" / "ck.h5")
    _train(data, tmp_path / "b" / "out.h5", "--checkpoint", tmp_path / "b" / "ck.h5", "--resume", python=second)
    ref, ref_loss, lib_ref = _state(tmp_path / "full.h5")
    got, loss, lib_got = _state(tmp_path / "b" / "out.h5")
    _, _, lib_first = _state(tmp_path / "a" / "out.h5")
    assert _mpi.flavor(first) != _mpi.flavor(second) or lib_first != lib_got  # two different MPI libraries
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
    np.testing.assert_array_equal(loss, ref_loss)


def _step(path):
    with h5py.File(path) as f:
        return int(f.attrs["step"])


def _hydra_and_open_mpi():
    """This stack's launcher when it is Hydra (MPICH, Intel MPI), and another stack's Open MPI python."""
    if _mpi.flavor() not in ("mpich", "impi"):
        return None
    return next((py for py in _mpi.other_stacks() if _mpi.flavor(py) == "openmpi"), None)


@pytest.mark.skipif(not _hydra_and_open_mpi(), reason="needs a Hydra launcher here and an Open MPI environment")
def test_open_mpi_under_hydra_is_refused_not_run_n_times(tmp_path):
    """Open MPI's mpi4py under Hydra's mpiexec: every process is a world of 1 (mpi4py only warns). hpcgpu
    stops it, naming the launcher's PMI_SIZE and the library, once (rank 0 of the launcher)."""
    py = _hydra_and_open_mpi()
    e = _mpi.environment()
    e["PYTHONPATH"] = _mpi.ROOT
    p = subprocess.run([_mpi.mpiexec(), "-n", "3", py, "-m", "hpcgpu", "info", "--device", "cpu"], env=e,
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode != 0, p.stdout + p.stderr
    ours = [ln for ln in p.stderr.splitlines() if "MPI sees a world of 1" in ln]
    assert len(ours) == 1 and "(PMI_SIZE=3)" in ours[0] and "Open MPI" in ours[0], p.stderr
    assert "[0/1]" not in p.stdout, p.stdout  # no copy ran
