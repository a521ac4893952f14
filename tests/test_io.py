"""hpcgpu.io: provenance attributes that cannot break a write."""

import h5py
import numpy as np

from hpcgpu.io import write_attrs


def test_every_provenance_value_can_be_written(tmp_path):
    """Open MPI's version string ends with a NUL byte: HDF5 refuses it in a string; the result file must not."""
    attrs = dict(mpi_library="Open MPI v5.0.11, package: Open MPI\x00", raw=b"Open MPI v4.1.4\x00", none=None,
                 world_size=3, grid=np.array([2, 3]), config='{"lr": 0.1}', odd=object())
    with h5py.File(tmp_path / "a.h5", "w") as f:
        write_attrs(f, attrs)
    with h5py.File(tmp_path / "a.h5") as f:
        assert f.attrs["mpi_library"] == "Open MPI v5.0.11, package: Open MPI"
        assert f.attrs["raw"] == "Open MPI v4.1.4" and f.attrs["none"] == "" and f.attrs["world_size"] == 3
        assert list(f.attrs["grid"]) == [2, 3] and f.attrs["odd"].startswith("<object object")
