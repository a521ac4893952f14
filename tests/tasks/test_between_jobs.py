"""The task farm between jobs: finished work is never started afresh silently, a stop signal to any rank stops the
job resumably, results whose shape varies are stored ragged, a task's output carries its id."""

import os
import re
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import _mpi
from test_farm import FNS, _farm, _parent, _runs, _slow_params, _wait_for


def _status(out):
    with h5py.File(out) as f:
        return f["tasks/status"][()]


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3], [1, 3]))
def test_finished_work_is_refused_without_resume_or_overwrite(nprocs, tmp_path):
    params, out = _slow_params(tmp_path / "p.csv", 12, 0.0), tmp_path / "r.h5"
    args = ["--params", params, "-o", str(out), "--progress", "none"]
    p = _farm(nprocs, [f"{FNS}:slow", *args], tmp_path)
    assert p.returncode == 0, p.stderr
    before = out.read_bytes()
    p = _farm(nprocs, [f"{FNS}:slow", *args], tmp_path)
    assert p.returncode == 2 and p.stderr == (f"hpcgpu.tasks: error: {out} holds 12 finished tasks of this sweep: "
                                              "--resume continues them, --overwrite starts afresh\n"), p.stderr
    assert out.read_bytes() == before and not os.path.exists(f"{out}.journal")
    p = _farm(nprocs, [f"{FNS}:ragged", *args], tmp_path)  # another function on the same output
    assert p.returncode == 2 and p.stderr == (f"hpcgpu.tasks: error: {out} holds 12 finished tasks of a sweep of "
                                              f"{FNS}:slow: --overwrite replaces them (or write to another -o)\n"), \
        p.stderr
    assert out.read_bytes() == before
    p = _farm(nprocs, [f"{FNS}:slow", *args, "--resume"], tmp_path)
    assert p.returncode == 0 and f"hpcgpu.tasks: resumed: 12 of 12 tasks kept from {out}\n" in p.stdout, p.stdout
    assert sum(_runs(tmp_path / "log").values()) == 12  # nothing ran again
    p = _farm(nprocs, [f"{FNS}:slow", *args, "--overwrite"], tmp_path)
    assert p.returncode == 0 and "12 tasks: 12 done" in p.stdout, p.stderr
    assert sum(_runs(tmp_path / "log").values()) == 24  # afresh: every task again


SIGNALS = [(1, signal.SIGTERM), (2, signal.SIGUSR1), (3, signal.SIGTERM), (3, signal.SIGINT)]


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs, sig", SIGNALS, ids=[f"{n}-{s.name}" for n, s in SIGNALS])
def test_a_stop_signal_to_a_worker_rank_stops_the_job_resumably(nprocs, sig, tmp_path, request):
    """The signal goes to a rank that runs tasks (a worker; at one rank the rank itself), never to rank 0 or the
    launcher. Tasks 8 and later wait for a file the test makes after the signal, so the stop comes mid-sweep
    however slow the machine: the first chunk of 200 tasks is 50 or more a worker, so each worker is inside one."""
    if request.config.getoption("--device") == "standin":
        pytest.skip("the stop path does not touch the device: the first pass covers it")
    n = 200
    params, out, gate = _slow_params(tmp_path / "p.csv", n, 0.002), tmp_path / "r.h5", tmp_path / "GATE"
    log = tmp_path / "log"
    log.mkdir()
    args = [f"{FNS}:gated", "--params", params, "-o", str(out), "--progress", "none"]
    cmd = [_mpi.mpiexec(), "-n", str(nprocs), sys.executable, "-m", "hpcgpu.tasks", *args]
    env = _mpi.environment({"FARM_LOG": str(log), "FARM_GATE": str(gate), "OMP_NUM_THREADS": "1"})
    job = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: 8 in _runs(log), 90, "task 8 to start")
        task_process = next(int(p.name) for p in log.iterdir() if "8" in p.read_text().split())
        os.kill(_parent(task_process), sig)  # the rank whose task process runs task 8
        gate.touch()
        stdout, stderr = job.communicate(timeout=90)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 3, (stdout, stderr)
    where = "" if nprocs == 1 else r" on rank \d"
    assert re.search(rf"; stopped \({sig.name}{where}\)", stdout), stdout
    pending = int(re.search(r"(\d+) pending", stdout).group(1))
    assert pending > 0 and stdout.splitlines()[-1] == (
        f"hpcgpu.tasks: rerun with --resume to run the {pending} pending tasks"), stdout
    assert "Traceback" not in stderr, stderr
    done = int((_status(out) != 0).sum())
    assert done == n - pending
    p = _farm(2, args, tmp_path)  # without --resume: refused, nothing lost
    assert p.returncode == 2 and f"{out} holds {done} finished tasks of this sweep" in p.stderr, p.stderr
    p = _farm(2, [*args, "--resume"], tmp_path, env={"FARM_GATE": str(gate)})
    with h5py.File(out) as f:
        errors = {e.decode() for e in f["tasks/error"][()]} - {""}
    assert p.returncode == 0 and f"hpcgpu.tasks: resumed: {done} of {n} tasks kept from {out}" in p.stdout, \
        (p.stdout, errors)
    assert (_status(out) == 1).all()
    assert set(_runs(log).values()) == {1}  # every task once: the stop lost none and repeated none


def test_library_map_stops_on_a_signal_and_the_program_exits_3(tmp_path):
    """tasks.map installs the stop policy for its duration: SIGTERM during a task stops the sweep after it, the
    stop is recorded for run_guarded (exit 3), and a resume finishes it and clears that record."""
    from mpi4py import MPI

    from hpcgpu import tasks
    from hpcgpu._stop import stop_count, stopped

    def fn(a):
        if a == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return {"y": a + 1}

    since, out = stop_count(), tmp_path / "r.h5"
    before = signal.getsignal(signal.SIGTERM)
    r = tasks.map(fn, {"a": np.arange(8)}, out, comm=MPI.COMM_SELF, name="fn")
    assert (r.done, r.pending, r.stopped) == (4, 4, "SIGTERM") and stopped(since) == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before  # put back
    r = tasks.map(lambda a: {"y": a + 1}, {"a": np.arange(8)}, out, comm=MPI.COMM_SELF, name="fn", resume=True)
    assert (r.done, r.pending, r.stopped) == (8, 0, None) and stopped(since) is None
    np.testing.assert_array_equal(r.results["y"], np.arange(8) + 1)


def test_library_map_refuses_finished_work_and_a_resume_whose_results_changed_kind(tmp_path):
    from mpi4py import MPI

    from hpcgpu import AgreedError, tasks

    class StopAfter3:
        reason, asked = "test", 0

        def requested(self):
            self.asked += 1
            return self.asked > 3

    rows, out = {"a": np.arange(6)}, tmp_path / "r.h5"
    part = tasks.run_sweep(lambda a: {"x": np.zeros(2) + a}, rows, out, comm=MPI.COMM_SELF, name="f",
                           stop=StopAfter3())
    assert (part.done, part.pending) == (3, 3)
    before = out.read_bytes()
    with pytest.raises(FileExistsError) as e:
        tasks.map(lambda a: {"x": np.zeros(2)}, rows, out, comm=MPI.COMM_SELF, name="f")
    assert isinstance(e.value, AgreedError) and str(e.value) == (
        f"{out} holds 3 finished tasks of this sweep: resume=True continues them, overwrite=True starts afresh")
    with pytest.raises(ValueError) as e:
        tasks.map(lambda a: {"x": "text"}, rows, out, comm=MPI.COMM_SELF, name="f", resume=True)
    assert str(e.value) == (f"task 3: result 'x' is a str, the results kept from out {out} are of dtype float64: "
                            "the function changed since; rerun with overwrite=True to start afresh")
    assert out.read_bytes() == before  # nothing written
    r = tasks.map(lambda a: {"x": np.zeros(a % 2 + 1) + a}, rows, out, comm=MPI.COMM_SELF, name="f", resume=True)
    assert (r.done, r.pending) == (6, 0)  # a changed shape is stored ragged, with the kept results
    with h5py.File(out) as f:
        assert f["results/x"].attrs["ragged"]
        for i in range(6):
            want = np.zeros(2) + i if i < 3 else np.zeros(i % 2 + 1) + i
            np.testing.assert_array_equal(f["results/x"][i].reshape(f["shapes/x"][i]), want)
    r = tasks.map(lambda a: {"x": "text"}, rows, out, comm=MPI.COMM_SELF, name="f", overwrite=True)
    assert r.done == 6 and list(r.results["x"]) == ["text"] * 6


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_results_whose_shape_varies_are_stored_ragged(nprocs, tmp_path, request):
    params, out = _slow_params(tmp_path / "p.csv", 10, 0.0), tmp_path / "r.h5"
    p = _farm(nprocs, [f"{FNS}:ragged", "--params", params, "-o", str(out), "--progress", "none"], tmp_path)
    assert p.returncode == 0 and "10 tasks: 10 done" in p.stdout, p.stderr
    with h5py.File(out) as f:
        assert f["results/s"].shape == (10,) and "s" not in f["shapes"]  # regular results keep their layout
        np.testing.assert_array_equal(f["results/s"][()], np.arange(10))
        for i in range(10):
            np.testing.assert_array_equal(f["results/v"][i].reshape(f["shapes/v"][i]), np.arange(i % 3 + 1))
            np.testing.assert_array_equal(f["results/m"][i].reshape(f["shapes/m"][i]), np.full((i % 2 + 1, 2), i))


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3], [1, 3]))
def test_each_tasks_output_comes_whole_with_its_id(nprocs, tmp_path):
    params, out = _slow_params(tmp_path / "p.csv", 6, 0.0), tmp_path / "r.h5"
    p = _farm(nprocs, [f"{FNS}:chatty", "--params", params, "-o", str(out), "--progress", "none"], tmp_path)
    assert p.returncode == 0, p.stderr
    for i in range(6):
        want = [f"[task {i}] out {i} a", f"[task {i}] raw {i}", f"[task {i}] out {i} b"]
        lines = p.stdout.splitlines()
        k = lines.index(want[0])
        assert lines[k:k + 3] == want, p.stdout  # together, in the order printed
        assert p.stderr.splitlines().count(f"[task {i}] err {i}") == 1, p.stderr
    assert not re.search(r"^(out|err|raw) ", p.stdout + p.stderr, re.M)  # no line without its id


def test_output_of_a_task_run_in_the_rank_is_prefixed_too(capfd):
    from mpi4py import MPI

    from hpcgpu import tasks

    def fn(a):
        print(f"hello {a}")
        return {"a": a}

    tasks.map(fn, {"a": [0, 1]}, comm=MPI.COMM_SELF)
    assert capfd.readouterr().out == "[task 0] hello 0\n[task 1] hello 1\n"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2])
def test_a_tasks_own_keyboardinterrupt_is_a_failed_task_named_so(nprocs, tmp_path):
    params, out = _slow_params(tmp_path / "p.csv", 4, 0.0), tmp_path / "r.h5"
    p = _farm(nprocs, [f"{FNS}:interrupted", "--params", params, "-o", str(out), "--progress", "none"], tmp_path)
    assert p.returncode == 4 and "4 tasks: 3 done, 1 failed" in p.stdout, (p.stdout, p.stderr)
    with h5py.File(out) as f:
        assert f["tasks/error"][2].decode() == "KeyboardInterrupt: the task's own"


@pytest.mark.mpi
def test_the_job_scripts_own_stop_file_is_a_stop_without_the_stale_files_warning(tmp_path):
    """HPCGPU_JOB_STOP_FILE names the job script's stop file, which it removed before the launch: there at the
    start, its trap made it (a warning signal while the sweep started), so the run stops without the warning."""
    params, out, stop = _slow_params(tmp_path / "p.csv", 12, 0.0), tmp_path / "r.h5", tmp_path / "STOP"
    stop.touch()
    args = [f"{FNS}:slow", "--params", params, "-o", str(out), "--progress", "none", "--stop-file", str(stop)]
    p = _farm(2, args, tmp_path, env={"HPCGPU_JOB_STOP_FILE": str(stop)})
    assert p.returncode == 3 and "warning" not in p.stderr, (p.stdout, p.stderr)
    assert f"stopped (stop file {stop})" in p.stdout, p.stdout
    p = _farm(2, [*args, "--resume"], tmp_path, env={"HPCGPU_JOB_STOP_FILE": str(tmp_path / "OTHER")})
    assert p.returncode == 3 and "warning: --stop-file" in p.stderr, p.stderr  # another file: the warning stays


@pytest.mark.mpi
@pytest.mark.parametrize("script", ["tasks-cpu.sbatch", "tasks.sbatch"])
def test_a_failed_requeue_ends_the_job_script_non_zero(script, tmp_path):
    """The job script outside Slurm, its scontrol failing: warned mid-sweep (SIGUSR1 to the script, as Slurm's
    --signal=B:USR1 does), the sweep stops and the script says the requeue failed and exits 3, not 0 (a
    job ending COMPLETED with tasks pending)."""
    params, gate, log = _slow_params(tmp_path / "p.csv", 200, 0.002), tmp_path / "GATE", tmp_path / "log"
    log.mkdir()
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "scontrol").write_text("#!/bin/sh\necho 'scontrol: error: Requeue not allowed' >&2\nexit 1\n")
    (shim / "scontrol").chmod(0o755)
    env = _mpi.environment({"FARM_LOG": str(log), "FARM_GATE": str(gate), "SLURM_JOB_ID": "77", "SLURM_NTASKS": "2",
                            "LAUNCHER": "mpiexec", "DEVICE": "cpu", "VENV": os.path.dirname(os.path.dirname(
                                sys.executable)), "FUNCTION": f"{FNS}:gated", "PARAMS": params,
                            "RESULTS": str(tmp_path / "results"), "TASK_ARGS": "--progress none"})
    env["PATH"] = f"{shim}:{env['PATH']}"
    job = subprocess.Popen(["bash", os.path.join(_mpi.ROOT, "jobs", "slurm", script)], env=env, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: 8 in _runs(log), 90, "task 8 to start")
        job.send_signal(signal.SIGUSR1)
        _wait_for(lambda: (tmp_path / "results" / "77" / "STOP").exists(), 30, "the trap to touch the stop file")
        # Rank 0 looks at the stop file once an interval, and looks (when one is due) before it hands out a chunk.
        # Held shut for an interval after the file appeared, the gate opens when a look is due: the worker ends its
        # first chunk (tasks 0-99) and gets the stop, not the next chunk, however fast or slow the machine. Opened
        # at once, the other 192 tasks of 2 ms could all be done before rank 0 next looked.
        from hpcgpu._stop import StopRequest

        time.sleep(StopRequest().interval)
        gate.touch()
        stdout, stderr = job.communicate(timeout=90)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 3, (stdout, stderr)
    assert "scontrol requeue failed: tasks are pending in" in stderr and "requeueing" in stdout, (stdout, stderr)
    with h5py.File(tmp_path / "results" / "77" / "tasks.h5") as f:
        assert (f["tasks/status"][()] == 0).any()  # pending tasks: a COMPLETED job would have hidden them


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_what_a_task_printed_before_its_process_died_reaches_the_log(nprocs, tmp_path):
    params, out, tmp = _slow_params(tmp_path / "p.csv", 3, 0.0), tmp_path / "r.h5", tmp_path / "tmp"
    tmp.mkdir()
    p = _farm(nprocs, [f"{FNS}:crashes_after_printing", "--params", params, "-o", str(out), "--progress", "none"],
              tmp_path, env={"TMPDIR": str(tmp)})
    assert p.returncode == 4 and "3 tasks: 2 done, 1 failed" in p.stdout, (p.stdout, p.stderr)
    for i in range(3):  # once each: the dead process's lines by its rank, the others' by their process
        assert p.stdout.splitlines().count(f"[task {i}] step {i} before the crash") == 1, p.stdout
    with h5py.File(out) as f:
        assert "signal 11" in f["tasks/error"][1].decode()
    assert not list(tmp.glob("hpcgpu-task-*"))  # the capture files of every task process removed


def test_library_map_lets_another_job_write_its_output_once_it_returns_or_is_refused(tmp_path):
    """map's locks on its output (and journal) are released when it returns, and when it is refused."""
    from mpi4py import MPI

    from hpcgpu import tasks

    rows, out = {"a": np.arange(3)}, tmp_path / "r.h5"
    other = ("import sys; from hpcgpu._outputs import Output, claim_error; "
             "print(claim_error([Output(sys.argv[1], 'out'), Output(sys.argv[1] + '.journal', 'out')], hold=[], "
             "overwrite=True))")

    def another_job_may_write():
        p = subprocess.run([sys.executable, "-c", other, str(out)], capture_output=True, text=True, timeout=120)
        return p.stdout.strip() == "None", p.stdout + p.stderr

    tasks.map(lambda a: {"x": float(a)}, rows, out, comm=MPI.COMM_SELF, name="f", progress="none")
    ok, said = another_job_may_write()
    assert ok, said
    with pytest.raises(FileExistsError):  # finished work, refused after the claim
        tasks.map(lambda a: {"x": float(a)}, rows, out, comm=MPI.COMM_SELF, name="f", progress="none")
    ok, said = another_job_may_write()
    assert ok, said
