import numpy as np
import pytest

import _mpi
import hpcgpu


def test_single_rank_collectives_are_identities():
    hpcgpu.init("cpu")
    a = np.arange(6.0)
    assert hpcgpu.Allreduce(a) is a
    np.testing.assert_array_equal(a, np.arange(6.0))
    np.testing.assert_array_equal(hpcgpu.Bcast(a.copy()), a)
    hpcgpu.agree(None)
    with pytest.raises(KeyError) as e:
        hpcgpu.agree(KeyError("x"))
    assert isinstance(e.value, hpcgpu.AgreedError)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_collectives_at_n_ranks(nprocs):
    p = _mpi.script(nprocs, "comm_checks.py", timeout=60)
    assert "comm checks: ok" in p.stdout


@pytest.mark.mpi
def test_float16_reduces_as_float16_and_moves_as_bits():
    """float16 is moved as uint16 bit patterns (Open MPI 4 has no float16 datatype), but a reduction must
    keep the real type: summing bit patterns would be silently wrong."""
    code = ("import numpy as np, hpcgpu\n"
            "rt = hpcgpu.init('cpu')\n"
            "x = np.full(4, 1.5, np.float16)\n"
            "hpcgpu.Allreduce(x)\n"
            "y = np.full(4, rt.rank + 0.5, np.float16)\n"
            "hpcgpu.Bcast(y, root=1)\n"
            "assert (x == 1.5 * rt.size).all() and (y == 1.5).all(), (x, y)\n"
            "print('ok', flush=True)\n")
    p = _mpi.run(3, ["-c", code], timeout=60)
    assert p.returncode == 0 and p.stdout.count("ok") == 3, p.stderr
