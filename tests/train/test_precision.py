"""Mixed precision: bf16-mixed and 16-mixed learn, overflows are skipped, resume is exact."""

import json

import h5py
import numpy as np
import pytest

import _mpi
from hpcgpu.train import MLP
from hpcgpu.train.precision import LossScaler, resolve


def _train(n, out, *extra, env=None, timeout=240):
    return _mpi.run(n, ["-m", "hpcgpu.train", "--out", str(out), "--progress", "lines", *map(str, extra)],
                    timeout=timeout, env=env)


def test_resolve_names_and_conflicts():
    assert resolve("", "float32")[:2] == ("32-true", np.dtype("float32"))
    assert resolve("", "float64")[:2] == ("64-true", np.dtype("float64"))
    assert resolve("64-true", "float32")[1] == np.dtype("float64")  # --dtype's default gives way
    name, master, compute = resolve("bf16-mixed", "float32")
    assert (name, master, compute.name) == ("bf16-mixed", np.dtype("float32"), "bfloat16")
    assert resolve("16-mixed", "float32")[2] == np.float16
    with pytest.raises(ValueError, match="--precision bf16-mixed keeps float32 weights, but --dtype is float64"):
        resolve("bf16-mixed", "float64")
    with pytest.raises(ValueError, match="--precision must be one of"):
        resolve("8-mixed", "float32")


def test_loss_scaler_follows_grad_scaler():
    s = LossScaler(growth_interval=3)
    assert s.scale == 65536.0
    s.update(True)
    assert s.scale == 32768.0 and s.clean_steps == 0
    for _ in range(3):
        s.update(False)
    assert s.scale == 65536.0 and s.clean_steps == 0
    s.update(False)
    t = LossScaler()
    t.load_state_dict(s.state_dict())
    assert (t.scale, t.clean_steps) == (65536.0, 1)


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_gradient_is_close_to_float32_and_scales(precision):
    """16-bit GEMM operands, float32 accumulation: the gradient within bfloat16's / float16's rounding of
    float32's; a loss scale of 2**10 multiplies it (exactly, for a power of two away from the range's ends)."""
    from hpcgpu.train.precision import resolve as r

    compute = r(precision, "float32")[2]
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(64, 20)).astype(np.float32), rng.integers(0, 5, 64)
    ref = MLP([20, 32, 16, 5], seed=1)
    ref.loss_and_grad(X, y)
    m = MLP([20, 32, 16, 5], seed=1, compute_dtype=compute)
    m.loss_and_grad(X, y)
    tol = {"bf16-mixed": 0.1, "16-mixed": 0.05}[precision]
    assert np.abs(m.grad - ref.grad).max() <= tol * np.abs(ref.grad).max()
    np.testing.assert_allclose(m.stats, ref.stats, rtol=tol)
    scaled = MLP([20, 32, 16, 5], seed=1, compute_dtype=compute)
    scaled.loss_and_grad(X, y, loss_scale=1024.0)
    np.testing.assert_allclose(scaled.grad / 1024, m.grad, rtol=1e-6, atol=1e-7 * np.abs(m.grad).max())
    np.testing.assert_array_equal(scaled.stats, m.stats)  # the loss itself is not scaled
    assert m.params.dtype == np.float32 and m.grad.dtype == np.float32


@pytest.mark.mpi
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
@pytest.mark.parametrize("nprocs", _mpi.cases([1, pytest.param(3, marks=pytest.mark.device)], [3]))
def test_mixed_precision_learns_digits(precision, nprocs, tmp_path):
    """The main job's options on the bundled digits: at least 0.95 test accuracy; the loss scale and the
    skipped steps in /metrics, float32 weights in /model."""
    out = tmp_path / "o.h5"
    p = _train(nprocs, out, "--precision", precision, env={"HPCGPU_DATA_DIR": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stderr
    assert f"precision {precision}" in p.stdout.splitlines()[0]
    with h5py.File(out) as f:
        assert f["metrics/test_accuracy"][-1] >= 0.95
        scales, skipped = f["metrics/loss_scale"][()], f["metrics/skipped_steps"][()]
        assert f["model/fc0.weight"].dtype == np.float32
        assert json.loads(f.attrs["config"])["precision"] == precision
    if precision == "bf16-mixed":
        assert (scales == 1).all() and (skipped == 0).all()
    else:  # each skipped step halved the scale (no 2000 clean steps in a row here)
        assert scales[-1] == 2.0**16 / 2 ** skipped.sum()


@pytest.mark.mpi
def test_64_true_is_float64_in_the_output(tmp_path):
    """--precision 64-true with --dtype left at its default: float64 weights, and "float64" in the recorded
    options, so a resume given as --dtype float64 matches."""
    p = _train(1, tmp_path / "o.h5", "--precision", "64-true", "--epochs", "1", "--hidden", "16",
               env={"HPCGPU_DATA_DIR": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "o.h5") as f:
        assert f["model/fc0.weight"].dtype == np.float64
        assert json.loads(f.attrs["config"])["dtype"] == "float64"
    assert "loss_scale" not in h5py.File(tmp_path / "o.h5")["metrics"]


INJECT = r"""
import sys
import numpy as np
from mpi4py import MPI
from hpcgpu.train import precision, reducer
from hpcgpu.train.__main__ import main

BAD = int(sys.argv[1])  # the global step (1-based) whose gradient overflows, on rank 1 only
seen, verdicts = [0], []
finish = reducer.GradientReducer.finish
def poisoned(self, what=""):
    seen[0] += 1
    if seen[0] == BAD and MPI.COMM_WORLD.rank == 1:
        self.grad[7] = np.inf
    finish(self, what)
reducer.GradientReducer.finish = poisoned
update = precision.LossScaler.update
def record(self, found_inf):
    verdicts.append(found_inf)
    update(self, found_inf)
precision.LossScaler.update = record
status = main(sys.argv[2:])
skipped = [i + 1 for i, v in enumerate(verdicts) if v]
sys.stdout.write(f"rank {MPI.COMM_WORLD.rank} skipped {skipped}\n")
sys.exit(status)
"""


@pytest.mark.device
@pytest.mark.mpi
def test_injected_overflow_skips_exactly_that_step_and_halves_the_scale(tmp_path):
    """One rank's gradient holds an inf at step 5: every rank skips step 5 on top of the steps a clean run
    skips on its own (a scale of 2**16 overflows float16 where |softmax - onehot| > 0.9995, as with PyTorch's
    GradScaler), the scale ends halved once more, and the run goes on."""
    from _data import blobs, write_h5

    X, y = blobs(240, d=6)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    opts = ["--data", data, "--epochs", "1", "--batch-size", "24", "--hidden", "8", "--lr", "0.01",
            "--precision", "16-mixed", "--progress", "none"]
    runs = {}
    for bad in (0, 5):
        p = _mpi.run(3, ["-c", INJECT, str(bad), *opts, "--out", str(tmp_path / f"o{bad}.h5")], timeout=120)
        assert p.returncode == 0, p.stderr
        lines = sorted(ln for ln in p.stdout.splitlines() if ln.startswith("rank"))
        assert len(lines) == 3 and len({ln.split(" ", 2)[2] for ln in lines}) == 1, p.stdout  # ranks agree
        with h5py.File(tmp_path / f"o{bad}.h5") as f:
            runs[bad] = (json.loads(lines[0].split("skipped ")[1]), f["metrics/skipped_steps"][()].tolist(),
                         f["metrics/loss_scale"][()].tolist())
    (clean, n_clean, scale_clean), (hit, n_hit, scale_hit) = runs[0], runs[5]
    assert 5 not in clean and sorted(set(hit) - set(clean)) == [5], (clean, hit)
    assert n_hit == [n_clean[0] + 1] and n_clean == [len(clean)]
    assert scale_hit == [scale_clean[0] / 2]
