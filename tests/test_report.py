"""python -m hpcgpu.report on short real runs at 1 and 2 ranks: PNGs that open, a summary, strong scaling."""

import os
import subprocess
import sys

import h5py
import numpy as np
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
    runs = {n: _written(out) for n, out in zip((1, 2), outs, strict=True)}
    # an energy plot for a run whose energy was measured (a machine with RAPL counters or a GPU's NVML), none
    # for a run without; whichever this machine is
    expected = ["report.md", "scaling.png"]
    for n, r in runs.items():
        expected += [f"run{n}-learning.png", f"run{n}-time.png"] + ([f"run{n}-energy.png"] if r["measured"] else [])
    files = sorted(os.listdir(tmp_path / "rep"))
    assert files == sorted(expected), files
    assert p.stdout.startswith(f"hpcgpu.report: wrote {len(files)} files to "), p.stdout
    for f in files:
        if f.endswith(".png"):
            img = mpimg.imread(tmp_path / "rep" / f)
            assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 400 and img.std() > 0.01, f
    md = (tmp_path / "rep" / "report.md").read_text()
    # each run's row: the values the report computes from its file, as the file holds them
    for n, r in runs.items():
        rows = [ln for ln in md.splitlines() if ln.startswith(f"| `run{n}.h5` |")]
        assert len(rows) == 1, md
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        assert len(cells) == 9, rows[0]
        assert cells[1:5] == [str(n), r["device"], "3", f"{r['accuracy']:.4f}"], rows[0]
        assert cells[5] == f"{r['sps']:.0f}", rows[0]
        assert cells[6] == r["split"] and "compute" in cells[6], rows[0]
        if r["measured"]:
            assert cells[7:] == [f"{r['joules']:.1f}", f"{r['j_per_gflop']:.3f}"], rows[0]
            assert float(cells[8]) > 0, rows[0]
        else:
            assert cells[7:] == [f"n/a ({r['why']})" if r["why"] else "n/a", "n/a"], rows[0]
    s1, s2 = runs[1]["sps"], runs[2]["sps"]
    assert "## Strong scaling" in md, md
    assert f"| 1 | {s1:.0f} | 1.00 | 1.00 |" in md.splitlines(), md
    assert f"| 2 | {s2:.0f} | {s2 / s1:.2f} | {s2 / s1 / 2:.2f} |" in md.splitlines(), md


def _written(path):
    """What the report should show of a trainer output, read from the file itself."""
    with h5py.File(path) as f:
        m = f["metrics"]
        energy = m["energy_joules"][()]
        sps = m["samples_per_second"][()]
        t = f["timing"]  # each phase's share of the summed mean seconds, in the trainer's order of the phases
        tot = {k: float(t[k][:, 1].sum()) for k in str(t.attrs["phases"]).split(",")}
        split = ", ".join(f"{k} {100 * v / sum(tot.values()):.0f}" for k, v in tot.items())
        return dict(device=str(f.attrs["device"]), split=split, accuracy=float(m["test_accuracy"][-1]),
                    sps=float(np.median(sps[1:])), measured=not np.isnan(energy).all(),
                    joules=float(np.nanmedian(energy)) if not np.isnan(energy).all() else None,
                    j_per_gflop=float(np.nanmedian(m["joules_per_gflop"][()])) if not np.isnan(energy).all() else None,
                    why="; ".join(str(m[k].attrs["why_nan"]) for k in ("energy_joules_cpu", "energy_joules_gpu")
                                  if m[k].attrs.get("why_nan", "")))


def _fake_run(path, ranks, energy, jpg, why_cpu=""):
    """A trainer output of 4 epochs as the report reads it, with the energy given (NaN: none was read)."""
    with h5py.File(path, "w") as f:
        f.attrs["world_size"], f.attrs["device"] = ranks, "cpu"
        m = f.create_group("metrics")
        m["epoch"], m["seconds"] = [1, 2, 3, 4], [1.0, 0.5, 0.5, 0.5]
        m["train_loss"], m["test_loss"] = [1.0, 0.5, 0.25, 0.2], [1.1, 0.6, 0.3, 0.25]
        m["train_accuracy"], m["test_accuracy"] = [0.5, 0.75, 0.875, 0.9], [0.5, 0.625, 0.75, 0.8125]
        m["samples_per_second"] = [100.0, 200.0 * ranks, 220.0 * ranks, 260.0 * ranks]  # median of 2+: 220 P
        m["energy_joules"], m["joules_per_gflop"] = energy, jpg
        m["energy_joules_cpu"], m["energy_joules_gpu"] = energy, [np.nan] * 4
        m["energy_joules_cpu"].attrs["why_nan"] = why_cpu
        m["energy_joules_gpu"].attrs["why_nan"] = "no GPU"
    return path


def test_report_shows_the_energy_a_run_measured(tmp_path):
    """The energy branch on any machine: a run with joules gets its plot and the medians in the table
    (NaN epochs left out; the means would read 11.2 and 0.090), a run without gets neither and says why."""
    pytest.importorskip("matplotlib")
    a = _fake_run(tmp_path / "a.h5", 1, [12.5, np.nan, 10.3, 10.8], [0.12, np.nan, 0.07, 0.08])
    b = _fake_run(tmp_path / "b.h5", 2, [np.nan] * 4, [np.nan] * 4, why_cpu="no RAPL zones readable")
    p = _report(a, b, "-o", tmp_path / "rep")
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path / "rep")) == ["a-energy.png", "a-learning.png", "b-learning.png",
                                                    "report.md", "scaling.png"]
    md = (tmp_path / "rep" / "report.md").read_text().splitlines()
    assert "| `a.h5` | 1 | cpu | 4 | 0.8125 | 220 | - | 10.8 | 0.080 |" in md, md
    assert "| `b.h5` | 2 | cpu | 4 | 0.8125 | 440 | - | n/a (no RAPL zones readable; no GPU) | n/a |" in md, md
    assert "| 2 | 440 | 2.00 | 1.00 |" in md, md


def test_report_bad_input_is_one_line(tmp_path):
    p = _report(tmp_path / "none.h5", "-o", tmp_path / "rep")
    assert p.returncode == 2 and p.stderr.strip() == f"hpcgpu.report: error: {tmp_path / 'none.h5'}: no such file"
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["a"] = 1
    p = _report(tmp_path / "x.h5")
    assert p.returncode == 2 and "not an output of python -m hpcgpu.train" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
