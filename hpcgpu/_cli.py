"""The guard every hpcgpu command line runs under.

An error every rank agreed on (see :func:`hpcgpu.comm.agree`) is bad input:
rank 0 prints one line and all ranks exit with status 2. Anything else is
unexpected on one rank while the others may wait in a collective: that rank
prints ``[rank r] error: ...`` with its traceback and aborts the whole job,
so nobody burns an allocation on a hang (mpi4py's ``run.py`` does the same).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import Callable, Sequence

from mpi4py import MPI


def world_rank() -> int:
    return MPI.COMM_WORLD.Get_rank()


def abort(message: str, code: int = 1) -> None:
    """Print ``message`` on stderr, give the launcher a moment to pass it on, abort the job.

    Without the pause, mpiexec sometimes killed the job before it had
    forwarded the aborting rank's last lines: the user saw no reason at all.
    """
    sys.stderr.write(message if message.endswith("\n") else message + "\n")
    sys.stderr.flush()
    if MPI.COMM_WORLD.Get_size() > 1:
        time.sleep(0.5)
        MPI.COMM_WORLD.Abort(code)
    sys.exit(code)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, printing help and usage errors from rank 0 only.

    Every rank parses the same arguments, so every rank exits 2 together.
    """

    def _print_message(self, message, file=None):
        if world_rank() == 0:
            super()._print_message(message, file)

    def error(self, message):
        """One line, not the whole usage: a job log of P ranks stays readable."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def run(main: Callable[[Sequence[str] | None], int | None], argv=None, prog: str = "hpcgpu") -> None:
    """Call ``main(argv)`` under the guard and exit with its status."""
    try:
        rc = main(argv)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the whole point
        if getattr(exc, "collective", False):
            if world_rank() == 0 and not getattr(exc, "silent", False):
                print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
            sys.exit(2)
        tb = "".join(traceback.format_exception(exc))
        abort(f"[rank {world_rank()}] error: {type(exc).__name__}: {exc}\n{tb}")
    sys.exit(rc or 0)
