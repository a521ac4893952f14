"""Hostile files and a hostile file system: one line and exit 2 on every rank, however the library words it."""

import os

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi

pytestmark = pytest.mark.mpi

X, Y = blobs(100, d=4)


def _corrupt_header(t):
    path = write_h5(t / "c.h5", train__X=X, train__y=Y)
    with h5py.File(path) as f:
        addr = h5py.h5g.get_objinfo(f["train"].id, b"X").objno[0]  # the object header of /train/X
    with open(path, "r+b") as f:
        f.seek(addr)
        f.write(b"\xff" * 16)
    return path


def _external_link(t):
    with h5py.File(t / "e.h5", "w") as f:
        f["train/X"] = h5py.ExternalLink("missing.h5", "/X")
        f["train/y"] = Y
    return str(t / "e.h5")


def _huge_label(t):
    y = Y.copy()
    y[5] = 10**9
    return write_h5(t / "l.h5", train__X=X, train__y=y)


def _declared_beyond_memory(t):
    from hpcgpu.runtime import host_memory

    rows = int(4 * host_memory() // (64 * 4 + 8)) + 1  # four times what the node could hold
    with h5py.File(t / "d.h5", "w") as f:
        f.create_dataset("train/X", shape=(rows, 64), dtype="f4", chunks=(1000, 64))[:100] = np.ones((100, 64))
        f.create_dataset("train/y", shape=(rows,), dtype="i8", chunks=(100_000,))[:100] = Y
    return str(t / "d.h5")


def _overflowing(t):
    X64 = X.astype(np.float64)
    X64[7, 2] = 1e39
    return write_h5(t / "o.h5", train__X=X64, train__y=Y)


def _directory(t):
    (t / "adir.h5").mkdir()
    return str(t / "adir.h5")


CASES = {
    # HDF5 1.14 says "Unable to synchronously open object", 1.10 (Debian's parallel HDF5) "Unable to open object"
    "corrupt object header": (_corrupt_header, "open object (bad object header version number)')"),
    "external link to a missing file": (_external_link, "/train cannot be read"),
    "a label of 10^9": (_huge_label, "its last layer has 1000000001 outputs"),
    "declared beyond memory": (_declared_beyond_memory, "more than its memory"),
    "finite values beyond float32": (_overflowing, "/train/X row 7 holds 1e+39, beyond float32's range (3.4e+38): "
                                                   "use --dtype float64, or rescale the features"),
    "a directory": (_directory, "is a directory, not an HDF5 file"),
}


@pytest.mark.parametrize("case", _mpi.cases(list(CASES), list(CASES)[::2]))
def test_a_hostile_file_is_one_line_and_exit_2(case, tmp_path):
    make, message = CASES[case]
    data = make(tmp_path)
    p = _mpi.run(3, ["-m", "hpcgpu.train", "--data", data, "--out", tmp_path / "out.h5", "--epochs", "1",
                     "--batch-size", "16", "--progress", "none"], timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    errors = [ln for ln in lines if not ln.startswith("hpcgpu.train: warning: ")]
    assert len(errors) == 1 and errors[0].startswith("hpcgpu.train: error: ") and message in errors[0], p.stderr
    if case == "corrupt object header":
        assert "/train cannot be read ('Unable to " in errors[0], p.stderr
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_partly_written_dataset_trains_with_one_warning_a_dataset(tmp_path, nprocs):
    """A declared size larger than what the file holds: the unwritten chunks read as zeros, which is legal HDF5
    and may be meant, so the run goes on, with one warning per dataset from rank 0."""
    with h5py.File(tmp_path / "u.h5", "w") as f:
        f.create_dataset("train/X", shape=(4000, 4), dtype="f4", chunks=(100, 4))[:100] = X
        f.create_dataset("train/y", shape=(4000,), dtype="i8", chunks=(100,))[:100] = Y
    p = _mpi.run(nprocs, ["-m", "hpcgpu.train", "--data", tmp_path / "u.h5", "--out", tmp_path / "o.h5",
                          "--epochs", "1", "--batch-size", "64", "--hidden", "4", "--progress", "none"], timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"hpcgpu.train: warning: --data {tmp_path / 'u.h5'}: /train/X declares 4000 rows but only 1 of its 40 "
        "chunks were ever written: the rest read as 0.0 (the fill value)",
        f"hpcgpu.train: warning: --data {tmp_path / 'u.h5'}: /train/y declares 4000 rows but only 1 of its 40 "
        "chunks were ever written: the rest read as 0 (the fill value)"], p.stderr


SIZE_LIMIT = """
import resource, sys
def _hook(event, args):  # the file system refuses writes from the import of the writer on (a full disk)
    if event == "import" and args[0] == "hpcgpu.train.{module}":
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
sys.addaudithook(_hook)
"""


@pytest.mark.parametrize("module, option", [("output", "--out"), ("checkpoint", "--checkpoint")])
def test_a_full_disk_when_writing_the_result_is_one_line(tmp_path, module, option):
    """HDF5 words a failed write over several lines, raises it at the file's close, and in its 1.10 releases
    crashed when the failed file's objects were released: still one line, exit 2, no file and no temporary
    left, for the results and for a checkpoint."""
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=Y)
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "sitecustomize.py").write_text(SIZE_LIMIT.replace("{module}", module))
    env = {"PYTHONPATH": f"{tmp_path / 'sc'}{os.pathsep}{_mpi.ROOT}"}
    target = tmp_path / ("o.h5" if module == "output" else "ck.h5")
    extra = [] if module == "output" else ["--checkpoint", target]
    p = _mpi.run(2, ["-m", "hpcgpu.train", "--data", data, "--out", tmp_path / "o.h5", "--epochs", "1",
                     "--batch-size", "16", "--hidden", "256,256", "--progress", "none", *extra], timeout=120, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hpcgpu.train: error: {option} {target}: cannot write ("), \
        p.stderr
    assert "File too large" in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["d.h5", "sc"]
