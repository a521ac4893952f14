"""Tensor parallelism, ZeRO-1 and checkpoints in the global layout."""

import json
import shutil

import h5py
import numpy as np
import pytest

import _mpi
from _data import blobs, write_h5
from hpcgpu.train.checkpoint import candidates, read_checkpoint
from hpcgpu.nn import MLP, layer_plan, local_layout

HIDDEN = "12,9"  # 12 splits evenly at T = 2, 3, 4; 9 only at 3
SIZES = [6, 12, 9, 4]

pytestmark = pytest.mark.device  # every test here reaches the device path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("tp")
    X, y = blobs(400, d=6, c=4)
    Xt, yt = blobs(61, d=6, c=4, seed=1)
    return str(write_h5(d / "d.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt))


def _train(n, data, out, *extra, timeout=180):
    p = _mpi.run(n, ["-m", "hpcgpu.train", "--data", data, "--out", str(out), "--progress", "lines",
                     "--dtype", "float64", "--hidden", HIDDEN, "--epochs", "2", "--lr", "0.1", *map(str, extra)],
                 timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    with h5py.File(out) as f:
        return p.stdout, {k: f["model"][k][()] for k in f["model"]}, dict(f["comm"].attrs)


def test_split_initialization_is_the_unsplit_models():
    """Each tensor rank draws only its slice (counter-based), and the slices make the unsplit model."""
    full = MLP(SIZES, dtype="float64", seed=7)
    for T in (2, 3, 4):
        parts = [MLP(SIZES, dtype="float64", seed=7, tensor=(T, t), tensor_allreduce=lambda b: None)
                 for t in range(T)]
        np.testing.assert_array_equal(parts[0].global_of([p.params for p in parts]), full.params)
        for p in parts:
            np.testing.assert_array_equal(p.local_of(full.params), p.params)
    kinds = [lay["kind"] for lay in layer_plan(SIZES, 3, 1)]
    assert kinds == ["col", "row", "full"]  # the classifier of an odd number of layers: whole on every rank
    assert [lay["kind"] for lay in layer_plan([6, 12, 9, 5, 4], 2, 0)] == ["col", "row", "col", "row"]
    assert layer_plan(SIZES, 4, 3)[1]["rows"] == (9, 12) and layer_plan(SIZES, 3, 2)[0]["cols"] == (8, 12)


GRIDS = _mpi.cases(((1, 1), (4, 1), (1, 2), (2, 2), (1, 4), (3, 1), (1, 3), (3, 2)),
                   ((1, 1), (1, 3), (3, 2)))
"""(D, T) of test_same_model_at_every_data_x_tensor_grid: P = D x T ranks; 2 x 2 and 3 x 2 both at once,
without ZeRO (the data groups' Allreduce of the tensor ranks' slices). Under LEAN: the reference, tensor
parallel alone over an odd group, and both at once."""


@pytest.mark.mpi
@pytest.mark.parametrize("batch", _mpi.cases([96, 100], [100]))
def test_same_model_at_every_data_x_tensor_grid(data, batch, tmp_path):
    """float64, one seed and global batch, no ZeRO: the same losses and final parameters at (D, T) = (1, 1),
    (4, 1), (1, 2), (2, 2), (1, 4), (3, 1), (1, 3), (3, 2) to relative 1e-10, hidden widths 12 and 9 (9 does
    not divide by 2 or 4), B = 100 uneven (over 3 data ranks too)."""
    models, losses = {}, {}
    for D, T in GRIDS:
        out = tmp_path / f"{D}x{T}.h5"
        stdout, models[(D, T)], comm = _train(D * T, data, out, "--batch-size", batch, "--tensor-parallel", T,
                                              "--epochs", 2)
        assert (comm["data_parallel"], comm["tensor_parallel"]) == (D, T)
        if T > 1:
            assert f"{D} data x {T} tensor parallel" in stdout.splitlines()[0]
        with h5py.File(out) as f:
            losses[(D, T)] = {k: f["metrics"][k][()] for k in ("train_loss", "test_loss", "test_accuracy")}
            assert json.loads(f.attrs["config"])["zero_stage"] == 0
    ref, ref_losses = models[(1, 1)], losses[(1, 1)]
    assert set(ref) == {"fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert ref["fc0.weight"].shape == (6, 12)  # the unsplit model, whatever wrote it
    assert all(v.shape == (2,) and np.isfinite(v).all() for v in ref_losses.values()), ref_losses  # 2 epochs
    assert ref_losses["train_loss"][1] < ref_losses["train_loss"][0], ref_losses  # it learned something
    for grid, got in models.items():
        assert set(got) == set(ref), (grid, sorted(got))
        for k, want in ref.items():
            np.testing.assert_allclose(got[k], want, rtol=1e-10, atol=1e-13, err_msg=f"{k} at {grid}")
        for k, want in ref_losses.items():
            np.testing.assert_allclose(losses[grid][k], want, rtol=1e-10, atol=1e-13, err_msg=f"{k} at {grid}")


@pytest.mark.mpi
@pytest.mark.parametrize("P", [2, 3])
def test_zero_1_is_stage_0_with_a_share_of_the_momentum(data, P, tmp_path):
    """ZeRO-1 at D = 2 and 3 (and at 2 x 2 with tensor parallelism): the model of stage 0, the momentum held
    1/D a rank (the flat gradient padded to D equal blocks)."""
    _, stage0, c0 = _train(P, data, tmp_path / "z0.h5", "--batch-size", 96)
    _, stage1, c1 = _train(P, data, tmp_path / "z1.h5", "--batch-size", 96, "--zero-stage", 1)
    for k, want in stage0.items():
        np.testing.assert_allclose(stage1[k], want, rtol=1e-10, atol=1e-13, err_msg=k)
    n = sum(a * b + b for a, b in zip(SIZES, SIZES[1:], strict=False))
    assert c0["optimizer_state_bytes"] == 8 * n
    assert c1["optimizer_state_bytes"] == 8 * -(-n // P)
    if P == 2:
        _, tp, _ = _train(4, data, tmp_path / "z2.h5", "--batch-size", 96, "--zero-stage", 1, "--tensor-parallel", 2)
        for k, want in stage0.items():
            np.testing.assert_allclose(tp[k], want, rtol=1e-10, atol=1e-13, err_msg=k)


@pytest.mark.mpi
def test_checkpoint_written_at_2x2_resumes_at_other_grids(data, tmp_path):
    """A checkpoint written at (D, T) = (2, 2) with ZeRO-1 holds the unsplit model; resumed at (2, 2) it is
    bitwise the uninterrupted run, at (4, 1) and (1, 1) the same to 1e-10."""
    opts = ("--batch-size", 100, "--tensor-parallel", 2, "--zero-stage", 1)
    ck = tmp_path / "run" / "ck.h5"
    _, ref, _ = _train(4, data, tmp_path / "full.h5", *opts, "--checkpoint", ck, "--checkpoint-every", 5,
                       "--keep-checkpoints", 10)
    n = sum(a * b + b for a, b in zip(SIZES, SIZES[1:], strict=False))
    mid = {read_checkpoint(f, n).step: f for f in candidates(str(ck))}[5]
    for P, T, Z, exact in ((4, 2, 1, True), (4, 1, 0, False), (1, 1, 0, False)):
        d = tmp_path / f"r{P}{T}{Z}"
        d.mkdir()
        shutil.copy(mid, d / "ck.h5")
        _, got, _ = _train(P, data, d / "o.h5", "--batch-size", 100, "--tensor-parallel", T, "--zero-stage", Z,
                           "--checkpoint", d / "ck.h5", "--resume")
        for k, want in ref.items():
            if exact:
                np.testing.assert_array_equal(got[k], want, err_msg=f"{k} at {P}/{T}")
            else:
                np.testing.assert_allclose(got[k], want, rtol=1e-10, atol=1e-13, err_msg=f"{k} at {P}/{T}")


@pytest.mark.mpi
def test_bytes_per_step_are_the_analytic_count(data, tmp_path):
    """Per step and rank: tensor group, the row-parallel layer's output (local batch x 9 float64) forward and
    no input gradient for the first layer; data group, the rank's gradient slice and 3 slots (stage 0), or the
    padded gradient, the slots and the padded parameters (ZeRO-1)."""
    B = 96
    _, _, c = _train(4, data, tmp_path / "a.h5", "--batch-size", B, "--tensor-parallel", 2)
    local_batch = B // 2
    assert c["tensor_bytes_per_step"] == 8 * local_batch * 9
    rank0 = local_layout(SIZES, 2, 0)[1]  # the whole parameters, this rank's slices, padding to the longest
    assert rank0 == (9 * 4 + 4) + 9 + (6 * 6 + 6 + 6 * 9)
    assert c["data_bytes_per_step"] == 8 * (rank0 + 3)
    _, _, z = _train(4, data, tmp_path / "b.h5", "--batch-size", B, "--tensor-parallel", 2, "--zero-stage", 1)
    padded = -(-rank0 // 2) * 2
    assert z["data_bytes_per_step"] == 8 * (padded + 3) + 8 * padded
    deep = [6, 12, 9, 5, 4]  # two pairs: forward outputs of layers 1 and 3, backward input gradient of layer 2
    _, _, d = _train(2, data, tmp_path / "c.h5", "--batch-size", B, "--tensor-parallel", 2, "--hidden", "12,9,5",
                     "--grad-accum-steps", 2)
    assert d["tensor_bytes_per_step"] == 2 * 8 * (B // 2) * (9 + 4 + 9), deep


@pytest.mark.mpi
def test_stop_request_reaches_every_rank_of_the_grid(data, tmp_path):
    """A stop file seen by rank 0 alone, at 2 x 2 with ZeRO-1: the data groups' reduction carries it to rank 2,
    the tensor groups' agreement to ranks 1 and 3; all stop after step 1 (exit 3, one checkpoint), and the
    resumed run is bitwise the uninterrupted one."""
    opts = ("--batch-size", 100, "--tensor-parallel", 2, "--zero-stage", 1)
    _, ref, _ = _train(4, data, tmp_path / "full.h5", *opts)
    stop = tmp_path / "STOP"
    stop.write_text("")
    ck = tmp_path / "ck.h5"
    p = _mpi.run(4, ["-m", "hpcgpu.train", "--data", data, "--out", str(tmp_path / "part.h5"), "--progress", "none",
                     "--dtype", "float64", "--hidden", HIDDEN, "--epochs", "2", "--lr", "0.1", *map(str, opts),
                     "--checkpoint", str(ck), "--stop-file", str(stop)], timeout=120)
    assert p.returncode == 3, p.stdout + p.stderr
    n = sum(a * b + b for a, b in zip(SIZES, SIZES[1:], strict=False))
    assert read_checkpoint(str(ck), n).step == 1
    stop.unlink()
    _, got, _ = _train(4, data, tmp_path / "part.h5", *opts, "--checkpoint", ck, "--resume")
    for k, want in ref.items():
        np.testing.assert_array_equal(got[k], want, err_msg=k)


@pytest.mark.mpi
def test_uneven_splits_keep_the_whole_parameters_alike_and_resume_bitwise(data, tmp_path):
    """3 x 2 with ZeRO-1 and widths 13 and 9 (13 splits 7 + 6): every tensor rank's buffer has the same length
    with the whole parameters (the row-parallel bias, the classifier) at the same offsets, so the data groups
    sum them alike; a resume at the same grid is bitwise."""
    assert local_layout([6, 13, 9, 4], 2, 0)[1] == local_layout([6, 13, 9, 4], 2, 1)[1]
    assert local_layout([6, 13, 9, 4], 2, 0)[0][:3] == local_layout([6, 13, 9, 4], 2, 1)[0][:3]
    opts = ("--batch-size", 96, "--tensor-parallel", 2, "--zero-stage", 1, "--hidden", "13,9")
    ck = tmp_path / "run" / "ck.h5"
    _, ref, _ = _train(6, data, tmp_path / "full.h5", *opts, "--checkpoint", ck, "--checkpoint-every", 5,
                       "--keep-checkpoints", 10)
    n = sum(a * b + b for a, b in zip([6, 13, 9, 4], [13, 9, 4], strict=False))
    mid = {read_checkpoint(f, n).step: f for f in candidates(str(ck))}[5]
    d = tmp_path / "resume"
    d.mkdir()
    shutil.copy(mid, d / "ck.h5")
    _, got, _ = _train(6, data, d / "o.h5", *opts, "--checkpoint", d / "ck.h5", "--resume")
    for k, want in ref.items():
        np.testing.assert_array_equal(got[k], want, err_msg=k)
