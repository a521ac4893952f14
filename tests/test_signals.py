"""Every rank's signals are the job's: SIGINT, SIGTERM, SIGUSR1 and SIGHUP to any one rank stop the job as the stop
policy says (exit 3, one stop line, resumable), a second SIGINT at any instant ends it with hpcgpu's one line and
exit 130, never the MPI library's banner; and the lines a run prints never end it, whatever the output's encoding.

Each job is launched as a user launches it (``mpiexec -n P python ...``, a session of its own), the signal goes to
one chosen rank's process (found by its launcher's rank variable in ``/proc/PID/environ``), and only once the job
has reached the point the test is about (a checkpoint written, a file a rank wrote, a handler installed), never
after a sleep.
"""

from __future__ import annotations

import contextlib
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

pytestmark = pytest.mark.mpi

RANKS = _mpi.cases([2, 3], [3])
"""Where a rank other than rank 0 is signalled, or holds the others."""
BANNER = "BAD TERMINATION"
"""MPICH's Hydra's banner for a rank killed by a signal (it goes to stdout)."""


def _data(t, n=512):
    rng = np.random.default_rng(0)
    with h5py.File(t / "data.h5", "w") as f:
        f["train/X"] = rng.random((n, 8)).astype("float32")
        f["train/y"] = rng.integers(0, 3, n)
    return str(t / "data.h5")


def _launch(np_, args, cwd, env=None, python=None):
    """``mpiexec -n NP python ARGS`` in a session of its own (the test can end the whole job)."""
    cmd = [_mpi.mpiexec(python), "-n", str(np_), python or sys.executable, *map(str, args)]
    return subprocess.Popen(cmd, cwd=cwd, env=_mpi.environment(env, python), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="backslashreplace", start_new_session=True)


def _wait_until(job, ready, timeout=120):
    """Wait for the state the test needs (not for a time): fail if the job ends or ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.02)


def _end(job, timeout=120):
    """The job's (stdout, stderr); its session is killed if it outlives ``timeout``."""
    try:
        return job.communicate(timeout=timeout)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()


def _ranks(job, np_):
    """``{rank: pid}`` of the job's rank processes: the launcher's descendants with a rank variable."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    found, todo = {}, [job.pid]
    while todo:
        for c in children.get(todo.pop(), []):
            todo.append(c)
            try:
                with open(f"/proc/{c}/environ", "rb") as f:
                    env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
                with open(f"/proc/{c}/cmdline", "rb") as f:
                    python = b"python" in os.path.basename(f.read().split(b"\0")[0])
            except OSError:
                continue
            rank = next((env[v.encode()] for v in _mpi.RANK_VARS if v.encode() in env), None)
            if python and rank is not None and rank.isdigit():
                found[int(rank)] = c
    assert len(found) == np_, found
    return found


def _status(pid, field):
    """A signal mask of ``/proc/PID/status`` (``SigCgt``, ``SigPnd``, ``ShdPnd``) as an int (0: process gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(ln.split()[1], 16) for ln in f if ln.startswith(field + ":"))
    except (OSError, StopIteration):
        return 0


def _taken(pids, sig, timeout=60):
    """Wait until no process of ``pids`` has ``sig`` pending: each has taken it, so the next is a signal of its
    own (the kernel merges a pending one with the next)."""
    bit = 1 << (int(sig) - 1)
    deadline = time.monotonic() + timeout
    for pid in pids:
        while _status(pid, "SigPnd") & bit or _status(pid, "ShdPnd") & bit:
            assert time.monotonic() < deadline, f"{sig.name} still pending at {pid}"
            time.sleep(0.01)


def _ours(stderr):
    return [ln for ln in _mpi.split_launcher(stderr)[0].splitlines() if ln.strip()]


# -- one rank's stop signal stops the whole job, and a resume finishes ---------------------------------------------

STOP_LINE = re.compile(r"hpcgpu\.train: stopped \((SIG\w+)\) after step (\d+) \(epoch (\d+)\); checkpoint (\S+); "
                       r"rerun with --resume to continue")


STOP_CASES = _mpi.cases([(sig, 3) for sig in ("SIGTERM", "SIGUSR1", "SIGHUP", "SIGINT")] +
                        [("SIGTERM", 1), ("SIGHUP", 1), ("SIGINT", 2), ("SIGUSR1", 2)], [("SIGHUP", 3), ("SIGINT", 3)])
"""Every stop signal at 3 ranks (a worker rank, an odd count), and each at 1 or 2 (rank 0 alone; an even count):
what differs by signal (SIGINT's KeyboardInterrupt, SIGHUP's handler of the MPI library undone) is the same code at
every count, and how a stop reaches the other ranks the same for every signal. The whole product (12 runs of about
6 s under load) added nothing these 8 do not check."""


@pytest.mark.parametrize("sig,np_", STOP_CASES)
def test_a_stop_signal_to_the_last_rank_stops_the_trainer_and_a_resume_finishes(sig, np_, tmp_path):
    """The signal goes to the last rank only (rank 0 alone at 1 rank): every rank stops after the same step,
    one stop line naming the signal, exit 3, nothing on stderr; ``--resume`` then trains to the end. SIGHUP is a
    stop too (UCX's debug handler, which the MPI library installs, is undone)."""
    data, out = _data(tmp_path), tmp_path / "s.h5"
    args = ["-m", "hpcgpu.train", "--data", data, "--hidden", "32", "--batch-size", "16", "--progress", "none",
            "--out", out, "--checkpoint-every", "1", "--schedule", "constant"]  # a run that can be cut short
    job = _launch(np_, [*args, "--epochs", "100000"], tmp_path)
    try:
        _wait_until(job, (tmp_path / "s.ckpt.h5").exists)  # steps are running: every handler is installed
        os.kill(_ranks(job, np_)[np_ - 1], getattr(signal, sig))
    finally:
        stdout, stderr = _end(job)
    assert job.returncode == 3, (stdout, stderr)
    assert _ours(stderr) == [], stderr
    lines = stdout.splitlines()
    assert len(lines) == 1 and STOP_LINE.fullmatch(lines[0]), stdout
    got, _, epoch, ckpt = STOP_LINE.fullmatch(lines[0]).groups()
    assert (got, ckpt) == (sig, str(tmp_path / "s.ckpt.h5"))
    done = _mpi.run(np_, [*map(str, args), "--resume", "--epochs", str(int(epoch) + 1)], cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    with h5py.File(out, "r") as f:
        assert list(f["metrics/epoch"][()]) == list(range(1, int(epoch) + 2))


HOLD_AT_MPI = """
import os, sys, time
_marker, _go = os.environ["HOLD_MARKER"], os.environ["HOLD_GO"]
_rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))

def _hold(event, args):
    if event == "import" and args[0] == "mpi4py.MPI" and not os.path.exists(_marker + _rank):
        open(_marker + _rank, "w").close()  # the MPI library is about to load and start: the test signals now
        deadline = time.time() + 120
        while not os.path.exists(_go) and time.time() < deadline:
            time.sleep(0.01)

sys.addaudithook(_hold)
"""


@pytest.mark.parametrize("np_", RANKS)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_matmul_stops_before_the_multiply_when_one_rank_is_signalled(sig, np_, tmp_path):
    """The last rank gets the signal while it starts (held just before the MPI library loads, by an audit hook of
    the test's sitecustomize, until the signal is sent): the matmul stops at its safe point, one line, exit 3,
    and C is not written. SIGHUP too, though UCX installs its handler after the signal came."""
    rng = np.random.default_rng(0)
    with h5py.File(tmp_path / "ab.h5", "w") as f:
        f["A"], f["B"] = rng.random((7, 5)), rng.random((5, 6))
    (tmp_path / "sitecustomize.py").write_text(HOLD_AT_MPI)
    marker, go = tmp_path / "at-mpi-", tmp_path / "go"
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{_mpi.ROOT}", "HOLD_MARKER": str(marker), "HOLD_GO": str(go)}
    job = _launch(np_, ["-m", "hpcgpu", "matmul", f"{tmp_path / 'ab.h5'}:A", f"{tmp_path / 'ab.h5'}:B", "-o",
                        tmp_path / "c.h5"], tmp_path, env)
    try:
        _wait_until(job, lambda: all(os.path.exists(f"{marker}{r}") for r in range(np_)))
        os.kill(_ranks(job, np_)[np_ - 1], getattr(signal, sig))
        _taken([_ranks(job, np_)[np_ - 1]], getattr(signal, sig))
    finally:
        go.touch()
        stdout, stderr = _end(job)
    assert job.returncode == 3, (stdout, stderr)
    assert _ours(stderr) == [], stderr
    assert stdout.splitlines()[-1] == f"hpcgpu matmul: stopped ({sig}) before the multiply; nothing written to " \
                                      f"{tmp_path / 'c.h5'}", stdout
    assert not (tmp_path / "c.h5").exists()


def test_the_mpi_library_leaves_sighup_and_sigusr1_to_the_program():
    """Under every MPI here, after ``import hpcgpu`` and MPI's start, SIGHUP and SIGUSR1 have their default action
    (MPICH's and Intel MPI's MPI_Init install a SIGUSR1 handler, UCX a SIGHUP one at the library's load)."""
    code = ("import hpcgpu\nfrom mpi4py import MPI\nfrom hpcgpu import _early\n"
            "import os\n"  # one write a rank: two ranks' print (text, then newline) interleaved as "[][]"
            "os.write(1, f'{sorted(n for n, a in _early.os_actions().items() if a.handler)}\\n'.encode())\n")
    for python in [sys.executable, *_mpi.other_stacks()]:
        if python.endswith(os.path.join(".venv-system", "bin", "python")):
            continue
        p = _mpi.run(2, ["-c", code], python=None if python == sys.executable else python, timeout=120,
                     fork=False)  # the fork server's ranks load the MPI library before the test's code
        assert p.returncode == 0, (python, p.stderr)
        assert p.stdout.split("\n")[:2] == ["[]", "[]"], (python, p.stdout)


# -- a second SIGINT at any instant -----------------------------------------------------------------------------------

LIBRARY = """
import atexit, os, sys
import numpy as np
import hpcgpu
from hpcgpu import nn, optim

here = sys.argv[1]

def mark(name):
    with open(os.path.join(here, name), "w") as f:
        f.write(str(os.getpid()))

def hold():  # rank 1's exit waits for the test's go: the others wait for it in the end's barrier
    while not os.path.exists(os.path.join(here, "go")):
        pass

def main():
    rt = hpcgpu.init()
    mark(f"started.{rt.rank}")
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(4000, 8)), rng.integers(0, 2, 4000)
    if "--load" in sys.argv:  # the data takes a while to load: until the test says go
        hold()
    trainer = hpcgpu.Trainer(nn.Sequential(nn.Dense(8, 2)), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                             batch_size=16, epochs=1000, progress="none", checkpoint=os.path.join(here, "c.h5"),
                             checkpoint_every=1)
    trainer.fit((X, y))
    if rt.rank == 1:
        atexit.register(hold)
    atexit.register(mark, f"ending.{rt.rank}")

hpcgpu.run_guarded(main, prog="guarded.py")
"""

SECOND = "guarded.py: second SIGINT: ending the job now, without saving (exit 130)"
LIBRARY_STOP = re.compile(r"hpcgpu\.train: stopped \(SIGINT\) after step \d+ \(epoch 1\); checkpoint \S+c\.h5: "
                          r"Trainer\(\.\.\., checkpoint='\S+c\.h5', resume=True\) continues")


EARLY_EXIT = """
import os, sys, time
from mpi4py import MPI
from hpcgpu import _early

here, rank = sys.argv[1], MPI.COMM_WORLD.Get_rank()
told = _early.tell_launcher_finalized() if rank == 1 else None
if rank == 1:
    open(os.path.join(here, "told"), "w").write(str(told))
    os._exit(130)
while not os.path.exists(os.path.join(here, "told")):
    time.sleep(0.01)
time.sleep(1)  # rank 1 is long gone: under Hydra without the word, its exit had the launcher kill this rank
os.write(1, b"rank 0 outlived rank 1\\n")
_early.tell_launcher_finalized()
os._exit(130)
"""


def test_a_rank_that_told_the_launcher_it_finalized_leaves_without_ending_the_others(tmp_path):
    """Under a Hydra launcher (MPICH's, Intel MPI's) a rank that leaves with 130 after
    hpcgpu._early.tell_launcher_finalized does not have the launcher kill the rank still running (which it does,
    with its banner and exit 255 or 9, for a rank that leaves without): the job's status is 130, no banner.
    Elsewhere the call does nothing and says so (Open MPI's prterun ends the others with SIGTERM)."""
    hydra = _mpi.flavor() in ("mpich", "impi")
    (tmp_path / "early.py").write_text(EARLY_EXIT)
    p = _mpi.run(2, [str(tmp_path / "early.py"), str(tmp_path)], timeout=120, fork=False)
    assert (tmp_path / "told").read_text() == str(hydra)
    if hydra:
        assert p.returncode == 130 and "rank 0 outlived rank 1" in p.stdout, (p.stdout, p.stderr)
        assert BANNER not in p.stdout + p.stderr, p.stdout
    else:
        assert p.returncode == 130, (p.stdout, p.stderr)


LEFT_WITHOUT_MEETING = """
import os
import hpcgpu
from hpcgpu import _early

def main():
    rt = hpcgpu.init()
    if rt.rank == 1:  # as a second SIGINT sent to this rank alone ends it
        _early.tell_launcher_finalized()
        os._exit(130)

hpcgpu.run_guarded(main, prog="guarded.py")
"""


def test_a_rank_that_left_without_meeting_the_others_at_the_end_does_not_hang_the_job(tmp_path):
    """A rank that leaves without the end's meeting (hpcgpu._stop.finish), having told Hydra it finalized (so
    the launcher does not end the job for it): the others wait there for the stall timeout, then abort the job
    with one line. Under another launcher the job ends too (it ends the others itself)."""
    (tmp_path / "left.py").write_text(LEFT_WITHOUT_MEETING)
    p = _mpi.run(2, [str(tmp_path / "left.py")], timeout=120, env={"HPCGPU_STALL_TIMEOUT": "3"}, fork=False)
    assert p.returncode != 0, (p.stdout, p.stderr)
    if _mpi.flavor() in ("mpich", "impi"):
        assert "hpcgpu: stall: rank 0 waited 3 s for the other ranks at the end of the job; aborting the job" \
            in p.stderr, p.stderr


@pytest.mark.parametrize("np_", RANKS)
def test_a_second_sigint_while_the_stopped_job_ends_is_130_and_one_line(np_, tmp_path):
    """A Ctrl-C (every rank) stops a library run; a second one comes while the stopped job ends: every rank has
    returned from main, rank 1 is held at its exit and the others wait for it where MPI is finalized. Exit 130,
    hpcgpu's one line, no banner."""
    (tmp_path / "guarded.py").write_text(LIBRARY)
    job = _launch(np_, [tmp_path / "guarded.py", tmp_path], tmp_path)
    try:
        _wait_until(job, (tmp_path / "c.h5").exists)
        ranks = _ranks(job, np_)
        pids = list(ranks.values())
        for pid in pids:
            os.kill(pid, signal.SIGINT)
        late = 1 << (signal.SIGTERM - 1)  # ignored from where the ranks meet to finalize MPI (hpcgpu._stop.finish)
        _wait_until(job, lambda: (tmp_path / "ending.1").exists() and all(
            _status(pid, "SigIgn") & late for r, pid in ranks.items() if r != 1))
        for pid in pids:
            # A rank the second SIGINT already ended may have had the launcher end the next one (Intel MPI's does)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
        _taken(pids, signal.SIGINT)
    finally:
        (tmp_path / "go").touch()
        stdout, stderr = _end(job)
    assert job.returncode == 130, (stdout, stderr)
    lines = _ours(stderr)
    assert len(lines) == 2 and LIBRARY_STOP.fullmatch(lines[0]) and lines[1] == SECOND, stderr
    assert BANNER not in stdout, stdout


@pytest.mark.parametrize("np_", RANKS)
def test_ctrl_c_to_one_rank_while_a_guarded_program_loads_is_a_stop(np_, tmp_path):
    """SIGINT to the last rank while a run_guarded program loads its data (before its Trainer exists): no
    traceback; the run stops after its first step with its checkpoint, one line, exit 3."""
    (tmp_path / "guarded.py").write_text(LIBRARY)
    job = _launch(np_, [tmp_path / "guarded.py", tmp_path, "--load"], tmp_path)
    try:
        _wait_until(job, lambda: all((tmp_path / f"started.{r}").exists() for r in range(np_)))
        pid = _ranks(job, np_)[np_ - 1]
        os.kill(pid, signal.SIGINT)
        _taken([pid], signal.SIGINT)
    finally:
        (tmp_path / "go").touch()
        stdout, stderr = _end(job)
    assert job.returncode == 3, (stdout, stderr)
    lines = _ours(stderr)
    assert len(lines) == 1 and LIBRARY_STOP.fullmatch(lines[0]) and "after step 1 " in lines[0], stderr
    assert stdout == "", stdout


def test_a_keyboard_interrupt_raised_on_one_rank_is_one_line(tmp_path):
    """A KeyboardInterrupt the program raises itself on rank 1 (a callback's, a model's) while the others wait in
    MPI: one line naming the rank, no traceback, the job is aborted with 130 (the others may wait in MPI)."""
    (tmp_path / "ki.py").write_text(
        "import hpcgpu\n"
        "def main():\n"
        "    rt = hpcgpu.init()\n"
        "    if rt.rank == 1:\n"
        "        raise KeyboardInterrupt\n"
        "    rt.comm.Barrier()\n"
        "hpcgpu.run_guarded(main, prog='ki.py')\n")
    # Processes of their own: what a user sees after MPI_Abort depends on how the launcher's kill reaches the
    # rank; from the fork server it reaches the launcher's process first, and Intel MPI's aborting rank, alive a
    # moment longer, printed its PMI client's "[cli_1]: readline failed" (once, in CI)
    p = _mpi.run(3, [tmp_path / "ki.py"], timeout=120, fork=False)
    assert p.returncode == 130, (p.stdout, p.stderr)
    mine = [ln for ln in _ours(p.stderr) if not ln.startswith("Abort(130)") and ln.strip("\x00")]  # MPI_Abort's
    assert mine == ["ki.py: KeyboardInterrupt on rank 1: ending the job now, without saving (exit 130)"], p.stderr
    assert "Traceback" not in p.stdout + p.stderr


# -- the lines a run prints never end it -----------------------------------------------------------------------------

@pytest.mark.parametrize("program", ["train", "tasks"])
def test_an_ascii_output_prints_non_ascii_paths_escaped_after_the_work(program, tmp_path):
    """``PYTHONIOENCODING=ascii`` and file names out of ASCII: the run finishes, exit 0, its last line names the
    results with backslash escapes."""
    env = {"PYTHONIOENCODING": "ascii"}
    if program == "train":
        args = ["-m", "hpcgpu.train", "--data", _data(tmp_path, 64), "--out", tmp_path / "résultats.h5",
                "--epochs", "1", "--hidden", "4", "--batch-size", "16", "--progress", "lines"]
        out = tmp_path / "résultats.h5"
    else:
        (tmp_path / "paramètres.csv").write_text("x\n1\n2\n3\n")
        (tmp_path / "fns.py").write_text("def f(x):\n    return {'y': 2 * x}\n")
        args = ["-m", "hpcgpu.tasks", f"{tmp_path / 'fns.py'}:f", "--params", tmp_path / "paramètres.csv", "-o",
                tmp_path / "résultats.h5", "--progress", "lines"]
        out = tmp_path / "résultats.h5"
    p = _mpi.run(3, args, cwd=tmp_path, env=env, timeout=180)
    assert p.returncode == 0, p.stderr
    assert out.exists()
    assert str(out).encode("ascii", "backslashreplace").decode() in p.stdout.splitlines()[-1], p.stdout


_TWICE = """
import os, signal, sys
from hpcgpu._stop import StopRequest
stop = StopRequest().install()
signal.raise_signal(getattr(signal, sys.argv[1]))
signal.raise_signal(getattr(signal, sys.argv[1]))
print("alive", stop.reason, flush=True)
"""


@pytest.mark.parametrize("sig", ["SIGUSR1", "SIGTERM"])
def test_a_second_sigusr1_is_the_same_warning_and_a_second_sigterm_ends_the_process(sig, tmp_path):
    """SIGUSR1 is a warning (Slurm's ``--signal``): a second one while a stop is under way is the same request, so
    the checkpoint the first asked for is still written. A second SIGTERM is a user who means it: its default
    action."""
    p = subprocess.run([sys.executable, "-c", _TWICE, sig], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=_mpi.ROOT))
    if sig == "SIGUSR1":
        assert p.returncode == 0 and p.stdout == "alive SIGUSR1\n", (p.returncode, p.stdout, p.stderr)
    else:
        assert p.returncode == -signal.SIGTERM and "alive" not in p.stdout, (p.returncode, p.stdout, p.stderr)
