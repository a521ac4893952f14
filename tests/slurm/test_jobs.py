"""The job scripts in jobs/slurm/, submitted as they are (only their variables set) to a real Slurm."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

JOBS = os.path.join(_mpi.ROOT, "jobs", "slurm")


def _vars(tmp_path, **extra):
    """The scripts' variables (as a user sets them), and what Open MPI needs to start ranks as root here."""
    env = {"VENV": sys.prefix, "RESULTS": str(tmp_path / "results"), "PYTHONPATH": _mpi.ROOT, **_mpi.launcher_env()}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run_dir(tmp_path):
    (d,) = glob.glob(str(tmp_path / "results" / "*"))
    return d


def _log(tmp_path):
    return "".join(open(f).read() for f in sorted(glob.glob(str(tmp_path / "*.out"))))


def test_train_cpu_script(slurm, tmp_path):
    p = slurm.sbatch(os.path.join(JOBS, "train-cpu.sbatch"), "-o", str(tmp_path / "%j.out"),
                     env=_vars(tmp_path, TRAIN_ARGS="--epochs 3"), timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr, _log(tmp_path))
    d = _run_dir(tmp_path)
    with h5py.File(os.path.join(d, "train.h5")) as f:
        assert list(f["metrics/epoch"][()]) == [1, 2, 3]
        assert f.attrs["world_size"] == 2  # --ntasks-per-node=2
    assert os.path.exists(os.path.join(d, "checkpoint.h5"))
    log = _log(tmp_path)
    assert os.path.basename(d) in log  # outputs under a folder named after the job id
    plugin = "pmix" if _mpi.flavor() == "openmpi" else "pmi2"  # MPI_PLUGIN=auto, from the MPI mpi4py loads
    assert f"launcher: srun --mpi={plugin}" in log, log


def test_train_cpu_script_with_mpiexec(slurm, tmp_path):
    """LAUNCHER=mpiexec: the MPI's own launcher inside the allocation (Open MPI's prterun, Hydra)."""
    p = slurm.sbatch(os.path.join(JOBS, "train-cpu.sbatch"), "-o", str(tmp_path / "%j.out"),
                     env=_vars(tmp_path, LAUNCHER="mpiexec", TRAIN_ARGS="--epochs 1"), timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr, _log(tmp_path))
    with h5py.File(os.path.join(_run_dir(tmp_path), "train.h5")) as f:
        assert f.attrs["world_size"] == 2 and list(f["metrics/epoch"][()]) == [1]
    assert "launcher: mpiexec -n 2" in _log(tmp_path)


def test_matmul_cpu_script(slurm, tmp_path):
    rng = np.random.default_rng(0)
    A, B = rng.random((40, 30)), rng.random((30, 20))
    write_h5(tmp_path / "a.h5", A=A)
    write_h5(tmp_path / "b.h5", B=B)
    p = slurm.sbatch(os.path.join(JOBS, "matmul-cpu.sbatch"), "-o", str(tmp_path / "%j.out"),
                     env=_vars(tmp_path, A=tmp_path / "a.h5", B=tmp_path / "b.h5", GRID="1x2"), timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr, _log(tmp_path))
    with h5py.File(os.path.join(_run_dir(tmp_path), "C.h5")) as f:
        np.testing.assert_allclose(f["C"][()], A @ B, rtol=1e-12)
        assert list(f.attrs["grid"]) == [1, 2]


def test_matmul_cpu_script_benchmark(slurm, tmp_path):
    p = slurm.sbatch(os.path.join(JOBS, "matmul-cpu.sbatch"), "-o", str(tmp_path / "%j.out"),
                     env=_vars(tmp_path, BENCH_N=256), timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr, _log(tmp_path))
    with open(os.path.join(_run_dir(tmp_path), "bench.json")) as f:
        res = json.loads(f.read().strip().splitlines()[-1])
    assert res["N"] == 256 and res["ranks"] == 2 and res["gflops"] > 0


def test_preemption_signal_requeue_resume(slurm, tmp_path):
    """A 2-minute limit with the warning signal: checkpoint, requeue, resume, until done.

    Slurm checks time limits every 30 s and sends the warning when less than
    lead + 30 s remain, so its timing is coarse (here: 30 to 60 s into each
    run with ``@60``). The test therefore sends the first warning to the batch
    shell itself, as ``--signal=B:`` does, once training runs; Slurm's own
    timer may interrupt the rerun(s) too. The final parameters must be
    bitwise those of an uninterrupted run at the same number of ranks.
    """
    from test_two_nodes import TWO_NODE_REQUEUE_FLAVORS

    if _mpi.flavor() in TWO_NODE_REQUEUE_FLAVORS and os.geteuid() == 0:
        pytest.skip("test_two_nodes.py runs this test across two nodes under this MPI")
    X, y = blobs(4096, d=128, c=10)
    Xt, yt = blobs(500, d=128, c=10, seed=1)
    data = write_h5(tmp_path / "blobs.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
    opts = "--epochs 150 --batch-size 32 --hidden 256,256 --dtype float64"
    env = dict(slurm.env, **_vars(tmp_path, DATA=data, CHECKPOINT_EVERY=300, TRAIN_ARGS=opts))
    rc, err = _warned_job(slurm, ["--time=2", "--signal=B:USR1@60", "-o", str(tmp_path / "%j.out"),
                                  os.path.join(JOBS, "train-cpu.sbatch")], env, tmp_path,
                          lambda: "epoch   5/" in _log(tmp_path) or "warning signal" in _log(tmp_path), 600)
    log = _log(tmp_path)
    assert rc == 0, (err, log)
    assert "warning signal: checkpoint, then requeue" in log and "restart 1" in log, log
    assert "resumed from" in log
    ref = tmp_path / "ref.h5"
    r = _mpi.run(2, ["-m", "hpcgpu.train", "--data", data, "--out", str(ref), "--progress", "none",
                     *opts.split()], env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr
    with h5py.File(ref) as a, h5py.File(os.path.join(_run_dir(tmp_path), "train.h5")) as b:
        assert b.attrs["resumed_from"].endswith("checkpoint.h5")
        for k in a["model"]:
            np.testing.assert_array_equal(b["model"][k][()], a["model"][k][()], err_msg=k)
        np.testing.assert_array_equal(b["metrics/train_loss"][()], a["metrics/train_loss"][()])


def test_tasks_cpu_script_requeues_and_resumes(slurm, tmp_path):
    """A sweep warned mid-way: the running tasks finish, the results so far are written (exit 3), the job
    requeues itself and the rerun (--resume) runs the rest: every task done once in the final file."""
    if _mpi.LEAN:
        pytest.skip("HPCGPU_CI_LEAN: the script's warning, requeue and resume are Slurm's and the farm's, the "
                    "same under every MPI (the trainer's requeue test launches under each); the MPICH pass runs it")
    n = 60
    params = tmp_path / "p.csv"
    params.write_text("i,seconds\n" + "".join(f"{i},0.1\n" for i in range(n)))
    log = tmp_path / "ran"
    log.mkdir()
    fn = os.path.join(_mpi.ROOT, "tests", "tasks", "farm_fns.py") + ":slow"
    env = dict(slurm.env, **_vars(tmp_path, FUNCTION=fn, PARAMS=params, FARM_LOG=log))
    ran = lambda: sum(len(open(p).read().split()) for p in glob.glob(str(log / "*")))  # noqa: E731
    rc, err = _warned_job(slurm, ["-o", str(tmp_path / "%j.out"), os.path.join(JOBS, "tasks-cpu.sbatch")], env,
                          tmp_path, lambda: ran() >= 8, 300)
    out = _log(tmp_path)
    assert rc == 0, (err, out)
    assert "warning signal" in out and "restart 1" in out and "stopped (stop file" in out, out
    assert f"{n} tasks: {n} done, 0 failed, 0 pending" in out, out
    with h5py.File(os.path.join(_run_dir(tmp_path), "tasks.h5")) as f:
        assert (f["tasks/status"][()] == 1).all() and (f["tasks/attempts"][()] == 1).all()
        np.testing.assert_array_equal(f["results/twice"][()], 2 * np.arange(n))
    assert ran() == n  # the stop let running tasks finish and returned the rest: none ran twice


def _warned_job(slurm, sbatch_args, env, tmp_path, ready, timeout):
    """``sbatch --wait SBATCH_ARGS``; once ``ready()``, Slurm's warning signal to the batch shell (as
    ``--signal=B:USR1`` sends it); the job's exit status and stderr. Cancelled if the test fails first."""
    job = subprocess.Popen(["sbatch", "--wait", *sbatch_args], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        job_id = job.stdout.readline().split()[-1]
        deadline = time.time() + 120
        while not ready():
            assert time.time() < deadline and job.poll() is None, _log(tmp_path)
            time.sleep(0.3)
        os.kill(_batch_shell(slurm, job_id), signal.SIGUSR1)
        rc = job.wait(timeout=timeout)
    finally:
        if job.poll() is None:
            subprocess.run(["scancel", job_id], env=slurm.env, timeout=30)
            job.kill()
    return rc, job.stderr.read()


def _batch_shell(slurm, job_id):
    """PID of the job's batch script (what --signal=B: signals)."""
    prefix = slurm.nodes[0][2]  # listpids asks the local slurmd: the first node's (where a batch shell runs)
    out = subprocess.run([*prefix, "scontrol", "listpids", job_id], env=slurm.env, capture_output=True, text=True,
                         timeout=30).stdout
    for line in out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3 and cols[2] == "batch":
            try:
                with open(f"/proc/{cols[0]}/cmdline", "rb") as f:
                    if b"slurm_script" in f.read():
                        return int(cols[0])
            except OSError:
                continue
    raise AssertionError(f"no batch shell in scontrol listpids {job_id}:\n{out}")


def test_srun_mpi_none_is_a_clear_error(slurm, tmp_path):
    env = dict(slurm.env, PYTHONPATH=_mpi.ROOT)
    p = subprocess.run(["srun", "-n", "3", "--mpi=none", sys.executable, "-m", "hpcgpu.train",
                        "--out", str(tmp_path / "o.h5")], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert not (tmp_path / "o.h5").exists()
    if "direct launched using \"srun\"" in p.stderr and _mpi.flavor() == "openmpi":
        return  # Open MPI 4 built without Slurm's PMI refuses in MPI_Init, before hpcgpu runs: the job fails at once
    ours = [ln for ln in p.stderr.splitlines() if "hpcgpu" in ln]
    assert len(ours) == 1 and "MPI sees a world of 1" in ours[0] and "SLURM_STEP_NUM_TASKS=3" in ours[0], p.stderr


@pytest.mark.parametrize("script", ["train.sbatch", "matmul.sbatch", "tasks.sbatch"])
def test_gpu_scripts_are_accepted(slurm, script):
    p = subprocess.run(["sbatch", "--test-only", os.path.join(JOBS, script)], env=slurm.env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "to start at" in p.stderr
