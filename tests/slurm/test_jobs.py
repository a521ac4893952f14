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
    requeues itself and the rerun (--resume) runs the rest: every task done once in the final file.

    One worker sleeps 0.1 s a task: warned after 8 tasks, at least 5 s of sleeping is left however fast the
    machine is, and the signal leaves within 0.1 s of the 8th (the batch shell is found beforehand)."""
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


WAIT_S = 300
"""Deadline of each wait on a job (its batch shell, its progress): reached only when something is wrong."""


def _warned_job(slurm, sbatch_args, env, tmp_path, ready, timeout):
    """``sbatch --wait SBATCH_ARGS``; Slurm's warning signal to the batch shell (as ``--signal=B:USR1`` sends
    it) once that shell traps USR1 and ``ready()`` (``None``: at once); the job's exit status and stderr.
    Cancelled if the test fails first.

    Every wait is on a condition, with a deadline reached only on failure: nothing assumes how fast the
    machine is. The batch shell is found before ``ready()`` holds, so that the signal then leaves at once.
    """
    job = subprocess.Popen(["sbatch", "--wait", *sbatch_args], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    job_id = None
    try:
        first = job.stdout.readline()
        assert first.startswith("Submitted batch job"), (first, job.communicate(timeout=60))
        job_id = first.split()[-1]
        shell = _find_batch_shell(slurm, job_id, job, tmp_path)
        assert shell is not None, f"job {job_id} ended before its batch shell was seen:\n{_log(tmp_path)}"
        deadline = time.time() + WAIT_S
        while ready is not None and not ready():
            assert job.poll() is None, f"job {job_id} ended before it was ready to be warned:\n{_log(tmp_path)}"
            assert time.time() < deadline, f"job {job_id} not ready to be warned after {WAIT_S} s:\n{_log(tmp_path)}"
            time.sleep(0.1)
        # The shell found may have ended since (a run that Slurm's own warning requeued): then its rerun's. If
        # the whole job has ended first, Slurm's warnings did it all; the caller's assertions judge the log.
        while shell is not None and not _signal_usr1(shell):
            shell = _find_batch_shell(slurm, job_id, job, tmp_path)
        rc = job.wait(timeout=timeout)
    finally:
        if job.poll() is None:
            if job_id is not None:
                subprocess.run(["scancel", job_id], env=slurm.env, timeout=30)
            job.kill()
    return rc, job.stderr.read()


def _traps_usr1(pid):
    """Whether process ``pid`` catches SIGUSR1 (the batch script's ``trap ... USR1`` has run; before it, the
    signal would kill the shell). ProcessLookupError once it has ended."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigCgt:"))
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessLookupError(pid) from None
    return bool(caught >> (signal.SIGUSR1 - 1) & 1)


def _signal_usr1(pid):
    """SIGUSR1 to ``pid`` if it still runs and traps it; whether it was sent."""
    try:
        if _traps_usr1(pid):
            os.kill(pid, signal.SIGUSR1)
            return True
    except ProcessLookupError:
        pass
    return False


def _find_batch_shell(slurm, job_id, job, tmp_path):
    """Wait for the job's batch shell (what ``--signal=B:`` signals) to run and trap USR1; its PID (None if the
    job ends first).

    ``scontrol listpids`` asks the local slurmd (the first node's, where a batch shell runs) and lists a
    step's processes only once slurmd has started it: a pending, requeued or starting job has none yet.
    """
    prefix = slurm.nodes[0][2]
    deadline = time.time() + WAIT_S
    while True:
        out = subprocess.run([*prefix, "scontrol", "listpids", job_id], env=slurm.env, capture_output=True,
                             text=True, timeout=60)
        pid = _batch_shell(out.stdout)
        if pid is not None or job.poll() is not None:
            return pid
        if time.time() > deadline:
            state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], env=slurm.env, capture_output=True,
                                   text=True, timeout=60).stdout.strip()
            raise AssertionError(f"no batch shell trapping USR1 in scontrol listpids {job_id} after {WAIT_S} s "
                                 f"(squeue: {state or 'gone'}):\n{out.stdout}{out.stderr}\n{_log(tmp_path)}")
        time.sleep(0.1)


def _batch_shell(listpids):
    """The batch shell's PID in ``scontrol listpids`` output, if it runs and traps USR1: the ``batch`` step's
    ``slurm_script`` process whose parent is not one too (a subshell has the same command line)."""
    shells = {}
    for line in listpids.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3 and cols[2] == "batch":
            try:
                with open(f"/proc/{cols[0]}/cmdline", "rb") as f:
                    if b"slurm_script" not in f.read():
                        continue
                with open(f"/proc/{cols[0]}/stat") as f:
                    shells[int(cols[0])] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
    for pid, parent in shells.items():
        try:
            if parent not in shells and _traps_usr1(pid):
                return pid
        except ProcessLookupError:
            continue
    return None


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
