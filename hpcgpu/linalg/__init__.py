"""Distributed dense linear algebra: grids, layouts, DistMatrix, SUMMA, factorizations and solvers.

The process grid, the matrices' layouts, :class:`DistMatrix`, SUMMA (:func:`matmul`, PDGEMM's interface) and the
factorizations and solvers built on them.

Modules: :mod:`hpcgpu.linalg.grid` (2-D process grids), :mod:`hpcgpu.linalg.blocks` (moving a matrix between block
layouts), :mod:`hpcgpu.linalg.distmatrix` (the distributed matrix), :mod:`hpcgpu.linalg.summa` (SUMMA and 2.5-D).
``hpcgpu.matmul``, ``hpcgpu.DistMatrix`` and ``hpcgpu.ProcessGrid`` are these same objects, and the modules' former
names (``hpcgpu.grid``, ``hpcgpu.blocks``, ``hpcgpu.distmatrix``, ``hpcgpu.summa``) are these same modules.

Every name loads on first use (PEP 562), as the top-level package's do.
"""

from __future__ import annotations

_LAZY = {
    "ProcessGrid": ("grid", "ProcessGrid"), "default_grid": ("grid", "default_grid"),
    "parse_grid": ("grid", "parse_grid"),
    "DistMatrix": ("distmatrix", "DistMatrix"),
    "DistVector": ("distmatrix", "DistVector"),
    "CyclicMatrix": ("distmatrix", "CyclicMatrix"),
    "norm": ("distmatrix", "norm"),
    "matmul": ("summa", "matmul"), "pdgemm": ("summa", "matmul"),
    "solve_triangular": ("triangular", "solve_triangular"), "pdtrsm": ("triangular", "solve_triangular"),
    "cholesky": ("chol", "cholesky"), "pdpotrf": ("chol", "cholesky"),
    "cho_factor": ("chol", "cho_factor"), "cho_solve": ("chol", "cho_solve"),
    "pdpotrs": ("chol", "cho_solve"), "CholeskyFactor": ("chol", "CholeskyFactor"),
    "qr": ("tsqr", "qr"), "pdgeqrf": ("tsqr", "qr"), "lstsq": ("tsqr", "lstsq"), "pdgels": ("tsqr", "lstsq"),
    "svd": ("tsqr", "svd"),
    "LUFactor": ("lu", "LUFactor"),
    "lu_factor": ("lu", "lu_factor"), "pdgetrf": ("lu", "lu_factor"),
    "lu_solve": ("lu", "lu_solve"), "pdgetrs": ("lu", "lu_solve"),
    "solve": ("solvers", "solve"), "pdgesv": ("solvers", "solve"), "pdposv": ("solvers", "pdposv"),
}
"""Public name -> (module of this package, attribute)."""

__all__ = list(_LAZY)


def __getattr__(name: str):
    """The package's names and submodules, imported on first use."""
    import importlib

    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'hpcgpu.linalg' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'hpcgpu.linalg' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

