import json
import os

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5
from mpi4py import MPI

import _mpi
import hpcgpu
from hpcgpu.train import TrainConfig, Trainer

METRICS = {"epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy", "lr", "seconds",
           "samples_per_second", "energy_joules", "energy_joules_cpu", "energy_joules_gpu", "gflop", "joules_per_gflop"}


@pytest.mark.device
def test_trainer_in_process_learns_and_saves(small_h5, tmp_path):
    out = str(tmp_path / "o" / "run.h5")
    rt = hpcgpu.init("cpu", comm=MPI.COMM_SELF)
    t = Trainer(TrainConfig(data=small_h5, out=out, epochs=4, batch_size=16, hidden=(16,), progress="none"), rt)
    h = t.fit()
    assert h["epoch"] == [1, 2, 3, 4]
    assert h["train_loss"][-1] < h["train_loss"][0]
    assert h["test_accuracy"][-1] > 0.9
    assert t.step == 4 * (240 // 16)
    t.save_results()
    with h5py.File(out) as f:
        assert set(f["metrics"]) == METRICS
        assert f["metrics/seconds"].attrs["units"] == "s"
        np.testing.assert_allclose(f["metrics/train_loss"][()], h["train_loss"])
        assert set(f["model"]) == {"fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"}
        assert f["model/fc0.weight"].shape == (6, 16) and f["model/fc1.weight"].shape == (16, 3)
        np.testing.assert_array_equal(f["model/fc1.bias"][()], dict(t.model.named_parameters())["fc1.bias"])
        assert json.loads(f.attrs["config"])["batch_size"] == 16
        assert f.attrs["world_size"] == 1 and f.attrs["device"] == "cpu"
    # While the trainer lives it holds its outputs (a lock file beside each); no temporary is left behind
    assert {p for p in os.listdir(tmp_path / "o") if not p.endswith(".lock")} == {"run.h5"}
    sums = t.model.evaluate_sums(t.model.xp.zeros((3, 6), t.model.dtype), t.model.xp.zeros(3, np.int64))
    assert sums.shape == (2,) and sums[0] > 0  # the loss sum of three rows of zeros, label 0
    t.close()  # lets go of its outputs: their lock files go too
    assert os.listdir(tmp_path / "o") == ["run.h5"]
    rt.free()


def test_no_test_split_gives_no_test_series(tmp_path):
    X, y = blobs(64)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    rt = hpcgpu.init("cpu", comm=MPI.COMM_SELF)
    t = Trainer(TrainConfig(data=data, out=str(tmp_path / "o.h5"), epochs=1, batch_size=8, progress="none"), rt)
    h = t.fit()
    assert "test_loss" not in h and "test_accuracy" not in h and np.isfinite(h["train_loss"][0])  # Keras's too
    assert np.isnan(t.evaluate()["accuracy"])  # no held-out set to evaluate
    with h5py.File(t.save_results()) as f:
        assert "test_loss" not in f["metrics"] and "train_loss" in f["metrics"]
    rt.free()


def test_empty_test_split_gives_no_test_series(tmp_path):
    """Found by the fuzz test: /test with 0 rows divided by zero."""
    X, y = blobs(64)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y, test__X=X[:0], test__y=y[:0])
    rt = hpcgpu.init("cpu", comm=MPI.COMM_SELF)
    t = Trainer(TrainConfig(data=data, out=str(tmp_path / "o.h5"), epochs=1, batch_size=8, progress="none"), rt)
    h = t.fit()
    assert "test_accuracy" not in h and np.isfinite(h["train_loss"][0])
    rt.free()


def _train_cli(nprocs, data, out, *extra, timeout=180):
    return _mpi.run(nprocs, ["-m", "hpcgpu.train", "--data", data, "--out", out, "--progress", "lines", *extra],
                    timeout=timeout)


@pytest.mark.device
@pytest.mark.mpi
def test_same_model_whatever_the_number_of_ranks(small_h5, tmp_path):
    """Same seed and global batch: the same parameters at 1, 3 and 4 ranks (B = 20: uneven at 3)."""
    params = {}
    for n in (1, 3, 4):
        out = str(tmp_path / f"p{n}.h5")
        p = _train_cli(n, small_h5, out, "--epochs", "3", "--batch-size", "20", "--hidden", "16,8",
                       "--dtype", "float64", "--lr", "0.1")
        assert p.returncode == 0, p.stderr
        with h5py.File(out) as f:
            params[n] = {k: f["model"][k][()] for k in f["model"]}
            assert f.attrs["world_size"] == n
    for n in (3, 4):
        for k, ref in params[1].items():
            np.testing.assert_allclose(params[n][k], ref, rtol=1e-11, atol=1e-12, err_msg=f"{k} at {n} ranks")


@pytest.mark.device
@pytest.mark.mpi
def test_gradient_accumulation_gives_the_same_model(small_h5, tmp_path):
    """--grad-accum-steps K: the same model as K = 1 up to summation order (float64, relative 1e-10), at 1, 2
    and 3 ranks, with micro-batches that split unevenly among the ranks (B = 20, K = 2 at 3 ranks: 4 + 3 + 3;
    K = 5 at 3 ranks: 2 + 1 + 1), and one reduction per step whatever K."""
    def train(n, k):
        out = str(tmp_path / f"p{n}k{k}.h5")
        p = _train_cli(n, small_h5, out, "--epochs", "2", "--batch-size", "20", "--hidden", "16,8",
                       "--dtype", "float64", "--lr", "0.1", "--grad-accum-steps", str(k))
        assert p.returncode == 0, p.stderr
        with h5py.File(out) as f:
            assert json.loads(f.attrs["config"])["grad_accum_steps"] == k
            return p.stdout, {k_: f["model"][k_][()] for k_ in f["model"]}, f["metrics/train_loss"][()]

    _, ref, ref_loss = train(1, 1)
    for n, k in ((1, 4), (2, 2), (3, 2), (3, 5)):
        stdout, got, loss = train(n, k)
        assert f"{k} micro-batches of {20 // k}" in stdout.splitlines()[0], stdout
        for name, want in ref.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-10, atol=1e-12, err_msg=f"{name}, {n} ranks, K={k}")
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)


@pytest.mark.device
@pytest.mark.mpi
def test_sharded_and_replicated_data_give_the_same_bits(small_h5, tmp_path):
    """--data-placement sharded (an Alltoallv each epoch) and replicated (every rank holds all, no exchange):
    the same batches, so the same bits; auto replicates a small set and says so."""
    models = {}
    for placement in ("sharded", "replicated", "auto"):
        out = str(tmp_path / f"{placement}.h5")
        p = _train_cli(3, small_h5, out, "--epochs", "2", "--batch-size", "20", "--hidden", "8",
                       "--data-placement", placement)
        assert p.returncode == 0, p.stderr
        want = "sharded" if placement == "sharded" else "replicated"
        assert p.stdout.splitlines()[0].endswith(f"data {want}"), p.stdout
        with h5py.File(out) as f:
            models[placement] = {k: f["model"][k][()] for k in f["model"]}
    for placement in ("replicated", "auto"):
        for k, want in models["sharded"].items():
            np.testing.assert_array_equal(models[placement][k], want, err_msg=f"{k} {placement}")


@pytest.mark.device
def test_accumulation_reduces_once_per_step(small_h5, monkeypatch):
    """K micro-batches, one gradient reduction: the reducer is called once a step, whatever K."""
    from hpcgpu.train.reducer import GradientReducer

    calls = []
    monkeypatch.setattr(GradientReducer, "finish", lambda self, what="": calls.append(what))
    rt = hpcgpu.init("cpu", comm=MPI.COMM_SELF)
    tr = Trainer(TrainConfig(data=small_h5, out="unused.h5", epochs=1, batch_size=24, grad_accum_steps=3,
                             hidden=(8,), progress="none"), rt)
    tr.fit()  # one epoch
    tr.close()
    assert len(calls) == tr.sampler.steps == 10 and calls[0] == "step 1"


@pytest.mark.mpi
def test_progress_bar_from_rank_0_only(small_h5, tmp_path):
    p = _mpi.run(3, ["-m", "hpcgpu.train", "--data", small_h5, "--out", str(tmp_path / "o.h5"), "--epochs", "2",
                     "--batch-size", "20", "--progress", "bar"], timeout=120)
    assert p.returncode == 0, p.stderr
    screen = p.stderr.replace("\r", "\n")
    assert screen.count("| 0/24 [") == 1  # one bar (2 epochs x 12 steps), started once: rank 0's
    assert "| 24/24 [" in screen and "step/s" in screen
    assert p.stdout.count("hpcgpu.train:") == 1 and p.stdout.count("epoch   2/2") == 1


@pytest.mark.mpi
def test_main_job_at_8_ranks_on_digits(tmp_path):
    """The README's main job: default options, bundled digits, 8 ranks on 2 cores."""
    out = tmp_path / "results" / "train.h5"
    p = _mpi.run(8, ["-m", "hpcgpu.train", "--out", str(out)], timeout=300, cwd=tmp_path,
                 env={"HPCGPU_DATA_DIR": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stderr
    epochs = [ln for ln in p.stdout.splitlines() if ln.startswith("epoch")]
    assert len(epochs) == TrainConfig().epochs  # one line per epoch, from rank 0 only
    with h5py.File(out) as f:
        assert set(f["metrics"]) == METRICS
        assert len(f["metrics/epoch"]) == TrainConfig().epochs
        assert f["metrics/test_accuracy"][-1] >= 0.95
        assert f.attrs["world_size"] == 8
        # the first line of the library's own version string (the ranks load the MPI this process loaded),
        # without Open MPI's NUL and the runs of blanks of MPICH's "MPICH Version:      5.0.2"
        first = MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0]
        assert f.attrs["mpi_library"] == " ".join(first.split()), f.attrs["mpi_library"]
        assert f.attrs["hpcgpu_version"] == hpcgpu.__version__
        cfg = json.loads(f.attrs["config"])
        assert cfg["hidden"] == [256, 256] and cfg["data"] is None
        assert f.attrs["data"] == str(tmp_path / "cache" / "digits.h5")
    with h5py.File(tmp_path / "cache" / "digits.h5") as d:
        assert d["train/X"].shape[1] == 64 and d.attrs["num_classes"] == 10


# -- bad input: exit 2, one line naming the culprit, no output, no hang -----------

def _bad(tmp_path, **ds):
    return write_h5(tmp_path / "bad.h5", **ds)


X, Y = blobs(40)
BAD_INPUTS = {
    "missing file": (lambda t: str(t / "nope.h5"), [], "nope.h5: no such file"),
    "not hdf5": (lambda t: (t / "x.h5").write_text("hello") and str(t / "x.h5"), [], "not a readable HDF5"),
    "no /train/X": (lambda t: _bad(t, train__y=Y), [], "no dataset /train/X"),
    "no /train/y": (lambda t: _bad(t, train__X=X), [], "no dataset /train/y"),
    "X not 2-D": (lambda t: _bad(t, train__X=X[:, 0], train__y=Y), [], "/train/X must be 2-D"),
    "X strings": (lambda t: _bad(t, train__X=np.array([[b"a"]] * 40), train__y=Y), [], "must be real numbers"),
    "lengths differ": (lambda t: _bad(t, train__X=X, train__y=Y[:-1]), [], "40 rows but /train/y has 39"),
    "fractional labels": (lambda t: _bad(t, train__X=X, train__y=Y + np.where(np.arange(40) == 7, 0.5, 0.0)),
                          ["--task", "classification"],
                          "not a whole number of int64's range: class labels must be integers"),
    "float labels of 2-D": (lambda t: _bad(t, train__X=X, train__y=np.stack([Y, Y], 1).astype(float)),
                            ["--task", "classification"], "integer label array for classification"),
    "label too big": (lambda t: _bad(t, train__X=X, train__y=np.where(np.arange(40) == 33, 3, Y), attr_num_classes=3),
                      [], "label 3 is outside 0..2"),
    "negative label": (lambda t: _bad(t, train__X=X, train__y=np.where(np.arange(40) == 5, -1, Y)), [],
                       "negative label"),
    "test label too big": (lambda t: _bad(t, train__X=X, train__y=Y, test__X=X[:4], test__y=np.array([0, 1, 2, 9]),
                                          attr_num_classes=3), [],
                           "the validation labels hold 9, outside the training set's classes 0..2"),
    "test label unseen in training": (lambda t: _bad(t, train__X=X, train__y=Y, test__X=X[:4],
                                                     test__y=np.array([0, 1, 2, 5])), [],
                                      "the validation labels hold 5, outside the training set's classes 0..2"),
    "NaN in X": (lambda t: _bad(t, train__X=np.where(np.arange(40)[:, None] == 29, np.nan, X), train__y=Y), [],
                 "/train/X row 29 holds NaN or infinity"),
    "inf in test X": (lambda t: _bad(t, train__X=X, train__y=Y, test__X=np.full((3, 6), np.inf), test__y=Y[:3]), [],
                      "/test/X row 0 holds NaN or infinity"),
    "test D differs": (lambda t: _bad(t, train__X=X, train__y=Y, test__X=X[:3, :2], test__y=Y[:3]), [],
                       "/test/X has 2 features"),
    "test X without y": (lambda t: _bad(t, train__X=X, train__y=Y, test__X=X), [], "no dataset /test/y"),
    "batch > N": (lambda t: _bad(t, train__X=X, train__y=Y), ["--batch-size", "41"], "--batch-size 41 is larger"),
    "batch < ranks": (lambda t: _bad(t, train__X=X, train__y=Y), ["--batch-size", "2"],
                      "smaller than the number of ranks"),
    "ranks > samples": (lambda t: _bad(t, train__X=X[:2], train__y=Y[:2]), ["--batch-size", "2"],
                        "fewer than the 3 ranks"),
    "out unwritable": (lambda t: _bad(t, train__X=X, train__y=Y), ["--out", "{tmp}/afile/out.h5"],
                       "afile is a file, not a directory"),
    "trace unwritable": (lambda t: _bad(t, train__X=X, train__y=Y), ["--trace", "{tmp}/afile/t.json"],
                         "error: --trace "),  # at start, not after the run (which it would cost)
    "bad lr": (lambda t: _bad(t, train__X=X, train__y=Y), ["--lr", "-1"], "--lr must be a positive number"),
    "bad hidden": (lambda t: _bad(t, train__X=X, train__y=Y), ["--hidden", "8,0"], "argument --hidden"),
    "bad gemm threads": (lambda t: _bad(t, train__X=X, train__y=Y), ["--gemm-threads", "some"],
                         "argument --gemm-threads"),
    "accumulation not a divisor": (lambda t: _bad(t, train__X=X, train__y=Y), ["--grad-accum-steps", "3"],
                                   "--grad-accum-steps must be a positive divisor of --batch-size 8, got 3"),
    "accumulation 0": (lambda t: _bad(t, train__X=X, train__y=Y), ["--grad-accum-steps", "0"],
                       "--grad-accum-steps must be a positive divisor"),
    "bad placement": (lambda t: _bad(t, train__X=X, train__y=Y), ["--data-placement", "everywhere"],
                      "argument --data-placement: invalid choice"),
    "bucket 0": (lambda t: _bad(t, train__X=X, train__y=Y), ["--bucket-mb", "0"], "--bucket-mb must be > 0, got 0.0"),
    "tensor not a divisor": (lambda t: _bad(t, train__X=X, train__y=Y), ["--tensor-parallel", "2"],
                             "--tensor-parallel 2 does not divide the 3 ranks"),
    "tensor > width": (lambda t: _bad(t, train__X=X, train__y=Y), ["--tensor-parallel", "3", "--hidden", "2"],
                       "--tensor-parallel 3 is larger than the smallest hidden width it splits (2)"),
    "zero stage 2": (lambda t: _bad(t, train__X=X, train__y=Y), ["--zero-stage", "2"],
                     "--zero-stage must be 0 or 1, got 2"),
    "unknown precision": (lambda t: _bad(t, train__X=X, train__y=Y), ["--precision", "8-mixed"],
                          "argument --precision: invalid choice"),
    "precision against dtype": (lambda t: _bad(t, train__X=X, train__y=Y),
                                ["--precision", "bf16-mixed", "--dtype", "float64"],
                                "--precision bf16-mixed keeps float32 weights, but --dtype is float64"),
    "micro-batch < ranks": (lambda t: _bad(t, train__X=X, train__y=Y), ["--grad-accum-steps", "4"],
                            "--grad-accum-steps 4: a micro-batch of 2 samples is smaller than the number of ranks (3)"),
}


@pytest.fixture(scope="session")
def bad_input_runs(tmp_path_factory):
    """Every row of :data:`BAD_INPUTS` at 3 ranks, in one launch (``_mpi.cli_rows``): ``{case: (result, out)}``."""
    rows, outs = {}, {}
    for case, (make, extra, _) in BAD_INPUTS.items():
        t = tmp_path_factory.mktemp("bad")
        (t / "afile").write_text("a file, not a directory")
        outs[case] = t / "out" / "train.h5"
        rows[case] = ["-m", "hpcgpu.train", "--data", make(t), "--out", outs[case], "--progress", "lines",
                      "--epochs", "1", "--batch-size", "8", *(e.replace("{tmp}", str(t)) for e in extra)]
    runs = _mpi.cli_rows(3, rows, timeout=180)
    return {case: (runs[case], outs[case]) for case in rows}


@pytest.mark.mpi
@pytest.mark.xdist_group("trainer-bad-input")  # one worker, one launch for the table
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(case, bad_input_runs):
    p, out = bad_input_runs[case]
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert BAD_INPUTS[case][2] in lines[0]
    assert lines[0].startswith(("hpcgpu.train: error:", "python -m hpcgpu.train: error:"))
    assert not p.others, p.others  # one line from rank 0, nothing from the others
    assert not out.exists()


@pytest.mark.mpi
def test_whole_number_float_labels_are_classes_when_the_user_says_so(tmp_path):
    """Labels stored as floats (a CSV's export) train as classes with --task classification; the model is the
    one integer labels give."""
    Xb, yb = blobs(60)
    outs = []
    for name, y in (("int", yb), ("float", yb.astype(np.float64))):
        data = write_h5(tmp_path / f"{name}.h5", train__X=Xb, train__y=y)
        out = tmp_path / f"{name}-out.h5"
        p = _train_cli(3, data, str(out), "--epochs", "1", "--batch-size", "12", "--task", "classification",
                       timeout=60)
        assert p.returncode == 0, p.stderr
        with h5py.File(out) as f:
            assert f.attrs["task"] == "classification"
            outs.append({k: f["model"][k][()] for k in f["model"]})
    for k in outs[0]:
        np.testing.assert_array_equal(outs[0][k], outs[1][k])


@pytest.mark.device
@pytest.mark.mpi
def test_a_regression_test_set_smaller_than_the_ranks_leaves_a_rank_an_empty_shard(tmp_path):
    """One test sample at 2 ranks: rank 1's shard is empty (reshape(0, -1) raised there; found by the fuzz test)."""
    X = np.array([[9.0], [6.0], [5.0], [1.0]], dtype=np.float32)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=np.array([0.0, 0.0, 1.0, 1.0], np.float32),
                    test__X=np.ones((1, 1), np.float32), test__y=np.ones(1, np.float32))
    p = _mpi.run(2, ["-m", "hpcgpu.train", "--data", data, "--out", str(tmp_path / "o.h5"), "--epochs", "1",
                     "--batch-size", "2", "--hidden", "4", "--progress", "none"], timeout=90)
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "o.h5") as f:
        assert np.isfinite(f["metrics/test_rmse"][()]).all()


def test_a_config_trainer_is_built_as_any_other_and_sized_by_its_first_fit(small_h5, tmp_path):
    """Trainer(config) reads no data at construction: the command line's MLP is sized at the first fit, by the
    config's file or the one fit is given (one construction path for every model)."""
    rt = hpcgpu.init("cpu", comm=MPI.COMM_SELF)
    missing = str(tmp_path / "not-yet.h5")
    t = Trainer(TrainConfig(data=missing, out=None, epochs=1, batch_size=16, hidden=(8,), progress="none"), rt)
    with pytest.raises(ValueError, match=r"from the first fit's data \(the command line's MLP"):
        _ = t.model
    with pytest.raises(ValueError, match="give no validation="):
        t.fit(validation=small_h5)
    with pytest.raises(TypeError, match="sized by an HDF5 file"):
        t.fit((np.zeros((4, 6)), np.zeros(4)))
    h = t.fit(small_h5)  # not the config's (missing) file: the one given
    assert h["epoch"] == [1] and t.model.n_inputs == 6 and t.data_path == small_h5
    t.close()
    # the first fit's epochs= is the run's total before the model is bound (the schedule spans it)
    t = Trainer(TrainConfig(data=small_h5, out=None, epochs=1, batch_size=16, hidden=(8,), progress="none",
                            schedule="constant"), rt)
    assert t.fit(epochs=2)["epoch"] == [1, 2] and t.config.epochs == 2 and t.schedule.total == 2 * t.sampler.steps
    t.close()
    rt.free()
