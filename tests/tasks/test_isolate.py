"""A task that ends its process (os._exit, a signal, a hang no signal stops) or returns what cannot be pickled
fails alone, at 1, 2 and 3 ranks: exit 4, every other result in the file, a one-line cause; ``resume`` keeps it
failed and ``retry_failed`` runs it again."""

import os
import signal

import h5py
import numpy as np
import pytest

import _mpi
from test_farm import FNS, _farm, _runs

EXIT = "the task's process exited with status 0 (os._exit or a C exit() in the task)"
KILL = "the task's process was killed by signal 9 (SIGKILL: out of memory?)"
STUCK = ("TaskTimeout: timed out after 0.2 s, still running 0.3 s later (a native call that ignores signals?): "
         "its process was killed")
UNPICKLABLE = "its result cannot be sent to the rank ("


def _crashy():
    """farm_fns.crashy as ``python -m hpcgpu.tasks FNS:crashy`` loads it (once a process: pickle finds it by name)."""
    import sys

    from hpcgpu.tasks.__main__ import load_function

    mod = sys.modules.get("farm_fns")
    return mod.crashy if mod is not None else load_function(f"{FNS}:crashy")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3], [1, 3]))
def test_a_task_that_ends_its_process_fails_alone_and_resume_skips_it(nprocs, tmp_path, monkeypatch):
    hows = ["ok", "exit", "ok", "kill", "unpicklable", "ok", "ok"]
    n = len(hows)
    params = tmp_path / "p.csv"  # with a byte-order mark, as spreadsheet programs write it
    params.write_bytes(("\ufeffi,how\n" + "".join(f"{i},{h}\n" for i, h in enumerate(hows))).encode())
    out = tmp_path / "r.h5"
    p = _farm(nprocs, [f"{FNS}:crashy", "--params", "p.csv", "-o", str(out), "--timeout", "0.5", "--progress",
                       "none"], tmp_path, env={"FARM_CRASH": "1"})
    failed = [i for i, h in enumerate(hows) if h != "ok"]
    assert p.returncode == 4, (p.stdout, p.stderr)
    assert f"{n} tasks: {n - len(failed)} done, {len(failed)} failed, 0 pending" in p.stdout, p.stdout
    assert _runs(tmp_path / "log") == dict.fromkeys(range(n), 1)
    with h5py.File(out) as f:
        status, y = f["tasks/status"][()], f["results/y"][()]
        err = [e.decode() for e in f["tasks/error"][()]]
        assert f.attrs["isolation"] == "process"
    np.testing.assert_array_equal(status, [2 if h != "ok" else 1 for h in hows])
    ok = status == 1
    np.testing.assert_allclose(y[ok], np.sqrt(np.arange(n)[ok]))
    assert np.isnan(y[~ok]).all()
    assert err[1] == EXIT and err[3] == KILL and err[4].startswith(UNPICKLABLE), err
    assert "\n" not in err[4] and "lambda" in err[4]
    assert not os.path.exists(str(out) + ".journal")

    # resume: the failed tasks stay failed, with their causes; retry_failed runs them again (and now they pass).
    from mpi4py import MPI

    from hpcgpu import tasks
    monkeypatch.setenv("FARM_LOG", str(tmp_path / "log"))
    monkeypatch.delenv("FARM_CRASH", raising=False)
    fn, name = _crashy(), f"{FNS}:crashy"
    r = tasks.map(fn, str(params), out, resume=True, comm=MPI.COMM_SELF, name=name)
    assert (r.done, r.failed, r.pending) == (n - len(failed), len(failed), 0)
    assert r.error[1] == EXIT and r.error[3] == KILL
    assert _runs(tmp_path / "log") == dict.fromkeys(range(n), 1)  # nothing ran again
    r = tasks.map(fn, str(params), out, resume=True, retry_failed=True, comm=MPI.COMM_SELF, name=name)
    assert (r.done, r.failed, r.pending) == (n, 0, 0)
    assert _runs(tmp_path / "log") == {i: 1 + (i in failed) for i in range(n)}
    with h5py.File(out) as f:
        np.testing.assert_allclose(f["results/y"][()], np.sqrt(np.arange(n)))


def test_a_task_no_signal_stops_has_its_process_killed_and_the_next_task_a_new_one(tmp_path, monkeypatch):
    """A task that blocks SIGALRM (a native call, as far as the farm can tell) past --timeout and the grace:
    its process is killed, the task failed with a one-line cause, and the next task runs in a fresh process."""
    from hpcgpu.tasks._isolate import choose

    monkeypatch.setenv("FARM_CRASH", "1")
    runner = choose(_crashy(), True, 5, 0.2)
    runner.grace = 0.3  # min(max(2, timeout), 60) seconds in a sweep
    try:
        rec = runner.run(0, 0, {"i": 0, "how": "stuck"})
        assert (rec.ok, rec.error, rec.rank) == (False, STUCK, 5) and 0.5 <= rec.seconds < 5
        rec = runner.run(1, 0, {"i": 4, "how": "ok"})
        assert rec.ok and rec.values == {"y": 2.0} and runner.starts == 2
    finally:
        runner.close()


def test_death_causes_name_the_status_or_the_signal():
    from hpcgpu.tasks._isolate import death_cause

    assert death_cause(0) == EXIT
    assert death_cause(3).startswith("the task's process exited with status 3")
    assert death_cause(-signal.SIGKILL) == KILL
    assert death_cause(-signal.SIGSEGV) == ("the task's process was killed by signal 11 "
                                            "(SIGSEGV: a segmentation fault in native code)")
    assert death_cause(-signal.SIGUSR2) == "the task's process was killed by signal 12 (SIGUSR2)"


@pytest.mark.device
def test_the_task_process_leaves_the_mpi_job_and_sees_the_ranks_gpu_alone():
    from hpcgpu.tasks._isolate import child_environment

    env = {"PMI_RANK": "1", "PMI_FD": "5", "PMIX_RANK": "1", "OMPI_COMM_WORLD_RANK": "1", "HYDRA_CONTROL_FD": "9",
           "I_MPI_PIN": "1", "MPI_LOCALRANKID": "1", "PRTE_LAUNCHED": "1", "SLURM_JOB_ID": "7", "HOME": "/h",
           "CUDA_VISIBLE_DEVICES": "2,3"}
    got = child_environment(1, env)
    assert got == {"SLURM_JOB_ID": "7", "HOME": "/h", "CUDA_VISIBLE_DEVICES": "3"}
    assert child_environment(0, {})["CUDA_VISIBLE_DEVICES"] == "0"
    assert child_environment(None, {"CUDA_VISIBLE_DEVICES": "0"})["HPCGPU_DEVICE"] == "cpu"


def test_a_function_no_task_process_can_load_runs_in_the_rank_or_is_refused(tmp_path):
    from mpi4py import MPI

    from hpcgpu import tasks

    r = tasks.map(lambda x: {"y": x + 1}, {"x": [1, 2]}, tmp_path / "a.h5", comm=MPI.COMM_SELF)
    assert list(r.results["y"]) == [2, 3]
    with h5py.File(tmp_path / "a.h5") as f:
        assert f.attrs["isolation"].startswith("none (it cannot be pickled")
    with pytest.raises(ValueError, match="<lambda>' cannot run in a task process"):
        tasks.map(lambda x: {"y": x}, {"x": [1]}, comm=MPI.COMM_SELF, isolate=True)
    with pytest.raises(ValueError, match="isolate must be True, False or 'auto', got 1"):
        tasks.map(lambda x: {"y": x}, {"x": [1]}, comm=MPI.COMM_SELF, isolate=1)
    with pytest.raises(ValueError, match="--retry-failed must be True or False"):
        tasks.map(lambda x: {"y": x}, {"x": [1]}, comm=MPI.COMM_SELF, retry_failed="yes")


@pytest.mark.mpi
def test_an_unpicklable_result_of_a_task_run_in_the_rank_fails_that_task_at_2_ranks(tmp_path):
    """isolate=False: the worker's report to rank 0 cannot be pickled; the task fails, not the job."""
    code = ("import hpcgpu; from hpcgpu import tasks; hpcgpu.init(device='cpu')\n"
            "def fn(i):\n"
            "    return {'y': (lambda: 0) if i == 1 else float(i)}\n"
            "r = tasks.map(fn, {'i': [0, 1, 2]}, isolate=False)\n"
            "if r.error is not None: print(r.done, r.failed, r.error[1])\n")
    p = _mpi.run(2, ["-c", code], timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith("2 1 its result cannot be sent to the manager ("), p.stdout
