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
