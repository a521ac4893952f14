"""Shared fixtures of the device-path tests: the CuPy stand-in, in this process or under mpiexec."""

import importlib
import sys

import pytest

import _mpi

from _standin_env import ENV, STANDIN

LEAN_KEEP = ("test_nccl.py::", "test_collectives_on_device_arrays", "test_summa_on_device_every_grid_and_dtype",
             "test_tensor_parallel_and_zero_on_device_match_the_cpu_run")
"""Under HPCGPU_CI_LEAN (CI's stacks after MPICH's full pass) the device tests whose subject is the MPI run: NCCL's
bootstrap over the MPI, device buffers handed to it or staged for it (collectives, SUMMA's panels, the tensor
and ZeRO groups). The trainer, CUDA graphs, the GPU kit and the stand-in itself are the same under every MPI."""


def pytest_collection_modifyitems(config, items):
    if not _mpi.LEAN:
        return
    skip = pytest.mark.skip(reason="HPCGPU_CI_LEAN: not the MPI's part; MPICH's full pass runs it")
    for item in items:
        if item.nodeid.startswith("tests/device/") and not any(k in item.nodeid for k in LEAN_KEEP):
            item.add_marker(skip)


def _cupy_modules():
    return [m for m in sys.modules if m == "cupy" or m.startswith("cupy.")]


@pytest.fixture(scope="session")
def _bytecode(tmp_path_factory):
    return str(tmp_path_factory.mktemp("standin-pycache"))


@pytest.fixture
def load(monkeypatch, _bytecode):
    """``load(VAR=value, ...)`` imports a fresh stand-in under that environment."""
    # Compile the stand-in once per session even under PYTHONDONTWRITEBYTECODE (outside the tree).
    monkeypatch.setattr(sys, "pycache_prefix", _bytecode)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    saved_path = list(sys.path)
    saved_mods = {m: sys.modules.pop(m) for m in _cupy_modules()}
    sys.path.insert(0, STANDIN)
    for var in ENV:
        monkeypatch.delenv(var, raising=False)

    def _load(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, str(v))
        for m in _cupy_modules():
            del sys.modules[m]
        return importlib.import_module("cupy")

    yield _load
    for m in _cupy_modules():
        del sys.modules[m]
    sys.path[:] = saved_path
    sys.modules.update(saved_mods)


@pytest.fixture
def cp(load):
    return load()
