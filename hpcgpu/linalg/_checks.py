"""The checks every routine of :mod:`hpcgpu.linalg` makes at its entry, before any work.

Its arguments agreed across the ranks, its matrices' kinds, shapes and grids, the values finite, the memory there.

Each check returns a refusal (an exception, not raised) or ``None``, so that a routine gathers this rank's first
refusal and hands it to :func:`entry` (one ``agree_inputs`` collective) or :func:`finite` (one ``agree``): no rank
raises while the others wait.
"""

from __future__ import annotations

import numpy as np

from .. import _device
from .._memory import node_memory_error
from ..errors import agree, agree_inputs
from .cyclic import nb_error  # noqa: F401 - the routines' checks, here with the others
from .grid import grid_error  # noqa: F401

SOLVER_DTYPES = ("float32", "float64", "complex64", "complex128")
"""The dtypes the factorizations and solvers take (LAPACK's and cuSOLVER's: S, D, C, Z)."""


def matrix_error(where: str, name: str, a, *, square: bool = False, cyclic: bool = False) -> BaseException | None:
    """``a`` is no DistMatrix (nor a CyclicMatrix, where ``cyclic``), has another dtype, or is not square.

    ``cyclic``: the routine takes a CyclicMatrix too (it factors one where it lies). ``square``: ``a`` must be.
    """
    from .distmatrix import CyclicMatrix, DistMatrix

    if isinstance(a, CyclicMatrix) and not cyclic:
        return TypeError(f"{where}: {name} must be an hpcgpu.DistMatrix, got a CyclicMatrix (only the "
                         f"factorizations and solve take one): {name.lower()}.to_distmatrix()")
    if not isinstance(a, (DistMatrix, CyclicMatrix)):
        if cyclic:
            return TypeError(f"{where}: {name} must be an hpcgpu.DistMatrix or CyclicMatrix, got {type(a).__name__}")
        return TypeError(f"{where}: {name} must be an hpcgpu.DistMatrix, got {type(a).__name__}")
    if a.dtype.name not in SOLVER_DTYPES:
        return TypeError(f"{where}: {name} is {a.dtype.name}; the solvers take {', '.join(SOLVER_DTYPES)} "
                         f"(a.astype(\"float64\"))")
    if square and a.gshape[0] != a.gshape[1]:
        return ValueError(f"{where}: {name} must be square, got {a.gshape[0]} x {a.gshape[1]}")
    return None


def conform_error(where: str, a, b, *, rows: bool = True) -> BaseException | None:
    """``b`` (the right-hand side) does not go with ``a``: another grid, dtype or number of rows."""
    if not a.grid.same_as(b.grid):
        return ValueError(f"{where}: A and B are on different grids ({a.grid.shape[0]}x{a.grid.shape[1]} and "
                          f"{b.grid.shape[0]}x{b.grid.shape[1]}): b.redistribute(a.grid)")
    if a.dtype != b.dtype:
        return TypeError(f"{where}: A is {a.dtype.name} and B is {b.dtype.name}: give both one dtype "
                         f"(b.astype(a.dtype))")
    if rows and a.gshape[0] != b.gshape[0]:
        return ValueError(f"{where}: shapes do not conform: A is {a.gshape[0]} x {a.gshape[1]}, B has "
                          f"{b.gshape[0]} rows (A's {a.gshape[0]} needed)")
    return None


def layout_nb_error(where: str, a, nb, grid=None) -> BaseException | None:
    """``nb`` (or ``grid``) given for a CyclicMatrix ``a`` and not its own: it is factored in its own layout."""
    from .distmatrix import CyclicMatrix

    if not isinstance(a, CyclicMatrix):
        return None
    if nb is not None and nb != a.nb:
        return ValueError(f"{where}: nb={nb} but A is block-cyclic with nb {a.nb}: leave nb out (A is factored in "
                          "its own layout), or make A with a.to_distmatrix().to_cyclic(nb)")
    if grid is not None and grid.shape != a.grid.shape:
        return ValueError(f"{where}: grid {grid.shape[0]}x{grid.shape[1]} but A is block-cyclic on grid "
                          f"{a.grid.shape[0]}x{a.grid.shape[1]}: leave grid out (A is factored in its own layout), "
                          "or make A with a.to_distmatrix().to_cyclic(grid=grid)")
    return None


def memory_error(where: str, nbytes: int, comm, xp=np) -> BaseException | None:
    """Whether this rank can allocate ``nbytes`` more for a routine's work.

    Its copies of the blocks, panels, workspace: on the host, the node's free memory shared by its ranks
    (collective over ``comm``); on a GPU, the device's free memory (this rank's own answer). The caller agrees on
    the answer (:func:`entry`).
    """
    fix = "use more ranks or nodes, or a smaller problem"
    if xp is not np:
        free = int(xp.cuda.Device().mem_info[0])
        if nbytes <= free:
            return None
        gib = 2.0**30
        return MemoryError(f"{where}: needs {nbytes / gib:.1f} GiB of device memory a rank, more than its GPU "
                           f"has free ({free / gib:.1f} GiB): {fix}")
    return node_memory_error(int(nbytes), comm, where, fix)


def entry(where: str, args: dict, comm, error: BaseException | None) -> None:
    """Agree on the arguments and on every rank's first refusal: one collective (``agree_inputs``)."""
    agree_inputs(where, args, comm=comm, error=error)


def finite(where: str, mats: dict, comm) -> None:
    """Refuse NaN or inf in any of ``mats`` (``{name: DistMatrix}``) on every rank.

    The message names the matrix and the first such element's global position: one ``agree`` collective after a
    local scan of each block. The scan is a sum first (one read, no temporary: NaN and inf reach it), and the
    element-wise test only where the sum is not finite (a bad element, or a sum of finite values that overflowed):
    the test's two mask arrays and their first-touched pages cost 15-25 ms a 64 MB block, the sum 5.
    """
    err = None
    for name, a in mats.items():
        if a is None or a.local.size == 0:
            continue
        # One device-to-host copy of a flag, then of the first bad element's index: explicit (_device.asnumpy)
        if _device.asnumpy(a.xp.isfinite(a.local.sum())):
            continue
        bad = ~a.xp.isfinite(a.local)
        if _device.asnumpy(bad.any()):
            first = int(_device.asnumpy(a.xp.argmax(bad.ravel())))
            i, j = (int(v) for v in np.unravel_index(first, a.local.shape))
            i, j = _global_position(a, i, j)
            err = ValueError(f"{where}: {name} holds NaN or inf (at row {i}, column {j}): the solvers need finite "
                             "values")
            break
    agree(err, comm=comm)


def _global_position(a, i: int, j: int) -> tuple[int, int]:
    """The global row and column of ``a.local[i, j]``: a DistMatrix's block or a CyclicMatrix's layout."""
    from .distmatrix import CyclicMatrix

    if isinstance(a, CyclicMatrix):
        return int(a.layout.rows()[i]), int(a.layout.cols()[j])
    return a.rows.start + i, a.cols.start + j
