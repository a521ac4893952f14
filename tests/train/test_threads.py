"""The GEMM thread plan: each GEMM of the step on the rank's BLAS threads or on one, as timed; a resume reuses it."""

import json
import shutil

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5
from mpi4py import MPI

import _mpi
from hpcgpu import _blas
from hpcgpu.train import gemm_threads as threads
from hpcgpu.train.checkpoint import _attrs_digest, candidates, read_checkpoint
from hpcgpu.nn import MLP
from hpcgpu.train.gemm_threads import GemmPlan, plan_gemm_threads

SIZES = [6, 5, 4, 3]
# Two BLAS threads per rank need two cores per rank: Open MPI 4 and Intel MPI bind each rank to one
# by default (OpenBLAS then runs one thread whatever OMP_NUM_THREADS says); these turn that off.
UNBOUND = {"OMPI_MCA_hwloc_base_binding_policy": "none", "I_MPI_PIN": "0"}
KEYS = ["fc0.forward", "fc1.forward", "fc2.forward", "fc2.wgrad", "fc2.dgrad", "fc1.wgrad", "fc1.dgrad", "fc0.wgrad"]


def test_gemm_shapes_are_the_steps_gemms_in_order():
    shapes = MLP(SIZES).gemm_shapes(7)
    assert [k for k, *_ in shapes] == KEYS
    got = dict((k, (s, ta, tb)) for k, s, ta, tb in shapes)
    assert got["fc1.forward"] == ((7, 5, 4), False, False)  # (n, in) @ (in, out)
    assert got["fc1.wgrad"] == ((5, 7, 4), True, False)  # a.T @ dz
    assert got["fc1.dgrad"] == ((7, 4, 5), False, True)  # dz @ W.T
    assert "fc0.dgrad" not in got  # no gradient for the input


@pytest.fixture
def spy(monkeypatch):
    """NumPy's BLAS as a rank with 2 threads sees it; every set_threads call recorded, none made."""
    calls = []
    monkeypatch.setattr(_blas, "threads", lambda: 2)
    monkeypatch.setattr(_blas, "set_threads", lambda n: calls.append(n) or True)
    return calls


def test_each_gemm_runs_on_its_planned_threads_and_the_ranks_are_restored(spy):
    rng = np.random.default_rng(0)
    m = MLP(SIZES, dtype="float64", seed=1)
    X, y = rng.normal(size=(7, 6)), rng.integers(0, 3, 7)
    m.loss_and_grad(X, y)
    want = m.grad.copy()
    assert spy == []  # no plan: the rank's threads throughout, nothing set
    plan = dict(zip(KEYS, [2, 1, 1, 2, 2, 1, 2, 2], strict=True))
    m.gemm_threads = plan
    m.loss_and_grad(X, y)
    # set only where the count changes, starting from the rank's 2 (it ends on 2: nothing to restore)
    assert spy == [1, 2, 1, 2]
    m.gemm_threads = dict(plan, **{"fc0.wgrad": 1})
    spy.clear()
    m.loss_and_grad(X, y)
    assert spy == [1, 2, 1, 2, 1, 2]  # the last GEMM on one thread, then the rank's 2 again
    np.testing.assert_allclose(m.grad, want, rtol=1e-12)


def test_threads_are_restored_when_the_step_fails(spy):
    m = MLP(SIZES, dtype="float64")
    m.gemm_threads = dict.fromkeys(KEYS, 1)
    with pytest.raises(ValueError):
        m.loss_and_grad(np.zeros((4, 5)), np.zeros(4, dtype=np.int64))  # 5 features, the model wants 6
    assert spy == [1, 2]


def _fake(gemm_speedups, steps, monkeypatch):
    """time_gemms and time_steps replaced: speedup of each GEMM on 2 threads; seconds per step by choice."""
    def time_gemms(gemms, dtype, t, comm, **kw):
        return np.array([[1.0, 1.0 / gemm_speedups[k]] for k, *_ in gemms])

    def time_steps(model, local_batch, candidates, comm, **kw):
        def name(c):
            return "one" if set(c.values()) == {1} else "all" if set(c.values()) == {2} else "per GEMM"
        seen.append([name(c) for c in candidates])
        return np.array([steps[name(c)] for c in candidates])

    seen = []
    monkeypatch.setattr(threads, "time_gemms", time_gemms)
    monkeypatch.setattr(threads, "time_steps", time_steps)
    return seen


def test_threads_where_a_gemm_gains_the_margin_then_the_fastest_step(spy, monkeypatch):
    m = MLP(SIZES)
    gains = dict(zip(KEYS, [2.0, 1.05, 0.7, 1.0 / threads.MARGIN + 1e-9, 1.5, 1.0, 3.0, 1.2], strict=True))
    per_gemm = {k: g >= 1.0 / threads.MARGIN for k, g in gains.items()}
    assert sum(per_gemm.values()) == 5
    seen = _fake(gains, {"one": 3.0, "per GEMM": 2.0, "all": 2.5}, monkeypatch)
    plan = plan_gemm_threads(m, 7, MPI.COMM_SELF)
    assert seen == [["one", "per GEMM", "all"]]
    assert plan.threaded == per_gemm and plan.blas_threads == 2 and plan.source == "timed"
    assert plan.speedup["fc0.forward"] == pytest.approx(2.0)
    assert plan.counts(2)["fc0.forward"] == 2 and plan.counts(2)["fc1.forward"] == 1
    assert plan.summary().startswith("5/8 GEMMs on 2 threads (timed: step 2000.00 ms against 3000.00 ms")
    # one thread wins the step: no GEMM keeps threads, whatever the GEMMs alone said
    _fake(gains, {"one": 1.0, "per GEMM": 2.0, "all": 3.0}, monkeypatch)
    assert not any(plan_gemm_threads(m, 7, MPI.COMM_SELF).threaded.values())
    # a tie goes to fewer threads; a choice per GEMM equal to "all" is timed once
    seen = _fake(dict.fromkeys(KEYS, 2.0), {"one": 1.0, "all": 1.0}, monkeypatch)
    assert not any(plan_gemm_threads(m, 7, MPI.COMM_SELF).threaded.values())
    assert seen == [["one", "all"]]


def test_nothing_is_timed_on_one_thread(monkeypatch):
    monkeypatch.setattr(_blas, "threads", lambda: 1)
    monkeypatch.setattr(threads, "time_gemms", lambda *a, **k: pytest.fail("timed"))
    assert plan_gemm_threads(MLP(SIZES), 7, MPI.COMM_SELF) is None


def test_plan_round_trips_through_json():
    p = GemmPlan(4, {"fc0.forward": True, "fc0.wgrad": False}, {"fc0.forward": 1.5}, {"one": 0.002}, "timed")
    q = GemmPlan.from_json(p.to_json())
    assert q == p
    with pytest.raises(ValueError, match="not a GEMM thread plan"):
        GemmPlan.from_json('{"threaded": 3}')


def test_real_timing_leaves_the_blas_as_it_was():
    before = _blas.threads()
    t = threads.time_gemms(MLP(SIZES).gemm_shapes(5), np.dtype(np.float32), before, MPI.COMM_SELF, seconds=1e-4)
    assert t.shape == (8, 2) and (t > 0).all()
    s = threads.time_steps(MLP(SIZES), 5, [dict.fromkeys(KEYS, 1)] * 2, MPI.COMM_SELF, seconds=1e-4)
    assert s.shape == (2,) and (s > 0).all()
    assert _blas.threads() == before


@pytest.mark.mpi
def test_every_rank_gets_the_same_plan():
    """3 ranks with 2 threads each, timed for real: one plan, summed over the ranks, on every rank.

    A launcher that binds each rank to one core (Intel MPI, Open MPI 4) leaves OpenBLAS one thread
    whatever OMP_NUM_THREADS says: then no rank has a plan, and none times anything."""
    code = ("import hpcgpu, json, os, sys\n"
            "from hpcgpu import _blas\n"
            "from hpcgpu.nn import MLP\n"
            "from hpcgpu.train.gemm_threads import plan_gemm_threads\n"
            "rt = hpcgpu.init('cpu')\n"
            "plan = plan_gemm_threads(MLP([20, 16, 3]), 10 + rt.rank, rt.comm)\n"  # unequal local batches
            "row = dict(plan=plan.to_json() if plan else None, threads=_blas.threads())\n"
            "sys.stdout.write('PLAN ' + json.dumps(row) + '\\n')\n")
    p = _mpi.run(3, ["-c", code], env={**_mpi.blas_threads(2), **UNBOUND}, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(ln[5:]) for ln in p.stdout.splitlines() if ln.startswith("PLAN ")]
    assert len(rows) == 3 and rows[0]["plan"] == rows[1]["plan"] == rows[2]["plan"], rows
    if max(r["threads"] for r in rows) == 1:
        assert rows[0]["plan"] is None, rows
        return
    plan = json.loads(rows[0]["plan"])
    assert set(plan["threaded"]) == {"fc0.forward", "fc1.forward", "fc1.wgrad", "fc1.dgrad", "fc0.wgrad"}
    assert plan["blas_threads"] == rows[0]["threads"] and set(plan["step_seconds"]) >= {"one", "all"}


def _train(data, out, *extra, threads_per_rank="2"):
    return _mpi.run(1, ["-m", "hpcgpu.train", "--data", data, "--out", str(out), "--progress", "lines",
                        "--device", "cpu", "--hidden", "128,128", "--batch-size", "128", "--epochs", "2",
                        *map(str, extra)], env={**_mpi.blas_threads(threads_per_rank), **UNBOUND}, timeout=180)


def _model(path):
    with h5py.File(path) as f:
        return {k: f["model"][k][()] for k in f["model"]}, json.loads(f.attrs["gemm_threads"] or "null")


@pytest.mark.mpi
def test_resume_reuses_the_checkpoints_plan_and_is_exact(tmp_path):
    """float32 GEMMs give other bits on 1 and 2 OpenBLAS threads: a resume must run the plan the run began with."""
    X, y = blobs(1024, d=64)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y, test__X=X[:100], test__y=y[:100])
    ck = tmp_path / "full" / "ck.h5"
    p = _train(data, tmp_path / "full.h5", "--checkpoint", ck, "--checkpoint-every", "5", "--keep-checkpoints", "10")
    assert p.returncode == 0, p.stderr
    assert "GEMMs on 2 threads (timed: step" in p.stdout.splitlines()[0]
    ref, ref_plan = _model(tmp_path / "full.h5")
    assert ref_plan["source"] == "timed" and len(ref_plan["threaded"]) == 8
    mid = {read_checkpoint(f, sum(v.size for v in ref.values())).step: f for f in candidates(str(ck))}[5]
    with h5py.File(mid) as f:
        assert json.loads(json.loads(f.attrs["state"])["gemm_threads"])["threaded"] == ref_plan["threaded"]
    (tmp_path / "again").mkdir()
    shutil.copy(mid, tmp_path / "again" / "ck.h5")
    p = _train(data, tmp_path / "again.h5", "--checkpoint", tmp_path / "again" / "ck.h5", "--resume")
    assert p.returncode == 0, p.stderr
    got, plan = _model(tmp_path / "again.h5")
    assert plan["threaded"] == ref_plan["threaded"] and plan["source"].startswith("checkpoint ")
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
    # on one thread there is nothing to choose, and the checkpoint's plan is not forced on it
    (tmp_path / "one").mkdir()
    shutil.copy(mid, tmp_path / "one" / "ck.h5")
    p = _train(data, tmp_path / "one.h5", "--checkpoint", tmp_path / "one" / "ck.h5", "--resume",
               threads_per_rank="1")
    assert p.returncode == 0, p.stderr
    assert _model(tmp_path / "one.h5")[1] is None and "GEMMs on" not in p.stdout
    # a checkpoint without a plan (--gemm-threads all, or written before plans): all threads, nothing timed
    (tmp_path / "none").mkdir()
    shutil.copy(mid, tmp_path / "none" / "ck.h5")
    with h5py.File(tmp_path / "none" / "ck.h5", "a") as f:  # as such a run writes it, checksum included
        f.attrs["state"] = json.dumps({**json.loads(f.attrs["state"]), "gemm_threads": ""})
        f.attrs["attrs_sha256"] = _attrs_digest(f.attrs)
    p = _train(data, tmp_path / "none.h5", "--checkpoint", tmp_path / "none" / "ck.h5", "--resume")
    assert p.returncode == 0, p.stderr
    assert _model(tmp_path / "none.h5")[1] is None and "GEMMs on" not in p.stdout


@pytest.mark.mpi
def test_info_says_what_it_decided():
    p = _mpi.run(1, ["-m", "hpcgpu", "info", "--device", "cpu", "--hidden", "32", "--batch-size", "16"],
                 env={**_mpi.blas_threads(2), **UNBOUND}, timeout=60, check=True)
    lines = p.stdout.strip().splitlines()
    assert "blas_threads=2" in lines[0]
    assert lines[1].startswith("GEMM threads of the trainer's step, MLP 784-32-10, global batch 16 (local 16")
    assert [ln.split()[0] for ln in lines[2:7]] == ["fc0.forward", "fc1.forward", "fc1.wgrad", "fc1.dgrad",
                                                    "fc0.wgrad"]
    assert lines[7].startswith("  step (forward + backward): one ")
    p = _mpi.run(2, ["-m", "hpcgpu", "info", "--device", "cpu", "--hidden", "32"], env=_mpi.blas_threads(1),
                 timeout=60, check=True)
    assert p.stdout.strip().splitlines()[-1].endswith("one BLAS thread per rank, nothing to choose")
