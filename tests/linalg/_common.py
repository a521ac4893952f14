"""What the rank programs of tests/linalg share: a global matrix distributed from rank 0, and the check of a refusal
(imported from the programs' own folder, their ``sys.path[0]`` when a rank runs them as scripts)."""

import sys
import traceback

from mpi4py import MPI

import hpcgpu
from hpcgpu.errors import AgreedError


def _abort(kind, value, tb):
    """An assert (or any exception) on one rank ends the launch at once: the others would wait in their next
    collective until the test's timeout (300 s) called it a hang."""
    traceback.print_exception(kind, value, tb)
    sys.stderr.flush()
    MPI.COMM_WORLD.Abort(1)


sys.excepthook = _abort  # on import: every rank program that imports this module


def dist(g, grid):
    """The global NumPy matrix ``g`` (read on the grid's rank 0 only) as a DistMatrix on ``grid``."""
    return hpcgpu.DistMatrix.from_global(g if grid.cart.Get_rank() == 0 else None, grid)


def refused(fn, kind, message):
    """``fn()`` raises ``kind``, agreed (an AgreedError), with exactly ``message``, on this rank: 1 (a refusal
    checked); anything else fails the launch."""
    try:
        fn()
    except AgreedError as e:
        assert isinstance(e, kind) and str(e) == message, (type(e), str(e), message)
        return 1
    raise AssertionError(f"no refusal: {message}")
