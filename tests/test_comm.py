import numpy as np
import pytest

import _mpi
import hpcgpu

pytestmark = pytest.mark.device  # every test here reaches the device path


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
def test_half_precision_reduces_in_float32_and_moves_as_bits():
    """16-bit floats move as uint16 bit patterns (Open MPI 4 has no float16 datatype, no MPI has bfloat16),
    but a reduction must see the values: summing bit patterns would be silently wrong. It sums in float32,
    so 2048 + 1 + 1 over three ranks is 2050 (a float16 running sum can stall at 2048; bfloat16: 256 + 1 + 1)."""
    code = ("import numpy as np, ml_dtypes, hpcgpu\n"
            "rt = hpcgpu.init('cpu')\n"
            "for t in (np.float16, ml_dtypes.bfloat16):\n"
            "    big = 2048.0 if t is np.float16 else 256.0\n"
            "    x = np.array([1.5, big if rt.rank == 0 else 1.0], t)\n"
            "    hpcgpu.Allreduce(x)\n"
            "    r = np.empty_like(x)\n"
            "    hpcgpu.Allreduce(np.ones(2, t), r)\n"
            "    y = np.full(4, rt.rank + 0.5, t)\n"
            "    hpcgpu.Bcast(y, root=1)\n"
            "    want = np.array([1.5 * rt.size, big + rt.size - 1], np.float32).astype(t)\n"
            "    assert x.dtype == t and (x == want).all() and (r == rt.size).all() and (y == 1.5).all(), (x, r, y)\n"
            "print('ok', flush=True)\n")
    p = _mpi.run(3, ["-c", code], timeout=60)
    assert p.returncode == 0 and p.stdout.count("ok") == 3, p.stderr
