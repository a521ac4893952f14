"""Start MPI ranks from a test, always with a timeout."""

from __future__ import annotations

import os
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


def run(nprocs: int, args, timeout: float = 120, cwd=None, env=None, check=False) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n nprocs python ARGS``; fail the test after ``timeout`` seconds."""
    e = dict(os.environ)
    e.setdefault("PYTHONUNBUFFERED", "1")
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    for k, v in (env or {}).items():  # None removes a variable
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    cmd = [mpiexec(), "-n", str(nprocs), sys.executable, *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=e)
    except subprocess.TimeoutExpired as t:
        pytest.fail(f"{' '.join(cmd)} still running after {timeout} s (hang?)\n"
                    f"stdout:\n{t.stdout}\nstderr:\n{t.stderr}")
    if check and p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def script(nprocs: int, name: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``tests/mpi/NAME`` on ``nprocs`` ranks; it must exit 0."""
    return run(nprocs, [os.path.join(SCRIPTS, name), *map(str, args)], timeout=timeout, check=True)
