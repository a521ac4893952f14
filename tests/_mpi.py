"""Start MPI ranks from a test, always with a timeout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "mpi")


def mpiexec() -> str:
    """The launcher: $HPCGPU_MPIEXEC, the one beside this Python, or PATH's."""
    env = os.environ.get("HPCGPU_MPIEXEC")
    if env:
        return env
    here = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    found = here or shutil.which("mpiexec")
    if not found:
        pytest.fail("no mpiexec found: install the 'mpich' extra or a system MPI")
    return found


def flavor() -> str:
    """``"openmpi"``, ``"impi"`` or ``"mpich"``: the MPI that mpi4py loaded here (and so in the ranks)."""
    from mpi4py import MPI

    lib = MPI.Get_library_version().lower()
    if "open mpi" in lib:
        return "openmpi"
    if "intel" in lib:
        return "impi"
    return "mpich"


def launcher_env() -> dict:
    """What this MPI's launcher needs to start more ranks than cores, as root, on this machine.

    Open MPI refuses both unless told: ``PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe``
    (Open MPI 5, PRRTE), ``OMPI_MCA_rmaps_base_oversubscribe=1`` (Open MPI 4), and
    ``OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1``. MPICH's and Intel MPI's Hydra need nothing.
    """
    if flavor() != "openmpi":
        return {}
    e = {"PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    if os.geteuid() == 0:
        e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return e


RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
"""Where each launcher puts a rank's index: Hydra (MPICH, Intel MPI), Open MPI, PMIx."""


def environment(env=None) -> dict:
    """``os.environ`` for a test's ranks: unbuffered output, this checkout first on PYTHONPATH,
    the launcher's flags, then ``env`` (a value of None removes a variable)."""
    e = dict(os.environ)
    e.setdefault("PYTHONUNBUFFERED", "1")
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(launcher_env())
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


_RULE = "-" * 20


_RUNTIME_LINE = re.compile(r"\[[^\]]*\] PMIX ERROR: |\[warn\] Epoll ")
"""Single lines Open MPI 5's runtime writes when ranks exit at once: its PMIx server's
``PMIX_ERR_UNREACH`` and libevent's ``Epoll MOD ... Bad file descriptor`` (a race in the
launcher's teardown, seen in about one exit-2 run in ten here)."""


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


def run(nprocs: int, args, timeout: float = 120, cwd=None, env=None, check=False) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n nprocs python ARGS``; fail the test after ``timeout`` seconds.

    The result's ``stderr`` is what the ranks wrote; ``launcher_stderr`` what
    the launcher added after it (see :func:`split_launcher`).
    """
    e = environment(env)
    cmd = [mpiexec(), "-n", str(nprocs), sys.executable, *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=e)
    except subprocess.TimeoutExpired as t:
        pytest.fail(f"{' '.join(cmd)} still running after {timeout} s (hang?)\n"
                    f"stdout:\n{t.stdout}\nstderr:\n{t.stderr}")
    if check and p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    p.stderr, p.launcher_stderr = split_launcher(p.stderr)
    return p


def script(nprocs: int, name: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``tests/mpi/NAME`` on ``nprocs`` ranks; it must exit 0."""
    return run(nprocs, [os.path.join(SCRIPTS, name), *map(str, args)], timeout=timeout, check=True)
