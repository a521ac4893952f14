"""What a distributed matrix is expected to have: NumPy's face (shape, arithmetic, promotion), transposes as views
that move nothing until their blocks are read, products that leave A where it lies, reductions, vectors, and the
refusals of what would silently go wrong."""

import os

import numpy as np
import pytest
from mpi4py import MPI

import _mpi
import hpcgpu
from hpcgpu.errors import _normal
from hpcgpu.linalg import DistMatrix, DistVector, ProcessGrid
from hpcgpu.linalg.summa import variant, variant_traffic

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch(nprocs, device="cpu"):
    p = _mpi.run(nprocs, [os.path.join(HERE, "arithmetic_checks.py"), device], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    words = p.stdout.split()
    assert words[0] == "ok" and len(words) == nprocs + 2 and len(set(words[2:])) == 1 and int(words[2]) >= 60, \
        p.stdout
    assert words[1] == ("gpu" if device == "auto" and _mpi.standin() else "cpu" if device == "cpu" else words[1])


@pytest.mark.mpi
@pytest.mark.host  # --device cpu: its device-path twin below is marked device
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2, 3, 4], [1, 3, 4]))
def test_every_operation_against_numpy_on_every_grid(nprocs):
    """Elementwise, views, reductions, vectors and products at 1-4 ranks on 1xP, Px1 and 2x2; bytes of a view's
    product; the refusals' exact messages (tests/linalg/arithmetic_checks.py)."""
    _launch(nprocs)


@pytest.mark.device
@pytest.mark.mpi
def test_every_operation_on_the_device_path():
    """The same checks with the runtime's device (the stand-in's, in its pass): blocks on the device."""
    _launch(2, "auto")


@pytest.fixture
def one_rank():
    hpcgpu.init("cpu")
    g = ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    yield g
    g.free()


def test_numpy_never_makes_an_object_array_of_a_matrix(one_rank):
    a = DistMatrix.random((3, 4), one_rank, seed=1)
    with pytest.raises(TypeError) as e:
        np.asarray(a)
    assert str(e.value) == ("np.asarray of a DistMatrix: it is distributed; .gather() (collective) gives the whole "
                            "of it on rank 0, .local this rank's block")
    assert isinstance(e.value, hpcgpu.AgreedError)
    with pytest.raises(TypeError, match="does not support ufuncs"):
        np.add(a, 1)
    b = np.float32(2) * a  # NumPy's scalar defers to the matrix: NumPy's promotion, float64 kept
    assert isinstance(b, DistMatrix) and b.dtype == np.float64
    np.testing.assert_array_equal(b.local, 2 * a.local)
    assert (a.shape, a.ndim, a.size, a.dtype) == ((3, 4), 2, 12, np.float64)
    # the ranks agree on a matrix by its description, its grid included, though it has a shape as arrays do
    assert _normal(a) == _normal(a.T.T) == repr("3 x 4 float64 on grid 1x1")


def test_a_transpose_is_a_view_until_its_blocks_are_read(one_rank):
    a = DistMatrix.random((3, 4), one_rank, "complex128", seed=2)
    t = a.H
    assert t.gshape == t.shape == (4, 3) and t.lshape == (4, 3) and t._moved is None and t.H is a is a.T.T
    assert "TransposeView(H of DistMatrix(gshape=(3, 4)" in repr(t) and t._moved is None  # repr moves nothing
    np.testing.assert_array_equal(t.local, a.local.conj().T)  # read: moved once, kept
    assert t._moved is not None and t.local is t.local


def test_the_variant_chosen_is_the_one_modelled_to_move_less():
    # a matrix-vector product through a transpose moves O(n), SUMMA the matrix
    t = variant_traffic(((1000, 1000), (1000, 1)), (2, 2), "T")
    assert t["stationary-a"] < 3000 < 500_000 < t["summa"]
    assert variant(((1000, 1000), (1000, 1)), (2, 2), "T") == "stationary-a"
    assert variant(((1000, 1000), (1000, 1000)), (2, 2), "T") == "summa"  # square: SUMMA
    assert variant(((1000, 1000), (1000, 8)), (1, 1), "T") == "summa"  # one rank: one local GEMM either way


def test_a_vector_knows_its_layout(one_rank):
    x = DistVector(np.arange(5.0), 5, one_rank, "rows")
    assert (x.shape, x.ndim, x.size, x.span) == ((5,), 1, 5, slice(0, 5))
    with pytest.raises(ValueError, match="DistVector: layout must be 'rows' or 'cols', got 'diag'"):
        DistVector(np.arange(5.0), 5, one_rank, "diag")
    with pytest.raises(ValueError, match=r"local piece has shape \(4,\), expected \(5,\)"):
        DistVector(np.arange(4.0), 5, one_rank)
    with pytest.raises(ValueError) as e:
        DistVector.zeros(-1, one_rank)
    assert str(e.value) == "DistVector.zeros: n must be a length (an integer >= 0), got -1"
    z = DistVector.zeros(4, one_rank, "rows", "complex64")
    assert (z.shape, z.layout, z.dtype, z.local.tolist()) == ((4,), "rows", np.complex64, [0, 0, 0, 0])
