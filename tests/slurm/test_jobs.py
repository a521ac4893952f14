"""The job scripts in jobs/slurm/, submitted as they are (only their variables set) to a real Slurm."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
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
    shell itself, as ``--signal=B:`` does, as soon as the shell traps it, before
    the ranks start (as test_two_nodes.py does: a run that only warns once
    training shows progress must be long enough never to end first, and was
    150 epochs, 52 CPU-s of the system MPI's pass); Slurm's own timer may
    interrupt the rerun(s) too. The final parameters must be bitwise those of
    an uninterrupted run at the same number of ranks.
    """
    from test_two_nodes import TWO_NODE_REQUEUE_FLAVORS

    if _mpi.flavor() in TWO_NODE_REQUEUE_FLAVORS and os.geteuid() == 0:
        pytest.skip("test_two_nodes.py runs this test across two nodes under this MPI")
    X, y = blobs(2048, d=64, c=10)
    Xt, yt = blobs(500, d=64, c=10, seed=1)
    data = write_h5(tmp_path / "blobs.h5", train__X=X, train__y=y, test__X=Xt, test__y=yt)
    opts = "--epochs 40 --batch-size 32 --hidden 128,64 --dtype float64"
    env = dict(slurm.env, **_vars(tmp_path, DATA=data, CHECKPOINT_EVERY=200, TRAIN_ARGS=opts))
    rc, err, sent = _warned_job(slurm, ["--time=2", "--signal=B:USR1@60", "-o", str(tmp_path / "%j.out"),
                                        os.path.join(JOBS, "train-cpu.sbatch")], env, tmp_path, None, 600)
    log = _log(tmp_path)
    assert rc == 0, (err, sent, log)
    assert "warning signal: checkpoint, then requeue" in log and "restart 1" in log, f"{sent}\n{log}"
    assert "resumed from" in log and "exists already" not in log, log  # HPCGPU_JOB_STOP_FILE: a stop, no warning
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

    One worker sleeps 0.1 s a task, and task 8 and later wait until the job's warning shows in its log
    (``farm_fns.gated``): warned after 8 tasks, the sweep is unfinished however slow the machine is (a fixed
    margin of 5 s of sleeping was not enough under four suites at once: the whole sweep ran before the batch
    shell's trap did)."""
    if _mpi.LEAN:
        pytest.skip("HPCGPU_CI_LEAN: the script's warning, requeue and resume are Slurm's and the farm's, the "
                    "same under every MPI (the trainer's requeue test launches under each); the MPICH pass runs it")
    n = 60
    params = tmp_path / "p.csv"
    params.write_text("i,seconds\n" + "".join(f"{i},0.1\n" for i in range(n)))
    log = tmp_path / "ran"
    log.mkdir()
    fn = os.path.join(_mpi.ROOT, "tests", "tasks", "farm_fns.py") + ":gated"
    gate = tmp_path / "gate"
    env = dict(slurm.env, **_vars(tmp_path, FUNCTION=fn, PARAMS=params, FARM_LOG=log, FARM_GATE=gate))
    ran = lambda: sum(len(open(p).read().split()) for p in glob.glob(str(log / "*")))  # noqa: E731

    def open_gate():  # once the warning is in the log (or at the deadline: the assertions below then fail)
        deadline = time.time() + WAIT_S
        while time.time() < deadline and "warning signal" not in _log(tmp_path):
            time.sleep(0.1)
        gate.touch()

    threading.Thread(target=open_gate, daemon=True).start()
    rc, err, sent = _warned_job(slurm, ["-o", str(tmp_path / "%j.out"), os.path.join(JOBS, "tasks-cpu.sbatch")],
                                env, tmp_path, lambda: ran() >= 8, 300)
    out = _log(tmp_path)
    assert rc == 0, (err, sent, out)
    assert "warning signal" in out and "restart 1" in out and "stopped (stop file" in out, f"{sent}\n{out}"
    assert f"{n} tasks: {n} done, 0 failed, 0 pending" in out, out
    with h5py.File(os.path.join(_run_dir(tmp_path), "tasks.h5")) as f:
        assert (f["tasks/status"][()] == 1).all() and (f["tasks/attempts"][()] == 1).all()
        np.testing.assert_array_equal(f["results/twice"][()], 2 * np.arange(n))
    assert ran() == n  # the stop let running tasks finish and returned the rest: none ran twice


WAIT_S = 300
"""Deadline of each wait on a job (its batch shell, its progress): reached only when something is wrong."""

CONFIRM_S = 15
"""How long a warned batch shell may take to write its trap's line (after the command it runs in the foreground)
before USR1 is sent again."""


def _warned_job(slurm, sbatch_args, env, tmp_path, ready, timeout):
    """``sbatch --wait SBATCH_ARGS``; Slurm's warning signal to the batch shell (as ``--signal=B:USR1`` sends
    it) once that shell traps USR1 and ``ready()`` (``None``: at once); the job's exit status, sbatch's stderr
    and the test's timeline (when the shell was seen, when USR1 left) for the assertions' messages. Cancelled
    if the test fails first.

    Every wait is on a condition, with a deadline reached only on failure: nothing assumes how fast the
    machine is. The batch shell is found before ``ready()`` holds, so that the signal then leaves at once.
    """
    job = subprocess.Popen(["sbatch", "--wait", *sbatch_args], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    job_id, events, t0 = None, [], time.time()
    stamp = lambda what: events.append(f"{time.time() - t0:.1f} s: {what}")  # noqa: E731
    try:
        first = job.stdout.readline()
        assert first.startswith("Submitted batch job"), (first, job.communicate(timeout=60))
        job_id = first.split()[-1]
        shell = _find_batch_shell(slurm, job_id, job, tmp_path)
        assert shell is not None, f"job {job_id} ended before its batch shell was seen:\n{_log(tmp_path)}"
        stamp(f"batch shell {shell} traps USR1")
        deadline = time.time() + WAIT_S
        while ready is not None and not ready():
            assert job.poll() is None, f"job {job_id} ended before it was ready to be warned:\n{_log(tmp_path)}"
            assert time.time() < deadline, f"job {job_id} not ready to be warned after {WAIT_S} s:\n{_log(tmp_path)}"
            time.sleep(0.1)
        # The shell found may have ended since (a run that Slurm's own warning requeued): then its rerun's. If
        # the whole job has ended first, Slurm's warnings did it all; the caller's assertions judge the log.
        while shell is not None and not _signal_usr1(shell):
            stamp(f"batch shell {shell} gone or not trapping USR1")
            shell = _find_batch_shell(slurm, job_id, job, tmp_path)
        stamp(f"USR1 sent to {shell}" if shell is not None else "no USR1 sent: the job ended first")
        # The trap writes "warning signal" in the log. Without that line, once CONFIRM_S have passed, USR1 goes
        # again to the batch shell found anew (the trap only touches the stop file; a second run of it is harmless).
        again, deadline = time.time() + CONFIRM_S, time.time() + WAIT_S
        while (shell is not None and job.poll() is None and time.time() < deadline
               and "warning signal" not in _log(tmp_path)):
            if time.time() > again:
                shell = _find_batch_shell(slurm, job_id, job, tmp_path)
                if shell is not None and _signal_usr1(shell):
                    stamp(f"no trap's line in the log: USR1 sent again, to {shell}")
                again = time.time() + CONFIRM_S
            time.sleep(0.1)
        stamp("the trap's line is in the log" if "warning signal" in _log(tmp_path) else "no trap's line in the log")
        rc = job.wait(timeout=timeout)
        stamp(f"sbatch --wait ended: {rc}")
    finally:
        if job.poll() is None:
            if job_id is not None:
                subprocess.run(["scancel", job_id], env=slurm.env, timeout=30)
            job.kill()
    return rc, job.stderr.read(), "; ".join(events)


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

    The shell is found in /proc (the cluster's nodes share this machine's PIDs), by the path of the script
    the first node's slurmd runs it from, which names the job: no daemon is asked. ``scontrol listpids`` asked
    slurmd, which asks each step's slurmstepd: on a loaded machine an answer could come after the run had
    ended, and the warning with it.
    """
    script = os.path.join(slurm.scratch, "spool", f"slurmd-{slurm.nodes[0][0]}", f"job{int(job_id):05d}",
                          "slurm_script").encode()
    deadline = time.time() + WAIT_S
    while True:
        pid = _batch_shell(script)
        if pid is not None or job.poll() is not None:
            return pid
        if time.time() > deadline:
            state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], env=slurm.env, capture_output=True,
                                   text=True, timeout=60).stdout.strip()
            raise AssertionError(f"no batch shell running {script.decode()} and trapping USR1 after {WAIT_S} s "
                                 f"(squeue: {state or 'gone'}):\n{_log(tmp_path)}")
        time.sleep(0.1)


def _batch_shell(script):
    """The PID of the shell that runs ``script`` (bytes) and traps USR1, if there is one: of the processes whose
    command line holds it, the one whose parent is not one too (a subshell has the same command line)."""
    shells = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if script not in f.read():
                        continue
                with open(f"/proc/{entry}/stat") as f:
                    shells[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
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
    p = subprocess.run(["srun", "-n", "3", "--overcommit", "--mpi=none", sys.executable, "-m", "hpcgpu.train",
                        "--out", str(tmp_path / "o.h5")], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert not (tmp_path / "o.h5").exists()
    if "direct launched using \"srun\"" in p.stderr and _mpi.flavor() == "openmpi":
        return  # Open MPI 4 built without Slurm's PMI refuses in MPI_Init, before hpcgpu runs: the job fails at once
    ours = [ln for ln in p.stderr.splitlines() if "hpcgpu" in ln]
    assert len(ours) == 1 and "MPI sees a world of 1" in ours[0] and "SLURM_STEP_NUM_TASKS=3" in ours[0], p.stderr


@pytest.mark.parametrize("script", ["train.sbatch", "matmul.sbatch", "tasks.sbatch"])
def test_gpu_scripts_are_accepted(slurm_wide, script):
    p = subprocess.run(["sbatch", "--test-only", os.path.join(JOBS, script)], env=slurm_wide.env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "to start at" in p.stderr


# -- every rank gets the CPUs its job asked for (Slurm 22.05's srun trap) ------------------------------------

_CORES_HOOK = '''import atexit, json, os, sys
argv = getattr(sys, "orig_argv", [])
if "-m" in argv and argv[argv.index("-m") + 1:][:1] in (["hpcgpu"], ["hpcgpu.train"], ["hpcgpu.tasks"]):
    def _record():  # at exit: the BLAS threads as hpcgpu left them
        from threadpoolctl import threadpool_info
        rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["SLURM_PROCID"]
        blas = sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})
        with open(os.path.join(os.environ["CORES_LOG"], f"rank{rank}.json"), "w") as f:
            json.dump({"cpus": sorted(os.sched_getaffinity(0)), "blas": blas}, f)
    atexit.register(_record)
'''


def _cores_job(slurm, tmp_path, text, **variables):
    """Submit the script TEXT with 2 ranks of 2 CPUs each; each rank's CPU set and BLAS threads, and the log.

    ``--overcommit`` fits the job on a 2-core machine (the allocation is 2 CPUs per node, not 4), which Slurm
    refuses with ``--ntasks-per-node``: the copy submitted asks ``--ntasks=2`` instead, the rest of the script
    as it is. The step's binding is Slurm's as on any site: a step without ``--cpus-per-task`` binds each of
    its 2 ranks to one CPU. A ``sitecustomize`` on the ranks' path records, as each hpcgpu rank exits, what it
    ran on."""
    hook, log = tmp_path / "hook", tmp_path / "cores"
    hook.mkdir()
    log.mkdir()
    assert text.count("#SBATCH --ntasks-per-node=2\n") == 1
    script = tmp_path / "job.sbatch"
    script.write_text(text.replace("#SBATCH --ntasks-per-node=2\n", "#SBATCH --ntasks=2\n"))
    (hook / "sitecustomize.py").write_text(_CORES_HOOK)
    env = _vars(tmp_path, **variables, CORES_LOG=log)
    env["PYTHONPATH"] = f"{hook}{os.pathsep}{env['PYTHONPATH']}"
    p = slurm.sbatch(str(script), "-o", str(tmp_path / "%j.out"), "--cpus-per-task=2", "--overcommit", env=env,
                     timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr, _log(tmp_path))
    ranks = {f.stem: json.loads(f.read_text()) for f in log.glob("rank*.json")}
    assert sorted(ranks) == ["rank0", "rank1"], (ranks, _log(tmp_path))
    return ranks, _log(tmp_path)


def _cpu_script_vars(script, tmp_path):
    if script == "matmul-cpu.sbatch":
        return {"BENCH_N": 64}
    if script == "tasks-cpu.sbatch":
        params = tmp_path / "p.csv"
        params.write_text("i,seconds\n" + "".join(f"{i},0.01\n" for i in range(6)))
        (tmp_path / "ran").mkdir()
        return {"FUNCTION": os.path.join(_mpi.ROOT, "tests", "tasks", "farm_fns.py") + ":slow", "PARAMS": params,
                "FARM_LOG": tmp_path / "ran"}
    return {"TRAIN_ARGS": "--epochs 1"}


@pytest.mark.parametrize("script, launcher", [("train-cpu.sbatch", "srun"), ("matmul-cpu.sbatch", "srun"),
                                              ("tasks-cpu.sbatch", "srun"), ("train-cpu.sbatch", "mpiexec")])
def test_cpu_scripts_give_each_rank_the_cpus_it_asked_for(slurm, tmp_path, script, launcher):
    """--cpus-per-task=2: every rank's CPU set holds 2 CPUs and its BLAS runs 2 threads, under srun (which
    the script gives --cpus-per-task) and under the MPI's own mpiexec (whose ranks share the job's CPUs; the
    scripts' mpiexec lines are one and the same, the trainer's job checks it under every MPI)."""
    ranks, log = _cores_job(slurm, tmp_path, open(os.path.join(JOBS, script)).read(), LAUNCHER=launcher,
                            **_cpu_script_vars(script, tmp_path))
    for r, got in ranks.items():
        assert len(got["cpus"]) == 2 and got["blas"] == [2], (r, got, log)
    assert "BLAS threads capped" not in log, log


def test_the_old_srun_line_binds_each_rank_to_one_cpu_and_hpcgpu_says_so(slurm, tmp_path):
    """A copy of train-cpu.sbatch with the srun line of before Slurm 22.05 (no --cpus-per-task): each rank is
    bound to one CPU while OMP_NUM_THREADS=2, and the run's first line names the trap and its fix."""
    text = open(os.path.join(JOBS, "train-cpu.sbatch")).read()
    new = 'srun --mpi="$MPI_PLUGIN" --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}")'
    assert new in text
    ranks, log = _cores_job(slurm, tmp_path, text.replace(new, 'srun --mpi="$MPI_PLUGIN")'), TRAIN_ARGS="--epochs 1")
    for r, got in ranks.items():
        assert len(got["cpus"]) == 1 and got["blas"] == [1], (r, got, log)
    first = next(ln for ln in log.splitlines() if ln.startswith("hpcgpu.train: "))
    # the variable NumPy's BLAS reads first: OPENBLAS_NUM_THREADS (OpenBLAS) or MKL_NUM_THREADS, both 2 here
    assert re.search(r"BLAS threads capped on 2 rank\(s\) \(rank 0: (OPENBLAS|MKL|OMP)_NUM_THREADS=2 asks for more "
                     r"than the 1 CPU", first), log
    assert "srun --cpus-per-task" in first and "SRUN_CPUS_PER_TASK" in first, first
