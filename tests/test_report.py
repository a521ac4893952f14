"""python -m hpcgpu.report on short real runs at 1 and 2 ranks: PNGs that open, a summary, strong scaling."""

import os
import subprocess
import sys

import h5py
import pytest

import _mpi


def _report(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "hpcgpu.report", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=_mpi.environment())


@pytest.mark.mpi
def test_report_of_runs_at_1_and_2_ranks(tmp_path, small_h5):
    pytest.importorskip("matplotlib")
    import matplotlib.image as mpimg

    outs = []
    for n in (1, 2):
        out = tmp_path / f"run{n}.h5"
        p = _mpi.run(n, ["-m", "hpcgpu.train", "--data", small_h5, "--out", str(out), "--epochs", "3",
                         "--batch-size", "32", "--progress", "none"], env={"OMP_NUM_THREADS": "1"}, timeout=120)
        assert p.returncode == 0, p.stderr
        outs.append(out)
    p = _report(*outs, "-o", tmp_path / "rep")
    assert p.returncode == 0, p.stderr
    files = sorted(os.listdir(tmp_path / "rep"))
    assert files == ["report.md", "run1-learning.png", "run1-time.png", "run2-learning.png", "run2-time.png",
                     "scaling.png"], files
    for f in files[1:]:
        img = mpimg.imread(tmp_path / "rep" / f)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 400 and img.std() > 0.01, f
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Strong scaling" in md and "| 2 |" in md and "compute" in md
    assert "n/a (no RAPL zones" in md or "J/GFLOP" in md


def test_report_bad_input_is_one_line(tmp_path):
    p = _report(tmp_path / "none.h5", "-o", tmp_path / "rep")
    assert p.returncode == 2 and p.stderr.strip() == f"hpcgpu.report: error: {tmp_path / 'none.h5'}: no such file"
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["a"] = 1
    p = _report(tmp_path / "x.h5")
    assert p.returncode == 2 and "not an output of python -m hpcgpu.train" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
