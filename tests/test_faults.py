"""Faults: a failing, killed or stuck rank ends the job fast; resumes are exact; files are never half-written."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi
from hpcgpu.train.checkpoint import CheckpointState, _attrs_digest, candidates, read_checkpoint, write_checkpoint

pytestmark = pytest.mark.mpi

N_PARAMS = 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3  # the MLP [6, 16, 8, 3] of these tests


def _data(tmp_path, n=240, d=6, name="d.h5"):
    X, y = blobs(n, d=d)
    Xt, yt = blobs(61, d=d, seed=1)
    return write_h5(tmp_path / name, train__X=X, train__y=y, test__X=Xt, test__y=yt)


def _train(n, data, out, *extra, timeout=180, env=None):
    return _mpi.run(n, ["-m", "hpcgpu.train", "--data", data, "--out", str(out), "--progress", "none",
                        "--dtype", "float64", "--hidden", "16,8", *map(str, extra)], timeout=timeout, env=env)


def _popen_train(n, data, out, *extra):
    cmd = [_mpi.mpiexec(), "-n", str(n), sys.executable, "-m", "hpcgpu.train", "--data", data, "--out", str(out),
           "--progress", "lines", *map(str, extra)]
    env = _mpi.environment()
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _rank_pid(data, rank):
    """PID of the trainer process of ``rank`` (PMI_RANK, OMPI_COMM_WORLD_RANK, ...) among those reading ``data``."""
    pid = _mpi.trainer_ranks(data).get(rank)
    if pid is None:
        raise AssertionError(f"no trainer process of rank {rank}")
    return pid


def _wait_for_epoch(p):
    for line in p.stdout:
        if line.startswith("epoch"):
            return
    raise AssertionError(f"training never started: {p.stderr.read()}")


def _finish(p, timeout):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the job was still running after {timeout} s\n{err}")
    return p.returncode, err


# -- one rank fails, is killed, or hangs ---------------------------------------------

def test_exception_on_one_rank_ends_the_job():
    """The launch's timeout is the hang's guard (no time is asserted: the machine may be loaded)."""
    p = _mpi.run(3, [os.path.join(_mpi.SCRIPTS, "raise_on_one_rank.py")], timeout=60)
    assert p.returncode != 0
    assert p.stderr.count("[rank 1] error: RuntimeError: injected failure on rank 1") == 1, p.stderr


def test_read_error_on_one_rank_is_agreed(tmp_path):
    """A corrupt chunk that only rank 2 reads: every rank stops with one line naming rank 2."""
    X, y = blobs(60)
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("train/X", data=X, chunks=(10, 6), compression="gzip")
        f.create_dataset("train/y", data=y)
        info = f["train/X"].id.get_chunk_info(5)  # rows 50..59: rank 2's shard at 3 ranks
    with open(path, "r+b") as f:
        f.seek(info.byte_offset)
        f.write(b"\xff" * info.size)
    p = _train(3, str(path), tmp_path / "o.h5", "--batch-size", "6", timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 2 cannot read /train rows 40:60" in lines[0], p.stderr
    assert not (tmp_path / "o.h5").exists()


def test_sigkill_of_one_rank_ends_the_job(tmp_path):
    """The others do not wait for the killed rank: the job ends (a 1000-epoch run that a hang would keep going;
    _finish's timeout is the guard, no time is asserted)."""
    data = _data(tmp_path, n=4096, d=64)
    p = _popen_train(3, data, tmp_path / "o.h5", "--epochs", "1000", "--batch-size", "32")
    try:
        _wait_for_epoch(p)
        os.kill(_rank_pid(data, 1), signal.SIGKILL)
        rc, err = _finish(p, 60)
    finally:
        p.kill()
    assert rc != 0, err
    assert not (tmp_path / "o.h5").exists()


def test_stall_watchdog_names_the_stuck_rank(tmp_path):
    """Rank 2 is stopped (SIGSTOP: a rank hung in I/O); rank 0 reports it and the job aborts."""
    data = _data(tmp_path, n=4096, d=64)
    p = _popen_train(3, data, tmp_path / "o.h5", "--epochs", "1000", "--batch-size", "32", "--stall-timeout", "3")
    pid = None
    try:
        _wait_for_epoch(p)
        pid = _rank_pid(data, 2)
        os.kill(pid, signal.SIGSTOP)
        rc, err = _finish(p, 60)  # the guard: no time is asserted, the watchdog's line says who ended the job
    finally:
        p.kill()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert rc != 0, err
    assert "hpcgpu: stall: " in err and "ranks [2] have not arrived" in err, err


def test_a_rank_waiting_in_another_collective_has_arrived_and_is_named_there():
    """Rank 0's verdict from the ranks' reports (Watchdog._judge): with rank 2 stopped between two barriers, rank 1
    may already wait in the next step's reduction while rank 0 still waits in this one (a barrier lets a rank leave
    once it has heard from every rank: seen under load in CI's system-MPI pass, where the line named ranks [1, 2]).
    The rank that has not arrived is the one waiting nowhere; the other is named where it waits."""
    from hpcgpu.watchdog import Watchdog

    class Quiet:  # no report in flight
        def Iprobe(self, **kw):
            return False

    wd = Watchdog(None, 3.0)
    wd.size, wd.comm = 3, Quiet()
    now = 100.0
    mine = (282, "gradient Allreduce", "step 139", now - 3.1)
    waiting = {1: (284, "gradient Allreduce", "step 140", now - 3.0)}
    assert wd._judge(dict(waiting), mine, now) == (
        "hpcgpu: stall: gradient Allreduce (step 139) has waited 3 s (stall timeout 3 s); ranks [2] have not "
        "arrived, ranks [0] are waiting, rank 1 is waiting in gradient Allreduce (step 140); aborting the job")
    waiting[1] = (282, "gradient Allreduce", "step 139", now - 3.0)  # the usual case: the same collective
    assert wd._judge(dict(waiting), mine, now) == (
        "hpcgpu: stall: gradient Allreduce (step 139) has waited 3 s (stall timeout 3 s); ranks [2] have not "
        "arrived, ranks [0, 1] are waiting; aborting the job")
    assert wd._judge({}, (282, "gradient Allreduce", "step 139", now - 1.0), now) is None  # not yet T


@pytest.mark.parametrize("nprocs", [2, 3])
def test_stall_watchdog_library(nprocs):
    p = _mpi.run(nprocs, [os.path.join(_mpi.SCRIPTS, "stall.py"), "1.5"], timeout=60)
    assert p.returncode != 0
    assert f"ranks [{nprocs - 1}] have not arrived" in p.stderr, p.stderr


def test_stall_timeout_option_is_checked(tmp_path):
    p = _train(2, _data(tmp_path), tmp_path / "o.h5", "--stall-timeout", "-1", timeout=60)
    assert p.returncode == 2 and "--stall-timeout must be >= 0" in p.stderr
    p = _train(2, _data(tmp_path), tmp_path / "o.h5", env={"HPCGPU_STALL_TIMEOUT": "soon"}, timeout=60)
    assert p.returncode == 2 and "HPCGPU_STALL_TIMEOUT" in p.stderr and len(p.stderr.strip().splitlines()) == 1


# -- exact resume ------------------------------------------------------------------------

def _params(path):
    with h5py.File(path) as f:
        return {k: f["model"][k][()] for k in f["model"]}, f["metrics/train_loss"][()]


@pytest.mark.device
def test_resume_is_exact_at_the_same_ranks_and_close_at_others(tmp_path):
    """Checkpoints from a 4-rank run; resumed mid-epoch at 4 ranks: bitwise; at 2 ranks: up to summation order."""
    data = _data(tmp_path)
    opts = ("--epochs", "3", "--batch-size", "20", "--lr", "0.1")  # 12 steps per epoch
    ck = tmp_path / "run" / "ck.h5"
    p = _train(4, data, tmp_path / "full.h5", *opts, "--checkpoint", ck, "--checkpoint-every", "5",
               "--keep-checkpoints", "50")
    assert p.returncode == 0, p.stderr
    files = candidates(str(ck))
    assert len(files) == 8  # steps 5, 10, ..., 35 and the final 36
    mid = {read_checkpoint(f, N_PARAMS).step: f for f in files}[15]
    ref, ref_loss = _params(tmp_path / "full.h5")
    for n, exact in ((4, True), (2, False)):
        d = tmp_path / f"resume{n}"
        d.mkdir()
        shutil.copy(mid, d / "ck.h5")
        p = _train(n, data, d / "out.h5", *opts, "--checkpoint", d / "ck.h5", "--resume")
        assert p.returncode == 0, p.stderr
        got, loss = _params(d / "out.h5")
        with h5py.File(d / "out.h5") as f:
            assert f.attrs["resumed_from"] == str(d / "ck.h5")
        for k in ref:
            if exact:
                np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
            else:
                np.testing.assert_allclose(got[k], ref[k], rtol=1e-10, atol=1e-12, err_msg=k)
        if exact:
            np.testing.assert_array_equal(loss, ref_loss)
        else:
            np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)


@pytest.mark.device
def test_resume_with_gradient_accumulation_is_exact(tmp_path):
    """K = 2 micro-batches at 3 ranks (10 a micro-batch: 4 + 3 + 3), resumed mid-epoch from a checkpoint:
    bitwise the uninterrupted run."""
    data = _data(tmp_path)
    opts = ("--epochs", "2", "--batch-size", "20", "--lr", "0.1", "--grad-accum-steps", "2")
    ck = tmp_path / "run" / "ck.h5"
    p = _train(3, data, tmp_path / "full.h5", *opts, "--checkpoint", ck, "--checkpoint-every", "7",
               "--keep-checkpoints", "10")
    assert p.returncode == 0, p.stderr
    mid = {read_checkpoint(f, N_PARAMS).step: f for f in candidates(str(ck))}[7]
    d = tmp_path / "resume"
    d.mkdir()
    shutil.copy(mid, d / "ck.h5")
    p = _train(3, data, d / "out.h5", *opts, "--checkpoint", d / "ck.h5", "--resume")
    assert p.returncode == 0, p.stderr
    (ref, ref_loss), (got, loss) = _params(tmp_path / "full.h5"), _params(d / "out.h5")
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
    np.testing.assert_array_equal(loss, ref_loss)


def test_resume_from_a_malformed_checkpoint_is_one_line_at_every_rank(tmp_path):
    """A readable checkpoint whose epoch sums have the wrong shape: rank 0 finds out alone, but every rank
    exits 2 with the same line (no rank left waiting for the broadcast of the state)."""
    data = _data(tmp_path)
    ck = tmp_path / "ck.h5"
    opts = ("--epochs", "2", "--batch-size", "20", "--checkpoint", ck)
    assert _train(3, data, tmp_path / "a.h5", *opts, "--checkpoint-every", "5").returncode == 0
    with h5py.File(ck, "a") as f:  # as a writer's bug would make it: well-formed checksums, a wrong shape
        state = json.loads(f.attrs["state"])
        state["progress"]["epoch_totals"] = [0.0, 0.0, 0.0]
        f.attrs["state"] = json.dumps(state)
        f.attrs["attrs_sha256"] = _attrs_digest(f.attrs)
    p = _train(3, data, tmp_path / "b.h5", *opts, "--resume", timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--resume: {ck}:" in lines[0], p.stderr
    assert not (tmp_path / "b.h5").exists()


def test_resume_refuses_changed_options(tmp_path):
    data = _data(tmp_path)
    ck = tmp_path / "ck.h5"
    assert _train(2, data, tmp_path / "a.h5", "--epochs", "1", "--batch-size", "20", "--checkpoint", ck).returncode == 0
    p = _train(2, data, tmp_path / "b.h5", "--epochs", "1", "--batch-size", "40", "--checkpoint", ck, "--resume")
    assert p.returncode == 2
    assert "was written with --batch-size 20, this run has 40" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    # another model: the checkpoint is good, the option changed (not "no readable checkpoint")
    p = _train(2, data, tmp_path / "b.h5", "--epochs", "1", "--batch-size", "20", "--hidden", "8",
               "--checkpoint", ck, "--resume")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "was written with --hidden [" in p.stderr and "this run has [8]" in p.stderr, p.stderr
    assert not (tmp_path / "b.h5").exists()


def test_resuming_a_finished_run_trains_nothing_and_keeps_its_checkpoint(tmp_path):
    data = _data(tmp_path)
    ck = tmp_path / "ck.h5"
    opts = ("--epochs", "1", "--batch-size", "20", "--checkpoint", ck)
    assert _train(2, data, tmp_path / "a.h5", *opts).returncode == 0
    before = ck.stat().st_mtime_ns
    p = _mpi.run(2, ["-m", "hpcgpu.train", "--data", data, "--out", str(tmp_path / "b.h5"), "--progress", "lines",
                     "--dtype", "float64", "--hidden", "16,8", *map(str, opts), "--resume"], timeout=180)
    assert p.returncode == 0, p.stderr
    assert "the run is complete (1 epochs" in p.stdout and "epoch 2" not in p.stdout, p.stdout
    assert ck.stat().st_mtime_ns == before and not (tmp_path / "ck.h5.1").exists()  # not rewritten, not rotated
    with h5py.File(tmp_path / "a.h5") as a, h5py.File(tmp_path / "b.h5") as b:
        for k in a["model"]:
            np.testing.assert_array_equal(a["model"][k][...], b["model"][k][...])


def test_resume_without_checkpoint_starts_from_scratch(tmp_path):
    data = _data(tmp_path)
    p = _mpi.run(2, ["-m", "hpcgpu.train", "--data", data, "--out", str(tmp_path / "o.h5"), "--epochs", "1",
                     "--resume"], timeout=60)
    assert p.returncode == 0, p.stderr
    assert "no checkpoint at" in p.stdout and (tmp_path / "o.ckpt.h5").exists()


# -- checkpoint files ----------------------------------------------------------------------

def _parts(v):
    return {"progress": dict(epoch=v, step=v, step_in_epoch=0, epoch_totals=[0.0, 0.0], epoch_seconds=0.0,
                             history={"epoch": [1.0]}), "precision": {}, "buffers": {}, "gemm_threads": ""}


def _state(v, n=10):
    return CheckpointState(params=np.full(n, float(v)), optimizer={"velocity": np.zeros(n)}, parts=_parts(v))


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_the_newest_k_checkpoints_are_kept(tmp_path, keep):
    path = str(tmp_path / "c.h5")
    for v in range(5):
        write_checkpoint(path, _state(v), keep=keep)
    files = candidates(path)
    assert files == [path] + [f"{path}.{i}" for i in range(1, keep)]
    assert [read_checkpoint(f, 10).step for f in files] == [4, 3, 2][:keep]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_a_killed_writer_leaves_the_previous_checkpoint(tmp_path):
    path = str(tmp_path / "c.h5")
    write_checkpoint(path, _state(1), keep=1)
    code = ("import numpy as np, sys; from hpcgpu.train.checkpoint import write_checkpoint, CheckpointState\n"
            "n = 50_000_000\n"
            f"s = CheckpointState(np.ones(n), {{'velocity': np.ones(n)}}, {_parts(9)!r})\n"
            "print('writing', flush=True)\n"
            f"write_checkpoint({path!r}, s, keep=1)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=_mpi.ROOT))
    assert p.stdout.readline().strip() == "writing"
    deadline = time.time() + 30
    while not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]:
        assert time.time() < deadline and p.poll() is None, "the writer never started its temporary file"
        time.sleep(0.005)
    time.sleep(0.05)
    p.kill()
    p.wait()
    assert read_checkpoint(path, 10).step == 1  # the previous one, whole
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]  # the killed writer's leftover
    write_checkpoint(path, _state(2), keep=1)
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]  # cleaned by the next writer
    assert read_checkpoint(path, 10).step == 2


def test_corrupt_checkpoint_falls_back_then_fails_clearly(tmp_path):
    data = _data(tmp_path)
    ck = tmp_path / "ck.h5"
    opts = ("--epochs", "2", "--batch-size", "20")
    assert _train(2, data, tmp_path / "a.h5", *opts, "--checkpoint", ck, "--checkpoint-every", "4").returncode == 0
    older = read_checkpoint(f"{ck}.1", N_PARAMS).step
    with open(ck, "r+b") as f:  # truncate the newest
        f.truncate(1000)
    p = _train(2, data, tmp_path / "b.h5", *opts, "--checkpoint", ck, "--resume", "--epochs", "2")
    assert p.returncode == 0, p.stderr
    assert f"checkpoint {ck}: unreadable" in p.stderr and "falling back" in p.stderr
    with h5py.File(tmp_path / "b.h5") as f:
        assert f.attrs["resumed_from"] == f"{ck}.1"
    assert older < 24
    for f in candidates(str(ck)):
        with open(f, "wb") as fh:
            fh.write(b"garbage")
    p = _train(2, data, tmp_path / "c.h5", *opts, "--checkpoint", ck, "--resume")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no readable checkpoint" in lines[0] and str(ck) in lines[0]
    assert not (tmp_path / "c.h5").exists()


@pytest.mark.device
def test_divergence_stops_with_epoch_and_step_and_keeps_the_good_checkpoint(tmp_path):
    """lr = 1e200: step 1 leaves huge but finite parameters (checkpointed), step 2's loss is NaN."""
    data = _data(tmp_path)
    ck = tmp_path / "ck.h5"
    p = _train(2, data, tmp_path / "o.h5", "--epochs", "3", "--batch-size", "20", "--lr", "1e200",
               "--checkpoint", ck, "--checkpoint-every", "1", "--warmup-epochs", "0")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines == ["hpcgpu.train: error: training diverged: the loss of step 2 (epoch 1) is nan; "
                     "the last checkpoint is kept; start again with a smaller --lr "
                     "(a resume keeps the checkpoint's --lr)"], p.stderr
    assert not (tmp_path / "o.h5").exists()
    good = read_checkpoint(str(ck), N_PARAMS)
    assert good.step == 1 and np.isfinite(good.params).all()


# -- damaged checkpoints, other data, the rotation ---------------------------------------

def _model(path):
    with h5py.File(path) as f:
        return {k: f["model"][k][()] for k in f["model"]}


@pytest.mark.parametrize("garbage", ["finite", "nan"])
def test_a_damaged_checkpoint_is_refused_by_its_checksum_and_the_older_one_resumes(tmp_path, garbage):
    """400 bytes written into the newest checkpoint's parameters, as a failing disk or a stray write would:
    the checksum refuses it (finite garbage would otherwise resume silently, NaN would read as divergence), the
    run resumes from the one before and ends exactly where the uninterrupted run ended."""
    data = _data(tmp_path)
    ck = tmp_path / "ck.h5"
    opts = ("--epochs", "2", "--batch-size", "20", "--checkpoint", ck)
    assert _train(2, data, tmp_path / "a.h5", *opts, "--checkpoint-every", "5").returncode == 0
    with h5py.File(ck) as f:
        offset = f["params"].id.get_offset()
    bad = np.full(50, 1.25) if garbage == "finite" else np.full(50, np.nan)
    with open(ck, "r+b") as f:
        f.seek(offset + 64)
        f.write(bad.tobytes())
    p = _train(2, data, tmp_path / "b.h5", *opts, "--resume")
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"hpcgpu.train: warning: checkpoint {ck}: params fails its checksum (changed or damaged since it was "
        "written); falling back to an older checkpoint"], p.stderr
    with h5py.File(tmp_path / "b.h5") as f:
        assert f.attrs["resumed_from"] == f"{ck}.1"
    a, b = _model(tmp_path / "a.h5"), _model(tmp_path / "b.h5")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_resume_on_other_data_is_refused_with_what_differs(tmp_path):
    data = _data(tmp_path)
    ck = tmp_path / "ck.h5"
    opts = ("--epochs", "2", "--batch-size", "20", "--checkpoint", ck, "--checkpoint-every", "5")
    assert _train(2, data, tmp_path / "a.h5", *opts).returncode == 0
    X, y = blobs(240, d=6, seed=7)  # the same shape and classes, other samples
    other = write_h5(tmp_path / "other.h5", train__X=X, train__y=y, test__X=X[:61], test__y=y[:61])
    p = _train(3, other, tmp_path / "b.h5", *opts, "--resume")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--resume: {ck} was trained on other data (/train fingerprint" in lines[0], p.stderr
    assert f"--data {other} has" in lines[0]
    wide = _data(tmp_path, d=7, name="wide.h5")
    p = _train(2, wide, tmp_path / "c.h5", *opts, "--resume")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines == [f"hpcgpu.train: error: --resume: {ck} was trained on data with 6 features, --data {wide} has 7: "
                     "resume with the data it was trained on, or start afresh"], p.stderr
    # the same data at another number of ranks: the fingerprint does not depend on the sharding
    assert _train(3, data, tmp_path / "e.h5", *opts, "--resume").returncode == 0


def test_the_newest_checkpoint_is_complete_at_every_moment_of_a_rotation(tmp_path, monkeypatch):
    """A writer killed between the rotation and the rename of the new file (here: the rename fails) leaves
    PATH naming the previous checkpoint, whole, and PATH.1 the same."""
    import hpcgpu.io

    path = str(tmp_path / "c.h5")
    write_checkpoint(path, _state(1), keep=3)
    write_checkpoint(path, _state(2), keep=3)

    def killed(tmp, dest):
        raise KeyboardInterrupt("killed before the rename")

    monkeypatch.setattr(hpcgpu.io, "publish", killed)
    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(path, _state(3), keep=3)
    assert [read_checkpoint(f, 10).step for f in candidates(path)] == [2, 2, 1]
    monkeypatch.undo()
    write_checkpoint(path, _state(4), keep=3)
    assert [read_checkpoint(f, 10).step for f in candidates(path)] == [4, 2, 2]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
