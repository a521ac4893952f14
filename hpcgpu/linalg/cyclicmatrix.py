"""A distributed matrix kept in the 2-D block-cyclic layout: the factorizations' own, so that they move nothing.

:func:`~hpcgpu.linalg.cholesky`, :func:`~hpcgpu.linalg.lu_factor` and :func:`~hpcgpu.linalg.solve` of a
:class:`~hpcgpu.DistMatrix` move it into the block-cyclic layout and their results back (one ``Alltoallv`` each
way, about a tenth of a Cholesky factorization of order 4096 at 4 ranks here). A science code that factors the
same matrix, or one updated in place, again and again moves it once (``DistMatrix.to_cyclic``) and keeps it
so: given a :class:`CyclicMatrix`, those routines factor its blocks where they are (a copy on each rank, as
ScaLAPACK's PDPOTRF and PDGETRF factor their array in place) and return a result in its layout.
"""

from __future__ import annotations

import numpy as np

from .. import _device
from ..errors import agreed
from .cyclic import Cyclic, from_cyclic
from .distmatrix import _dtype_error, _Elementwise

__all__ = ["CyclicMatrix"]


class CyclicMatrix(_Elementwise):
    """A global ``m x n`` matrix in the 2-D block-cyclic layout of a process grid (ScaLAPACK's).

    Blocks of ``nb x nb`` are dealt round-robin over the ``pr x pc`` grid, the first on grid position ``(0, 0)``
    (ScaLAPACK's descriptor with ``MB = NB = nb``, ``RSRC = CSRC = 0``): global row ``i`` lives on grid row
    ``(i // nb) % pr`` at local row ``(i // (nb pr)) nb + i % nb``, columns likewise over the grid's columns
    (``hpcgpu.linalg.cyclic.Cyclic``). Made by ``DistMatrix.to_cyclic`` (collective) or from each
    rank's blocks (this constructor: local, no communication). Given to :func:`~hpcgpu.linalg.cholesky`,
    :func:`~hpcgpu.linalg.cho_factor`, :func:`~hpcgpu.linalg.lu_factor` or :func:`~hpcgpu.linalg.solve`, it is
    factored where it lies, with its own ``nb`` (and on its own grid): no move in, and ``cholesky`` returns the
    factor in this layout.

    Parameters
    ----------
    local : xp.ndarray, shape ``(numroc(m, nb, row, pr), numroc(n, nb, col, pc))``
        This rank's blocks, its rows and columns in ascending global order; host (NumPy) or device (CuPy); any
        strides (a padded row stride, as ``DistMatrix.to_cyclic`` gives, is kept).
    gshape : (int, int)
        Global shape ``(m, n)``.
    grid : ProcessGrid
    nb : int
        Block size, >= 1.

    Attributes
    ----------
    local : xp.ndarray
    layout : Cyclic
        Where every element lives (global indices of this rank's rows and columns: ``layout.rows()``,
        ``layout.cols()``).
    gshape, lshape : (int, int)
        Global shape and this rank's local shape.
    grid : ProcessGrid
    nb : int
    dtype : numpy.dtype
        One of :data:`hpcgpu.linalg.distmatrix.DTYPES`.
    xp : module
        ``numpy`` or ``cupy``, after where ``local`` lives.
    shape, ndim, size
        NumPy's names: ``shape`` is :attr:`gshape`, ``ndim`` 2, ``size`` ``m * n``.

    Raises
    ------
    ValueError
        ``local`` does not have this rank's shape in the layout, ``nb < 1``, or an unsupported dtype (on this rank:
        the constructor is local).

    Notes
    -----
    Local, no communication: the arithmetic of :class:`~hpcgpu.DistMatrix` (``+``, ``-``, ``*``, ``/`` with a
    scalar or elementwise with a matrix of the same layout, ``abs``, :meth:`conj`, :attr:`real`, :attr:`imag`,
    :meth:`astype`, :meth:`copy`). Collective over ``grid.cart``: :meth:`to_distmatrix`, :meth:`gather` and the
    routines above. Anything else of a DistMatrix (``matmul``, norms, HDF5) takes :meth:`to_distmatrix`'s result.

    Examples
    --------
    >>> c = a.to_cyclic()                                  # doctest: +SKIP
    >>> for shift in shifts:                               # doctest: +SKIP
    ...     f = hpcgpu.linalg.cho_factor(c + shift * eye)  # no move: eye = identity.to_cyclic(nb=c.nb)
    """

    ndim = 2
    """Always 2."""

    def __init__(self, local, gshape, grid, nb: int):
        if isinstance(nb, bool) or not isinstance(nb, (int, np.integer)) or nb < 1:
            raise ValueError(f"CyclicMatrix: nb must be an int >= 1, got {nb!r}")
        self.layout = Cyclic(gshape, grid, int(nb))
        self.gshape = (self.layout.m, self.layout.n)
        self.grid, self.nb = grid, self.layout.nb
        if tuple(local.shape) != self.layout.lshape:
            raise ValueError(f"CyclicMatrix: local blocks have shape {tuple(local.shape)}, expected "
                             f"{self.layout.lshape} for {self.gshape} on grid {grid.shape} with nb {self.nb}")
        err = _dtype_error(local.dtype, "CyclicMatrix")
        if err:
            raise err
        self.local = local
        self.dtype = np.dtype(local.dtype)
        self.xp = _device.cupy_or_none() if _device.is_device_array(local) else np

    @property
    def lshape(self) -> tuple[int, int]:
        """This rank's local shape (local)."""
        return self.layout.lshape

    @property
    def lnbytes(self) -> int:
        """Bytes of this rank's blocks (local)."""
        return self.lshape[0] * self.lshape[1] * self.dtype.itemsize

    @property
    def shape(self) -> tuple[int, int]:
        """The global shape ``(m, n)``."""
        return self.gshape

    @property
    def size(self) -> int:
        """The global number of elements ``m * n``."""
        return self.gshape[0] * self.gshape[1]

    def describe(self) -> str:
        """``"100 x 100 float64 block-cyclic nb 8 on grid 2x2"``: what every rank's part shares. Not collective."""
        return (f"{self.gshape[0]} x {self.gshape[1]} {self.dtype} block-cyclic nb {self.nb} on grid "
                f"{self.grid.shape[0]}x{self.grid.shape[1]}")

    def __repr__(self) -> str:
        return (f"CyclicMatrix(gshape={self.gshape}, dtype={self.dtype}, grid={self.grid.shape}, nb={self.nb}, "
                f"lshape={self.lshape}, xp={self.xp.__name__})")

    def _like(self, local):
        """A matrix of this one's layout with blocks ``local``."""
        return CyclicMatrix(local, self.gshape, self.grid, self.nb)

    def _fits(self, other) -> bool:
        """Whether ``other`` is laid out as this matrix: same global shape, grid and ``nb``."""
        return (isinstance(other, CyclicMatrix) and other.gshape == self.gshape and other.nb == self.nb
                and self.grid.same_as(other.grid))

    def to_distmatrix(self):
        """This matrix in the block layout of its grid, as a :class:`~hpcgpu.DistMatrix`.

        Collective over ``grid.cart``: one ``Alltoallv`` (a copy on one rank).

        Returns
        -------
        DistMatrix
            Global ``(m, n)``, on :attr:`grid`, this matrix's dtype and side.
        """
        return from_cyclic(self.local, self.layout)

    def gather(self, root: int = 0):
        """The whole matrix on rank ``root`` (``None`` elsewhere), as ``DistMatrix.gather``.

        Collective over ``grid.cart``: :meth:`to_distmatrix`, then the DistMatrix's gather.

        Parameters
        ----------
        root : int
            The rank of ``grid.cart`` that receives it.

        Returns
        -------
        numpy.ndarray or None
            ``(m, n)`` on ``root``.
        """
        return self.to_distmatrix().gather(root)

    def __matmul__(self, other):
        """Refused (on every rank alike): SUMMA multiplies DistMatrix blocks."""
        raise agreed(TypeError("CyclicMatrix @: SUMMA multiplies DistMatrix blocks: c.to_distmatrix() @ ..."))

    __rmatmul__ = __matmul__

    @property
    def T(self):  # noqa: N802 - NumPy's name
        """Refused (on every rank alike): no transpose view is kept of a block-cyclic matrix."""
        raise agreed(TypeError("CyclicMatrix.T: a block-cyclic matrix has no transpose view: "
                               "c.to_distmatrix().T is one, and its .to_cyclic() the transpose in this layout"))

    @property
    def H(self):  # noqa: N802 - the conjugate transpose's usual name
        """Refused (on every rank alike), as :attr:`T`."""
        raise agreed(TypeError("CyclicMatrix.H: a block-cyclic matrix has no transpose view: "
                               "c.to_distmatrix().H is one, and its .to_cyclic() the transpose in this layout"))
