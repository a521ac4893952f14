"""A site's environment: thread variables of another BLAS, the console script's guard, signals at start-up,
stale temporaries, stops that have no checkpoint path."""

import os
import signal
import subprocess
import sys
import time

import h5py
import pytest
from _data import blobs, write_h5

import _mpi

pytestmark = pytest.mark.mpi

INFO = ("import hpcgpu\n"
        "from hpcgpu import _blas\n"
        "rt = hpcgpu.init('cpu')\n"
        "from mpi4py import MPI\n"
        "rows = MPI.COMM_WORLD.gather(f'{rt.rank} {rt.local_size} {_blas.threads()} | {rt.blas_threads}', root=0)\n"
        "if rt.rank == 0:\n"
        "    print('\\n'.join(rows), flush=True)\n")
"""Each rank's threads and what info says, one line a rank, printed by rank 0: lines printed by several ranks
may interleave in the launcher's output."""


def _blas_api():
    from hpcgpu import _blas

    lib = _blas.numpy_blas()
    return getattr(lib.controller, "internal_api", "") if lib is not None else ""


@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_variable_of_another_blas_is_said_to_be_unread_and_the_share_is_applied(nprocs):
    """MKL_NUM_THREADS=1 on a NumPy built with OpenBLAS (or OPENBLAS_NUM_THREADS=1 with MKL): the library does
    not read it, so hpcgpu applies each rank's share of the cores, runs that many threads, and says so."""
    api = _blas_api()
    foreign = {"openblas": "MKL_NUM_THREADS", "mkl": "OPENBLAS_NUM_THREADS", "blis": "MKL_NUM_THREADS"}.get(api)
    if foreign is None:
        pytest.skip(f"NumPy's BLAS here is {api or 'unknown'}: which variables it reads is not known")
    env = {**_mpi.blas_threads(1), "OMP_NUM_THREADS": None, foreign: "1", "OMPI_MCA_hwloc_base_binding_policy": "none",
           "I_MPI_PIN": "0"}
    p = _mpi.run(nprocs, ["-c", INFO], env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = sorted(p.stdout.strip().splitlines())
    assert len(rows) == nprocs, p.stdout
    cores = len(os.sched_getaffinity(0))
    for row in rows:
        rank, local, runs, told = row.replace(" | ", " ", 1).split(" ", 3)
        share = max(1, cores // int(local))
        assert int(runs) == share, row  # what the library runs
        assert told.startswith(f"{share} (") and f"{foreign} not read by" in told, row  # what info says


def test_the_blas_own_variable_wins_and_is_reported_as_run():
    api = _blas_api()
    own = {"openblas": "OPENBLAS_NUM_THREADS", "mkl": "MKL_NUM_THREADS", "blis": "BLIS_NUM_THREADS"}.get(api)
    if own is None:
        pytest.skip(f"NumPy's BLAS here is {api or 'unknown'}")
    p = _mpi.run(2, ["-c", INFO], env={**_mpi.blas_threads(2), own: "1"}, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = p.stdout.strip().splitlines()
    assert len(rows) == 2 and all(r.endswith(f" 1 | 1 (from {own})") for r in rows), p.stdout


# -- every entry point under the guard ---------------------------------------------------------

def _script(name):
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.exists(path):
        pytest.fail(f"the console script {name} is not installed beside {sys.executable} (pip install -e .)")
    return path


def test_the_console_script_keeps_the_error_contract(tmp_path):
    """hpcgpu-train: bad input is one line and exit 2 on every rank, as python -m hpcgpu.train."""
    cmd = [_mpi.mpiexec(), "-n", "2", _script("hpcgpu-train"), "--data", str(tmp_path / "none.h5"),
           "--out", str(tmp_path / "o.h5"), "--progress", "none"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_mpi.environment())
    assert p.returncode == 2, p.stderr
    stderr, _ = _mpi.split_launcher(p.stderr)
    assert stderr.strip().splitlines() == [f"hpcgpu.train: error: --data {tmp_path / 'none.h5'}: no such file"]


def test_the_console_script_aborts_the_job_on_an_unexpected_error(tmp_path):
    """An exception on one rank of hpcgpu-train ends the whole job instead of leaving the other waiting."""
    X, y = blobs(200)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    boom = tmp_path / "sitecustomize.py"  # rank 1 fails in its first step, rank 0 waits in the reduction
    boom.write_text("import os\n"
                    "if os.environ.get('PMI_RANK', os.environ.get('OMPI_COMM_WORLD_RANK')) == '1':\n"
                    "    import hpcgpu.train.step as s\n"
                    "    def fail(*a, **k):\n"
                    "        raise RuntimeError('injected on rank 1')\n"
                    "    s.Step.__call__ = fail\n")
    env = _mpi.environment({"PYTHONPATH": f"{tmp_path}{os.pathsep}{_mpi.ROOT}"})
    cmd = [_mpi.mpiexec(), "-n", "2", _script("hpcgpu-train"), "--data", data, "--out", str(tmp_path / "o.h5"),
           "--epochs", "1", "--hidden", "4", "--batch-size", "16", "--progress", "none"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode not in (0, 2), p.stderr
    assert "[rank 1] error: RuntimeError: injected on rank 1" in p.stderr
    assert not (tmp_path / "o.h5").exists()


# -- stops: at any moment, and always with a checkpoint or a word ---------------------------------

def _data(tmp_path, n=4000):
    X, y = blobs(n, d=32)
    return write_h5(tmp_path / "d.h5", train__X=X, train__y=y)


def test_a_stop_without_a_checkpoint_path_saves_one_beside_the_output_and_resume_finds_it(tmp_path):
    data = _data(tmp_path, 400)
    out = tmp_path / "run.h5"
    stop = tmp_path / "STOP"
    stop.write_text("")
    opts = ["-m", "hpcgpu.train", "--data", data, "--out", out, "--epochs", "2", "--batch-size", "40",
            "--hidden", "8", "--dtype", "float64", "--progress", "none"]
    p = _mpi.run(2, [*opts, "--stop-file", stop], timeout=120)
    assert p.returncode == 3, p.stderr
    ck = tmp_path / "run.ckpt.h5"
    assert p.stdout.strip().splitlines()[-1] == (f"hpcgpu.train: stopped (stop file {stop}) after step 1 (epoch 1); "
                                                 f"checkpoint {ck}; remove {stop}, then rerun with --resume to "
                                                 "continue")
    assert f"warning: --stop-file {stop} exists already: the run stops after its first step" in p.stderr
    assert ck.exists() and not out.exists()
    stop.unlink()
    p = _mpi.run(2, [*opts, "--resume"], timeout=120)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as f:
        assert f.attrs["resumed_from"] == str(ck) and f.attrs["steps_done"] == 20


HOLD_AT_MPI = """
import os, sys, time
_marker, _go = os.environ["HOLD_MARKER"], os.environ["HOLD_GO"]
_rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))

def _hold(event, args):
    if event == "import" and args[0] == "mpi4py.MPI" and not os.path.exists(_marker + _rank):
        open(_marker + _rank, "w").close()  # MPI is about to start: the test signals now
        deadline = time.time() + 120
        while not os.path.exists(_go) and time.time() < deadline:
            time.sleep(0.01)

sys.addaudithook(_hold)
"""


def test_sigterm_at_start_up_still_ends_with_the_stop_code_and_message(tmp_path):
    """A SIGTERM while a rank is still starting (here: held just before MPI starts, by an audit hook of the test's
    sitecustomize, until the signal has been sent) is kept and honoured after the first step: exit 3 and the stop
    line, not a silent exit 15."""
    data = _data(tmp_path)
    out = tmp_path / "o.h5"
    (tmp_path / "sitecustomize.py").write_text(HOLD_AT_MPI)
    marker, go = tmp_path / "at-mpi-", tmp_path / "go"
    env = _mpi.environment({"PYTHONPATH": f"{tmp_path}{os.pathsep}{_mpi.ROOT}", "HOLD_MARKER": str(marker),
                            "HOLD_GO": str(go)})
    cmd = [_mpi.mpiexec(), "-n", "2", sys.executable, "-m", "hpcgpu.train", "--data", data, "--out", str(out),
           "--epochs", "50", "--hidden", "16", "--batch-size", "32", "--progress", "lines"]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 60
        while not all(os.path.exists(f"{marker}{r}") for r in (0, 1)):
            assert time.time() < deadline and job.poll() is None, job.communicate()
            time.sleep(0.01)
        pids = list(_mpi.trainer_ranks(str(out)).values())
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        go.touch()
        stdout, stderr = job.communicate(timeout=120)
    finally:
        go.touch()
        if job.poll() is None:
            job.kill()
    assert len(pids) == 2
    assert job.returncode == 3, stderr
    assert "hpcgpu.train: stopped (SIGTERM) after step 1 (epoch 1); checkpoint" in stdout, stdout


def test_stale_temporaries_of_the_outputs_are_removed_at_start_and_named(tmp_path):
    data = _data(tmp_path, 200)
    out = tmp_path / "o.h5"
    stale = tmp_path / ".o.ckpt.h5.x1y2z3.tmp"  # what a rank 0 killed while writing a checkpoint leaves
    stale.write_bytes(b"half a checkpoint")
    other = tmp_path / ".unrelated.h5.abc.tmp"
    other.write_bytes(b"not ours")
    p = _mpi.run(2, ["-m", "hpcgpu.train", "--data", data, "--out", out, "--epochs", "1", "--hidden", "4",
                     "--batch-size", "20", "--checkpoint-every", "5", "--progress", "none"], timeout=120)
    assert p.returncode == 0, p.stderr
    assert not stale.exists() and other.exists()
    assert p.stderr.strip().splitlines() == [
        f"hpcgpu.train: warning: removed {stale}, a temporary file of --checkpoint {tmp_path / 'o.ckpt.h5'} "
        "that a killed writer left"], p.stderr


ENTRY_POINTS = {
    "matmul": (2, ["-m", "hpcgpu", "matmul", "{t}/none.h5", "{t}/none.h5", "-o", "{t}/c.h5"],
               "hpcgpu: error: {t}/none.h5: no such file"),
    "train": (2, ["-m", "hpcgpu.train", "--data", "{t}/none.h5", "--out", "{t}/o.h5"],
              "hpcgpu.train: error: --data {t}/none.h5: no such file"),
    "train predict": (2, ["-m", "hpcgpu.train", "predict", "--model", "{t}/none.h5", "--data", "{t}/x.h5", "-o",
                          "{t}/p.h5"], "hpcgpu.train: error: --model {t}/none.h5: no such file"),
    "tasks": (2, ["-m", "hpcgpu.tasks", "math:sqrt", "--params", "{t}/none.csv", "-o", "{t}/r.h5"],
              "hpcgpu.tasks: error: --params {t}/none.csv: no such file"),
    "datasets": (1, ["-m", "hpcgpu.datasets", "fashion-mnist", "--source", "{t}/nowhere", "--out", "{t}/f.h5"],
                 "hpcgpu.datasets: error: {t}/nowhere: no train-images-idx3-ubyte[.gz] (Fashion-MNIST IDX files)"),
    "report": (1, ["-m", "hpcgpu.report", "{t}/none.h5", "-o", "{t}/rep"], "hpcgpu.report: error: {t}/none.h5: "
                                                                           "no such file"),
    "scaling": (1, ["-m", "hpcgpu.scaling", "--ranks", "0"], "hpcgpu.scaling: error: --ranks must be positive "
                                                              "integers like 1,2,4; --epochs, --sizes >= 2; "
                                                              "--repeat, --extend >= 1"),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_every_entry_point_says_bad_input_in_one_line_and_exits_2(entry, tmp_path):
    nprocs, args, line = ENTRY_POINTS[entry]
    p = _mpi.run(nprocs, [a.replace("{t}", str(tmp_path)) for a in args], timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [line.replace("{t}", str(tmp_path))], p.stderr
