"""The task farm's per-task watchdog where a task runs in the rank's own process (``tasks.map(isolate=False)``, or a
function no child process can load): a task that no signal stops (SIGALRM blocked, as in a native call) past its
timeout and the grace is named, and the job is aborted instead of a hang; the journal keeps the finished tasks and
``resume`` finishes the sweep. (A task in a process of its own has that process killed instead:
tests/tasks/test_isolate.py.)"""

import os
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest

import _mpi

_SWEEP = """
import sys
sys.path.insert(0, sys.argv[1])
import farm_fns
import hpcgpu
from hpcgpu import tasks

rt = hpcgpu.init("cpu")
r = tasks.map(farm_fns.crashy, "p.csv", "r.h5", timeout=0.5, isolate=False, flush_seconds=0.2,
              resume=sys.argv[2] == "resume")
# rank 0's line, one write (print's pieces from every rank, unbuffered, interleaved under Open MPI 4)
if rt.rank == 0:
    sys.stdout.write(f"done {r.done} failed {r.failed} pending {r.pending}\\n")
    sys.stdout.flush()
"""

_STUCK = re.compile(r"^\[rank (\d)\] error: task 2 \(attempt 1\) is still running 2 s after its --timeout of 0\.5 s "
                    r"\(stuck in a native call that ignores signals\?\): aborting the job; the finished tasks are in "
                    r"the journal, rerun with --resume$", re.M)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_task_stuck_in_the_rank_past_its_grace_aborts_the_job_and_resume_finishes(nprocs, tmp_path):
    """Task 2 of 6 blocks SIGALRM and sleeps 60 s in the rank's own process: the watchdog's line names the task,
    its rank and the timeout, the job ends (the launch's own timeout is the hang's guard, no time is asserted), the
    journal is there; resume (the task no longer stuck) ends with every task done and its result."""
    hows = ["ok", "ok", "stuck", "ok", "ok", "ok"]
    (tmp_path / "p.csv").write_text("i,how\n" + "".join(f"{i},{h}\n" for i, h in enumerate(hows)))
    (tmp_path / "sweep.py").write_text(_SWEEP)
    fns = os.path.join(_mpi.ROOT, "tests", "tasks")
    p = _mpi.run(nprocs, [str(tmp_path / "sweep.py"), fns, "first"], timeout=120, cwd=tmp_path,
                 env={"FARM_CRASH": "1"})
    assert p.returncode != 0, (p.returncode, p.stdout, p.stderr)
    found = _STUCK.findall(p.stderr)
    assert len(found) == 1 and int(found[0]) < nprocs, p.stderr
    assert "done" not in p.stdout, p.stdout
    assert (tmp_path / "r.h5.journal").exists()  # the finished tasks, for resume
    p = _mpi.run(nprocs, [str(tmp_path / "sweep.py"), fns, "resume"], timeout=120, cwd=tmp_path,
                 env={"FARM_CRASH": None})
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout.splitlines() == ["done 6 failed 0 pending 0"], p.stdout
    with h5py.File(tmp_path / "r.h5", "r") as f:
        np.testing.assert_array_equal(f["tasks/status"][()], np.ones(6))
        np.testing.assert_allclose(f["results/y"][()], np.sqrt(np.arange(6)))


_ABORT_RETURNS = """
import signal
import time

import mpi4py

mpi4py.rc.initialize = False
from mpi4py import MPI


class World:
    def Get_rank(self):
        return 1

    def Abort(self, code):  # MPICH's returns once the launcher has the request; the launcher ends the ranks later
        print("Abort", code, flush=True)


MPI.COMM_WORLD = World()
from hpcgpu.tasks._farm import _Alarm

with _Alarm(0.2, grace=0.2)("task 2 (attempt 1)"):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(20)
print("the stuck task ran on", flush=True)
"""


def test_the_watchdog_ends_its_rank_when_mpi_abort_returns(tmp_path):
    """MPICH's MPI_Abort returns once the launcher has the request, and a loaded launcher ends the ranks a while
    later: the watchdog's line is said once and the rank ends there (exit 1), the stuck task runs no further. An
    MPI_COMM_WORLD whose Abort returns at once stands in for a launcher that is slow to end the job."""
    (tmp_path / "abort_returns.py").write_text(_ABORT_RETURNS)
    p = subprocess.run([sys.executable, str(tmp_path / "abort_returns.py")], capture_output=True, text=True,
                       timeout=120, env=_mpi.environment(), cwd=tmp_path)
    assert (p.returncode, p.stdout) == (1, "Abort 1\n"), (p.returncode, p.stdout, p.stderr)
    assert p.stderr == ("[rank 1] error: task 2 (attempt 1) is still running 0.2 s after its --timeout of 0.2 s "
                        "(stuck in a native call that ignores signals?): aborting the job; the finished tasks are in "
                        "the journal, rerun with --resume\n"), p.stderr
