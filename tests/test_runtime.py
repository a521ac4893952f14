import array
import os
import re
import signal
import socket
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import _mpi
import hpcgpu
from hpcgpu import runtime


def test_init_cpu_gives_numpy_and_a_private_comm():
    rt = hpcgpu.init("cpu")
    assert rt.xp is np
    assert rt.device == "cpu" and rt.device_id is None
    assert rt.cuda_aware is False
    assert MPI.Comm.Compare(rt.comm, MPI.COMM_WORLD) == MPI.CONGRUENT  # a Dup, not WORLD itself
    assert (rt.rank, rt.size) == (0, 1)
    assert rt.local_rank == 0 and rt.local_size == 1
    assert hpcgpu.get_runtime() is rt
    assert "[0/1]" in rt.describe() and "cuda_aware=no" in rt.describe()


def test_init_rejects_unknown_device():
    with pytest.raises(ValueError, match="device must be"):
        hpcgpu.init("tpu")


@pytest.mark.skipif(runtime._device.device_count() > 0, reason="this machine has a GPU")
def test_init_gpu_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="--device gpu: (CuPy|no usable CUDA device|no CUDA device)"):
        hpcgpu.init("gpu", comm=MPI.COMM_SELF)


@pytest.mark.parametrize("value, expected", [("1", True), ("yes", True), ("0", False), ("off", False)])
def test_cuda_aware_override_wins(monkeypatch, value, expected):
    monkeypatch.setenv("HPCGPU_CUDA_AWARE_MPI", value)
    aware, why = hpcgpu.detect_cuda_aware(MPI.COMM_SELF)
    assert aware is expected and "HPCGPU_CUDA_AWARE_MPI" in why


def test_cuda_aware_bad_override(monkeypatch):
    monkeypatch.setenv("HPCGPU_CUDA_AWARE_MPI", "maybe")
    with pytest.raises(ValueError, match="HPCGPU_CUDA_AWARE_MPI"):
        hpcgpu.detect_cuda_aware(MPI.COMM_SELF)


@pytest.mark.parametrize("kinds, cuda", [("mpi,system,cuda:device", True), ("mpi, cuda", True), ("cuda", True),
                                         ("mpi,system", False), ("mpi,system,cudaish", False), ("rocm:device", False),
                                         ("mpi,system,CUDA:host", True), ("", False)])
def test_alloc_kinds_are_parsed_as_a_list(kinds, cuda):
    assert runtime._has_cuda_kind(kinds) is cuda


def test_forced_override_is_named_when_the_mpi_says_no(monkeypatch):
    monkeypatch.setenv("HPCGPU_CUDA_AWARE_MPI", "1")
    monkeypatch.setattr(runtime, "_info_alloc_kinds", lambda comm: None)
    monkeypatch.setattr(runtime, "_query_cuda_support", lambda: 0)
    aware, why = hpcgpu.detect_cuda_aware(MPI.COMM_SELF)
    assert aware is True and "forced against the MPI's own answer (MPIX_Query_cuda_support()=0)" in why
    monkeypatch.setattr(runtime, "_query_cuda_support", lambda: 1)
    assert hpcgpu.detect_cuda_aware(MPI.COMM_SELF) == (True, "HPCGPU_CUDA_AWARE_MPI=1")


@pytest.mark.parametrize("aware, library, pml, expected", [
    (False, "MPICH Version: 4.2", "", False),
    (True, "MPICH Version: 4.2", "", True),
    (True, "Intel(R) MPI Library 2021.18", "", True),
    (True, "Open MPI v5.0.11", "", False),
    (True, "Open MPI v5.0.11", "ucx", True),
])
def test_nonblocking_collectives_on_device_memory_per_mpi(monkeypatch, aware, library, pml, expected):
    monkeypatch.delenv("HPCGPU_NONBLOCKING_DEVICE", raising=False)
    monkeypatch.setenv("OMPI_MCA_pml", pml)
    ok, why = hpcgpu.runtime.detect_nonblocking_device(aware, library)
    assert ok is expected and why


def test_nonblocking_override_and_bad_value(monkeypatch):
    monkeypatch.setenv("HPCGPU_NONBLOCKING_DEVICE", "1")
    assert hpcgpu.runtime.detect_nonblocking_device(True, "Open MPI v5")[0] is True
    monkeypatch.setenv("HPCGPU_NONBLOCKING_DEVICE", "0")
    assert hpcgpu.runtime.detect_nonblocking_device(True, "MPICH")[0] is False
    monkeypatch.setenv("HPCGPU_NONBLOCKING_DEVICE", "sometimes")
    with pytest.raises(ValueError, match="HPCGPU_NONBLOCKING_DEVICE"):
        hpcgpu.runtime.detect_nonblocking_device(True, "MPICH")


def test_library_version_is_clean(monkeypatch):
    monkeypatch.setattr(MPI, "Get_library_version", lambda: "Open MPI v5.0.11, package: Open MPI\x00")
    assert runtime._library_version() == "Open MPI v5.0.11, package: Open MPI"


def test_launcher_local_rank_variables(monkeypatch):
    for var in hpcgpu._device.LOCAL_RANK_VARS:
        monkeypatch.delenv(var, raising=False)
    assert hpcgpu._device.launcher_local_rank() is None
    monkeypatch.setenv("MPI_LOCALRANKID", "3")
    assert hpcgpu._device.launcher_local_rank() == (3, "MPI_LOCALRANKID")
    monkeypatch.setenv("SLURM_LOCALID", "1")  # srun's word wins
    assert hpcgpu._device.launcher_local_rank() == (1, "SLURM_LOCALID")


@pytest.mark.mpi
@pytest.mark.parametrize("cli", [["-m", "hpcgpu", "info"], ["-m", "hpcgpu", "matmul", "--bench", "8"],
                                 ["-m", "hpcgpu.train", "--epochs", "1"]])
@pytest.mark.device
def test_bad_cuda_aware_override_is_one_line(cli, tmp_path):
    """A bad HPCGPU_CUDA_AWARE_MPI is bad input on every device: one line, exit 2, no abort."""
    p = _mpi.run(2, [*cli, "--device", "cpu", *(["--out", str(tmp_path / "o.h5")] if "hpcgpu.train" in cli else [])],
                 timeout=90, env={"HPCGPU_CUDA_AWARE_MPI": "maybe"})
    assert p.returncode == 2, p.stderr
    msg = "HPCGPU_CUDA_AWARE_MPI must be 0 or 1 (or no/yes, false/true, off/on), got 'maybe'"
    assert p.stderr.strip().splitlines() in ([f"hpcgpu: error: {msg}"], [f"hpcgpu.train: error: {msg}"]), p.stderr
    assert not (tmp_path / "o.h5").exists()


def test_cuda_aware_from_info_key(monkeypatch):
    monkeypatch.delenv("HPCGPU_CUDA_AWARE_MPI", raising=False)
    monkeypatch.setattr(runtime, "_info_alloc_kinds", lambda comm: "mpi,system,cuda:device")
    assert hpcgpu.detect_cuda_aware(MPI.COMM_SELF) == (True, "mpi_memory_alloc_kinds=mpi,system,cuda:device")


def test_cuda_aware_from_library_query_then_variables(monkeypatch):
    monkeypatch.delenv("HPCGPU_CUDA_AWARE_MPI", raising=False)
    monkeypatch.setattr(runtime, "_info_alloc_kinds", lambda comm: None)
    monkeypatch.setattr(runtime, "_query_cuda_support", lambda: 1)
    assert hpcgpu.detect_cuda_aware(MPI.COMM_SELF)[0] is True
    monkeypatch.setattr(runtime, "_query_cuda_support", lambda: None)
    monkeypatch.setenv("MPICH_GPU_SUPPORT_ENABLED", "1")
    assert hpcgpu.detect_cuda_aware(MPI.COMM_SELF) == (True, "MPICH_GPU_SUPPORT_ENABLED=1")
    monkeypatch.delenv("MPICH_GPU_SUPPORT_ENABLED")
    for var in ("OMPI_MCA_opal_cuda_support", "MV2_USE_CUDA"):
        monkeypatch.delenv(var, raising=False)
    assert hpcgpu.detect_cuda_aware(MPI.COMM_SELF)[0] is False


def test_library_query_reads_the_loaded_mpi():
    """The answer of the libmpi this process loaded, asked here through ctypes: None where it has no
    MPIX_Query_cuda_support, else that function's value, which MPICH's own general query
    (MPIX_GPU_query_support for MPIX_GPU_SUPPORT_CUDA = 0) gives too; MPICH answers 0 on a machine
    without an NVIDIA device (it turns its GPU support off when it finds none at init)."""
    import ctypes
    import os

    mpich = MPI.Get_library_version().startswith("MPICH Version:")  # MPICH itself (not Intel MPI, Cray MPICH)
    with open("/proc/self/maps") as f:
        libs = sorted({p for p in (ln.split()[-1] for ln in f) if os.path.basename(p).startswith("libmpi.so")})
    assert libs, "mpi4py's libmpi is not in this process's maps"
    answers = []
    for path in libs:
        lib = ctypes.CDLL(path)
        fn = getattr(lib, "MPIX_Query_cuda_support", None)
        if fn is None:
            continue
        fn.restype = ctypes.c_int
        answers.append(int(fn()))
        general = getattr(lib, "MPIX_GPU_query_support", None) if mpich else None
        if general is not None:
            flag = ctypes.c_int(-1)
            assert general(0, ctypes.byref(flag)) == 0 and flag.value == answers[-1], (path, flag, answers)
    q = runtime._query_cuda_support()
    assert q == (answers[0] if answers else None), (q, libs, answers)
    assert q in (None, 0, 1), q
    nvidia = any(os.path.exists(d) for d in ("/dev/nvidiactl", "/dev/nvidia0"))
    if mpich and answers and not nvidia:
        assert q == 0, (q, libs)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2])
def test_blas_thread_pools_agree_after_init(nprocs):
    """NumPy's and SciPy's OpenBLAS (wheels) each keep a pool; after init() every BLAS pool has
    the rank's share of the cores, and hpcgpu computes on NumPy's alone, so a step never wakes another."""
    code = ("import hpcgpu, numpy as np\n"
            "rt = hpcgpu.init('cpu')\n"
            "from threadpoolctl import threadpool_info\n"
            "from hpcgpu import _blas\n"
            "blas = [p for p in threadpool_info() if p['user_api'] == 'blas']\n"
            "n = int(rt.blas_threads.split()[0])\n"
            "assert blas and {p['num_threads'] for p in blas} == {n}, (rt.blas_threads, blas)\n"
            "assert _blas.numpy_blas() is not None and _blas.numpy_blas().gemms, blas\n"
            # the rank's share: its CPU set when the launcher bound it (Open MPI 4 does), else cores / ranks
            "import os\n"
            "mine, total = len(os.sched_getaffinity(0)), os.cpu_count()\n"
            "assert n == (mine if mine < total else max(1, total // rt.size)), (n, mine, total)\n"
            "import sys; sys.stdout.write(f'ok {n}\\n')\n")  # one write: two ranks' print pieces interleave
    env = {v: None for v in runtime._THREAD_VARS}
    p = _mpi.run(nprocs, ["-c", code], env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("ok ") == nprocs, p.stdout


def _thread_vars(monkeypatch, **given):
    """Exactly the thread variables given (a site's OPENBLAS_NUM_THREADS=1 would otherwise win)."""
    for v in (*runtime._THREAD_VARS, "GOTO_NUM_THREADS", runtime.OVERSUBSCRIBE_VAR):
        monkeypatch.delenv(v, raising=False)
    for k, v in given.items():
        monkeypatch.setenv(k, v)


def test_blas_threads_respect_user_choice(monkeypatch):
    _thread_vars(monkeypatch, OMP_NUM_THREADS="3")
    monkeypatch.setattr(runtime, "_cores", lambda: (2, 2))  # unbound: more threads than cores is a choice
    assert runtime._limit_blas_threads(8) == "3 (from OMP_NUM_THREADS)"
    assert runtime._CAP is None


def test_a_rank_alone_on_its_node_leaves_the_blas_as_it_runs(monkeypatch):
    """One unbound rank whose BLAS already runs every core: nothing to limit, so threadpoolctl's walk over the
    process's shared objects (13 ms after scikit-learn's import) is not made. Anything else is limited."""
    from hpcgpu import _blas

    _thread_vars(monkeypatch)
    calls = []
    monkeypatch.setattr(runtime, "_set_blas_limit", lambda n: calls.append(n) or True)
    monkeypatch.setattr(runtime, "_cores", lambda: (4, 4))
    monkeypatch.setattr(_blas, "threads", lambda: 4)
    assert runtime._limit_blas_threads(1) == "4 (the node's 4 cores, one rank on it: each library's own default)"
    assert calls == []
    assert runtime._limit_blas_threads(2) == "2 (4 cores / 2 ranks on node)" and calls == [2]
    monkeypatch.setattr(_blas, "threads", lambda: 1)  # the user's threadpool_limits(1) before init: the share
    assert runtime._limit_blas_threads(1) == "4 (4 cores / 1 ranks on node)" and calls == [2, 4]
    monkeypatch.setattr(_blas, "threads", lambda: 4)
    monkeypatch.setattr(runtime, "_cores", lambda: (2, 4))  # bound to a CPU set: its size
    assert runtime._limit_blas_threads(1) == "2 (bound to 2 cores)" and calls == [2, 4, 2]


def test_a_variable_past_a_bound_ranks_cpu_set_is_capped(monkeypatch):
    """Slurm 22.05's trap: OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK on a rank that srun bound to fewer CPUs."""
    _thread_vars(monkeypatch, OMP_NUM_THREADS="8")
    monkeypatch.setattr(runtime, "_cores", lambda: (2, 16))
    got = runtime._limit_blas_threads(4)
    assert got.startswith("2 (OMP_NUM_THREADS=8 capped at the CPU set: this rank is bound to 2 of the node's 16"), got
    assert "srun --cpus-per-task" in got and "SRUN_CPUS_PER_TASK" in got and "HPCGPU_BLAS_OVERSUBSCRIBE=1" in got
    assert runtime._CAP == ("OMP_NUM_THREADS", "8", 2)
    line = runtime._capped_line(MPI.COMM_SELF, got)
    assert line.startswith("BLAS threads capped on 1 rank(s) (rank 0: OMP_NUM_THREADS=8 asks for more than the 2 CPU")
    assert "srun --cpus-per-task" in line and "SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in line
    # within the set: the variable wins; insisting keeps 8
    _thread_vars(monkeypatch, OMP_NUM_THREADS="2")
    assert runtime._limit_blas_threads(4) == "2 (from OMP_NUM_THREADS)"
    _thread_vars(monkeypatch, OMP_NUM_THREADS="8", HPCGPU_BLAS_OVERSUBSCRIBE="1")
    assert runtime._limit_blas_threads(4) == "8 (from OMP_NUM_THREADS)"
    assert runtime._capped_line(MPI.COMM_SELF, "8 (from OMP_NUM_THREADS)") == ""
    _thread_vars(monkeypatch)
    runtime._limit_blas_threads(1)


@pytest.mark.mpi
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or (os.cpu_count() or 1) < 2, reason="needs 2 cores")
def test_the_first_line_names_the_trap_when_ranks_are_bound_to_fewer_cpus():
    """Two ranks bound to CPU 0 with OMP_NUM_THREADS=2: each runs one thread, and the run's first line says why."""
    env = {v: None for v in (*runtime._THREAD_VARS, "GOTO_NUM_THREADS", runtime.OVERSUBSCRIBE_VAR)}
    env["OMP_NUM_THREADS"] = "2"
    code = ("import os, runpy, sys\n"
            "os.sched_setaffinity(0, {0})  # as srun binds a rank, before NumPy's BLAS starts its threads\n"
            "sys.argv = ['hpcgpu', 'matmul', '--bench', '32', '--device', 'cpu']\n"
            "runpy.run_module('hpcgpu', run_name='__main__', alter_sys=True)\n")
    p = _mpi.run(2, ["-c", code], env=env, timeout=90)
    assert p.returncode == 0, p.stderr
    first = p.stdout.splitlines()[0]
    assert "BLAS threads capped on 2 rank(s) (rank 0: OMP_NUM_THREADS=2 asks for more than the 1 CPU(s)" in first, first


@pytest.mark.device
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3], [1, 3]))
def test_info_prints_one_line_per_rank(nprocs):
    p = _mpi.run(nprocs, ["-m", "hpcgpu", "info", "--device", "cpu"], timeout=60, check=True)
    lines = p.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == [f"[{r}/{nprocs}]" for r in range(nprocs)]
    first = MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0]
    mpi = "mpi={} (MPI {}.{})".format(" ".join(first.split()), *MPI.Get_version())  # the library the ranks load
    for ln in lines:
        assert "device=cpu" in ln and "xp=numpy" in ln and mpi in ln and "cuda_aware=no" in ln, (mpi, ln)
    assert f"local_rank=0/{nprocs}" in lines[0]


@pytest.mark.mpi
def test_every_blas_is_limited_to_the_ranks_share_of_cores():
    """NumPy's and SciPy's OpenBLAS both: SciPy's, left at 2 threads, made 8 ranks 35x slower here. SciPy's
    is limited before SciPy is imported (init loads its library, not scipy.linalg, which cost 0.4 s a rank):
    a science code importing it after init gets the limited pool."""
    code = ("import hpcgpu, threadpoolctl, os, sys\n"
            "rt = hpcgpu.init('cpu')\n"
            "assert 'scipy.linalg' not in sys.modules, 'init imported scipy.linalg'\n"
            "import numpy as np\n"
            "hpcgpu._gemm.gemm(np.ones((2, 2)), np.ones((2, 2)), np.zeros((2, 2)), beta=1.0)  # BLAS, as SUMMA\n"
            "import scipy.linalg.blas  # as a science code would, after init\n"
            "share = max(1, len(os.sched_getaffinity(0)) // rt.local_size)\n"
            "blas = [i for i in threadpoolctl.threadpool_info() if i['user_api'] == 'blas']\n"
            "assert len(blas) >= 1 and all(i['num_threads'] <= share for i in blas), blas\n"
            "import sys; sys.stdout.write(f'ok {len(blas)}\\n')\n")
    env = {v: None for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")}
    p = _mpi.run(4, ["-c", code], timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("ok") == 4


@pytest.mark.mpi
def test_info_usage_error_is_one_line():
    p = _mpi.run(2, ["-m", "hpcgpu", "inf"], timeout=60)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.mpi
def test_the_launchers_own_block_is_all_it_adds(tmp_path):
    """The README's promise: hpcgpu's error is one line; after it, Open MPI's launcher adds its own
    block (no option silences it), MPICH's and Intel MPI's Hydra add nothing for an exit status of 2."""
    p = _mpi.run(2, ["-m", "hpcgpu", "matmul", str(tmp_path / "no.h5"), str(tmp_path / "no.h5"),
                     "-o", str(tmp_path / "c.h5")], timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no.h5" in lines[0], p.stderr
    if _mpi.flavor() == "openmpi":
        # its block between two rules; before it, now and then, a single line of its runtime's teardown race
        block = [ln for ln in p.launcher_stderr.strip().splitlines() if not _mpi._RUNTIME_LINE.match(ln)]
        assert block[0].strip("-") == "" and block[-1].strip("-") == "", p.launcher_stderr
        assert "exited with non-zero status" in p.launcher_stderr
        assert re.search(r"Exit code:\s+2", p.launcher_stderr), p.launcher_stderr
    else:
        assert p.launcher_stderr == "", p.launcher_stderr
    assert not (tmp_path / "c.h5").exists()


@pytest.mark.mpi
def test_the_suites_launches_inherit_no_singletons_variables():
    """The suite's own ground: this pytest process (a worker, or pytest itself) holds none of the variables an
    Open MPI singleton's MPI_Init writes (_mpi.SINGLETON_VARS; pytest-xdist's controller no longer initializes MPI),
    and a launch from it is one world of 2 ranks (with them, Open MPI 4's mpiexec exited 1 without a word)."""
    assert not [k for k in _mpi.SINGLETON_VARS if k in os.environ], os.environ
    assert os.environ.get("OMPI_MCA_ess") != "singleton"
    p = _mpi.run(2, ["-c", "import os; from mpi4py import MPI; os.write(1, b'%d\\n' % MPI.COMM_WORLD.Get_size())"],
                 timeout=60, fork=False)  # one write a rank: print's two interleave
    assert (p.returncode, p.stdout) == (0, "2\n2\n"), (p.stdout, p.stderr, p.launcher_stderr)


def test_only_a_launch_that_never_started_is_launched_again():
    """The suite relaunches (tests/_mpi.py ``run``) only a launch the launcher itself could not start: its
    exact words, nothing from a rank. A rank's failure, or those words after a rank wrote, is the test's."""
    import subprocess

    block = ("-" * 74 + "\nThe PMIx server's listener thread failed to start. We cannot\ncontinue.\n" + "-" * 74 + "\n")
    def launch(rc, out, err):
        return subprocess.CompletedProcess([], rc, out, err)

    assert _mpi.not_started(launch(213, "", block))
    assert not _mpi.not_started(launch(0, "", block))
    assert not _mpi.not_started(launch(213, "rank 0 trained\n", block))
    assert not _mpi.not_started(launch(2, "", "hpcgpu: no.h5: no such file\n"))


def test_mpich_yields_while_waiting_when_the_node_has_more_than_two_ranks_a_core(monkeypatch):
    from hpcgpu import _yield

    for v in (_yield.HEAVY_YIELD, "MPICH_ENABLE_HEAVY_YIELD", _yield.SLURM_CPUS, *_yield.LOCAL_SIZE_VARS):
        monkeypatch.delenv(v, raising=False)
    cores = os.cpu_count() or 1
    monkeypatch.setenv("MPI_LOCALNRANKS", str(2 * cores))  # two ranks a core: MPICH's own polling is faster
    assert not _yield.when_oversubscribed() and _yield.HEAVY_YIELD not in os.environ
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", str(2 * cores + 1))
    assert _yield.when_oversubscribed() and os.environ[_yield.HEAVY_YIELD] == "1"
    monkeypatch.setenv(_yield.HEAVY_YIELD, "0")  # the user's choice stays
    assert not _yield.when_oversubscribed() and os.environ[_yield.HEAVY_YIELD] == "0"


def test_in_a_slurm_job_the_cores_ranks_share_are_its_allocation_on_the_node(monkeypatch):
    """8 ranks in a 2-core allocation of a larger node are 4 a core: they yield, whatever the node's count;
    8 in an 8-core allocation are 1 a core: they poll. No allocation: the node's cores."""
    from hpcgpu import _yield

    for v in (_yield.HEAVY_YIELD, "MPICH_ENABLE_HEAVY_YIELD", _yield.SLURM_CPUS, *_yield.LOCAL_SIZE_VARS):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setenv("MPI_LOCALNRANKS", "8")
    assert _yield.node_cores() == 64 and not _yield.when_oversubscribed()
    monkeypatch.setenv(_yield.SLURM_CPUS, "8")
    assert _yield.node_cores() == 8 and not _yield.when_oversubscribed()
    monkeypatch.setenv(_yield.SLURM_CPUS, "2")
    assert _yield.node_cores() == 2 and _yield.when_oversubscribed() and os.environ[_yield.HEAVY_YIELD] == "1"
    for bad in ("", "0", "two"):  # not Slurm's: the node's count
        monkeypatch.setenv(_yield.SLURM_CPUS, bad)
        assert _yield.node_cores() == 64


_BLAS_AT_IMPORT = ("import hpcgpu, os, sys; from threadpoolctl import threadpool_info; "
                   "n = [i['num_threads'] for i in threadpool_info() if i['internal_api'] == 'openblas']; "
                   "sys.stdout.write(f\"{n} {os.environ.get('OPENBLAS_NUM_THREADS', '-')}\\n\")")


@pytest.mark.parametrize("local, user", [(2, None), (1, None), (None, None), (2, "2")])
def test_openblas_starts_with_the_ranks_share_of_the_cores(local, user):
    """NumPy's import under ``import hpcgpu`` starts OpenBLAS with the share hpcgpu.init gives a rank (one thread
    of two cores for two ranks), not a thread a core; a user's variable, or no launcher's count, leaves it alone;
    the variable is gone once NumPy has loaded."""
    import subprocess
    import sys

    from hpcgpu import _yield

    env = {k: v for k, v in os.environ.items() if k not in _yield.THREAD_VARS + _yield.LOCAL_SIZE_VARS}
    if local is not None:
        env["MPI_LOCALNRANKS"] = str(local)
    if user is not None:
        env["OMP_NUM_THREADS"] = user
    env["HPCGPU_DEVICE"] = "cpu"
    p = subprocess.run([sys.executable, "-c", _BLAS_AT_IMPORT], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    threads, var = p.stdout.rsplit(" ", 1)
    if threads == "[]":
        pytest.skip("NumPy's BLAS is not OpenBLAS")
    mine, total = len(os.sched_getaffinity(0)), os.cpu_count() or 1  # a rank bound to fewer cores gets its set
    # OpenBLAS itself starts no more threads than the CPUs it may run on, whatever a variable asks
    want = min(int(user), mine) if user else mine if local is None or mine < total else max(1, total // local)
    assert (threads, var.strip()) == (f"[{want}]", "-"), p.stdout


_UCX_AT_LOAD = """
import os, sys
import hpcgpu
import mpi4py  # appends mpi4py's own finder, which loads the MPI library
seen = []
class Spy:  # placed after hpcgpu's finder and before mpi4py's: what the library's load sees
    @staticmethod
    def find_spec(name, path, target=None):
        if name == "mpi4py.MPI":
            seen.append(os.environ.get("UCX_MEM_EVENTS", "-"))
        return None
sys.meta_path.insert(1 if sys.meta_path[0].__module__ == "hpcgpu._yield" else 0, Spy)
from mpi4py import MPI
sys.stdout.write(f"{seen} {os.environ.get('UCX_MEM_EVENTS', '-')} {MPI.COMM_WORLD.Get_size()}\\n")
"""


@pytest.mark.parametrize("user", [None, "yes"])
def test_a_singleton_loads_mpi_without_ucxs_memory_hooks(user):
    """A process no launcher started has no peer whose registrations UCX's memory hooks would keep (their install
    took 42 ms of its start): the MPI library's load sees UCX_MEM_EVENTS=no, and the variable is gone after it;
    a user's value is left as it is."""
    import subprocess
    import sys

    from hpcgpu import _yield

    env = {k: v for k, v in os.environ.items() if k not in _yield.LAUNCHER_VARS + (_yield.UCX_MEM_EVENTS,)}
    if user is not None:
        env[_yield.UCX_MEM_EVENTS] = user
    env["HPCGPU_DEVICE"] = "cpu"
    p = subprocess.run([sys.executable, "-c", _UCX_AT_LOAD], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == (["['no']", "-", "1"] if user is None else [f"['{user}']", user, "1"]), p.stdout


@pytest.mark.mpi
def test_a_launched_rank_keeps_ucxs_memory_hooks():
    """Under a launcher the ranks have peers: the library loads with UCX's defaults (hooks on)."""
    p = _mpi.run(2, ["-c", _UCX_AT_LOAD], env={"UCX_MEM_EVENTS": None}, timeout=90, fork=False)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.split("\n"))[-2:] == ["['-'] - 2"] * 2, p.stdout


@pytest.mark.mpi
def test_ranks_past_two_a_core_start_with_mpichs_heavy_yield():
    n = 2 * (os.cpu_count() or 1) + 1
    code = "import hpcgpu, os, sys; sys.stdout.write(os.environ.get('MPIR_CVAR_ENABLE_HEAVY_YIELD', '-') + '\\n')"
    p = _mpi.run(n, ["-c", code], env={"MPIR_CVAR_ENABLE_HEAVY_YIELD": None}, timeout=90)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1"] * n, p.stdout


_ENDINGS = r'''
import os, signal, sys, threading, time
import h5py
from mpi4py import MPI
# Open MPI's launcher sends SIGTERM to the other rank when one exits non-zero ("code", "message"), then SIGKILL a
# while later: under load it can hit a rank still closing its HDF5 file at exit, whichever way the rank started.
# Each rank's own end is the subject: that SIGTERM is ignored, both ways.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
how, out = sys.argv[1], sys.argv[2]
rank = MPI.COMM_WORLD.rank
f = h5py.File(f"{out}.{rank}.h5", "w")  # never closed: HDF5 closes it at exit
f["x"] = [rank, 1, 2]
log = open(f"{out}.{rank}.txt", "w")  # never closed either: only Python's finalization flushes it
log.write("kept")
sys.stdout.write(f"rank {rank} without a newline")
threading.Thread(target=lambda: (time.sleep(0.3), open(f"{out}.{rank}.thread", "w").close())).start()
if how == "message":  # one rank's line (two ranks' could interleave: Python writes the line, then its newline)
    sys.exit(f"rank {rank} stops here" if rank else 1)
if how == "code":
    sys.exit(3)
'''


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["end", "code", "message"])
def test_a_rank_from_the_fork_server_ends_as_a_process_of_its_own(tmp_path, how):
    """The suite's fork server ends a rank without Python's finalization (tests/_forkserver.py ``_exit``): its
    exit code, streams, unclosed HDF5 and text files and non-daemon threads come out as from ``python`` itself."""
    script = tmp_path / "end.py"
    script.write_text(_ENDINGS)
    seen = {}
    for fork in (True, False):
        out = tmp_path / f"fork{fork}"
        p = _mpi.run(2, [str(script), how, str(out)], timeout=90, fork=fork)
        files = {}
        for r in range(2):
            with h5py.File(f"{out}.{r}.h5", "r") as f:
                files[r] = (f["x"][()].tolist(), open(f"{out}.{r}.txt").read(),
                            os.path.exists(f"{out}.{r}.thread"))
        seen[fork] = (p.returncode, sorted(p.stdout.replace("newline", "newline\n").split("\n")),
                      sorted(p.stderr.splitlines()), files)
    assert seen[True] == seen[False], seen
    code, _, err, files = seen[True]
    assert code == {"end": 0, "code": 3, "message": 1}[how]
    assert files == {r: ([r, 1, 2], "kept", True) for r in range(2)}
    assert err == (["rank 1 stops here"] if how == "message" else []), err


def _caught(pid, sig):
    """Whether process ``pid`` has a handler for ``sig`` (its ``SigCgt`` mask in /proc)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask >> (sig - 1) & 1)


def test_a_signal_to_a_fork_server_rank_whose_rank_has_ended_changes_nothing(tmp_path):
    """A launcher may signal a rank's process (``tests/_rank.py``) after the rank has ended: Open MPI ends the
    others when one exits non-zero. Forwarding it to the rank's pid, gone by then, must not make that process end
    in a traceback or with another code: it ends as the rank did, as ``python`` would have."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid with no process: the rank the server has reaped
    path = str(tmp_path / "server")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    rank = subprocess.Popen([sys.executable, "-I", "-S", os.path.join(os.path.dirname(__file__), "_rank.py"),
                             "-c", "pass"], env={**os.environ, "HPCGPU_TEST_FORKSERVER": path},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        server.settimeout(30)
        conn, _ = server.accept()
        size, fds, _, _ = conn.recvmsg(4, socket.CMSG_LEN(64))
        for _, _, data in fds:  # its standard streams: held here, they would keep its pipes open
            for fd in array.array("i", data):
                os.close(fd)
        want = int.from_bytes(size, "big")
        while want:  # the job itself, unread
            want -= len(conn.recv(want))
        conn.sendall(f"pid {gone.pid}\n".encode())
        deadline = time.monotonic() + 30
        while not _caught(rank.pid, signal.SIGTERM):  # its handlers are in: it waits for the rank's end
            assert time.monotonic() < deadline and rank.poll() is None, rank.communicate()
            time.sleep(0.01)
        rank.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        try:
            conn.sendall(b"exit 3\n")
        except BrokenPipeError:  # it has ended already: the assert below says how
            pass
        out, err = rank.communicate(timeout=30)
    finally:
        rank.kill()
        server.close()
    assert (rank.returncode, out, err) == (3, b"", b""), (rank.returncode, err.decode())


_WHERE_A_BIG_ARRAY_LIVES = """
import sys
import numpy as np
import hpcgpu
rt = hpcgpu.init("cpu")
a = np.ones(8 << 20)  # 64 MiB: above glibc's largest dynamic mmap threshold (32 MiB)
addr, where = a.ctypes.data, "?"
with open("/proc/self/maps") as f:
    for line in f:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= addr < hi:
            where = "heap" if line.rstrip().endswith("[heap]") else "mapped"
sys.stdout.write(f"{rt.rank} {where} {rt.host_heap}\\n")
"""


@pytest.mark.mpi
@pytest.mark.parametrize("setting, where, said", [
    ({}, "heap", "kept"),
    ({"HPCGPU_KEEP_HOST_MEMORY": "0"}, "mapped", "glibc's defaults (HPCGPU_KEEP_HOST_MEMORY=0)"),
    ({"MALLOC_MMAP_THRESHOLD_": "1048576"}, "mapped", "as the site set it (MALLOC_MMAP_THRESHOLD_)"),
])
def test_init_keeps_freed_host_memory_in_the_rank_unless_told_otherwise(setting, where, said):
    """By default a large array comes from glibc's heap (kept after a free, so the next one is not page-faulted in
    afresh: hpcgpu._heap); HPCGPU_KEEP_HOST_MEMORY=0 and a site's own MALLOC_ variable leave glibc's defaults, a
    block of its own mapped for it. Every rank, every MPI (its library may bring its own allocator)."""
    env = {"HPCGPU_KEEP_HOST_MEMORY": None, "MALLOC_MMAP_THRESHOLD_": None, **setting}
    p = _mpi.run(2, ["-c", _WHERE_A_BIG_ARRAY_LIVES], env=env, timeout=90)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == [f"{r} {where} {said}" for r in range(2)], p.stdout


def test_a_keep_host_memory_that_is_no_switch_is_refused_in_one_line(monkeypatch):
    from hpcgpu import _options

    monkeypatch.setenv("HPCGPU_KEEP_HOST_MEMORY", "maybe")
    assert str(_options.error()) == ("HPCGPU_KEEP_HOST_MEMORY must be 0 or 1 (or no/yes, false/true, off/on), got "
                                     "'maybe'")
