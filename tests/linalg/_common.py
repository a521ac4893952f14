"""What the rank programs of tests/linalg share: a global matrix distributed from rank 0, and the check of a refusal
(imported from the programs' own folder, their ``sys.path[0]`` when a rank runs them as scripts)."""

import sys
import traceback

import numpy as np

import hpcgpu
import hpcgpu.linalg.cyclic
from hpcgpu.errors import AgreedError

# What a move of one triangle does not reach is NaN: a routine that reads outside the triangle it moved, or a way
# back that does not zero it, fails its checks
hpcgpu.linalg.cyclic.UNMOVED_FILL = np.nan


def _abort(kind, value, tb):
    """An assert (or any exception) on one rank ends the launch at once: the others would wait in their next
    collective until the test's timeout (300 s) called it a hang."""
    from mpi4py import MPI  # initialized by then (hpcgpu first: it sets MPI's variables before MPI_Init)

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
