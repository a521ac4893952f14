"""Shared fixtures of the device-path tests: the CuPy stand-in, in this process or under mpiexec."""

import importlib
import os
import sys

import pytest

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "standin")
ROOT = os.path.dirname(os.path.dirname(HERE))
ENV = ("HPCGPU_STANDIN_FAIL", "HPCGPU_STANDIN_DEVICES", "HPCGPU_STANDIN_MEMORY", "HPCGPU_STANDIN_STRICT_HOST",
       "CUDA_VISIBLE_DEVICES", "CUPY_TF32", "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM")


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


def run_standin(nprocs, args, env=None, timeout=120):
    """``mpiexec -n nprocs python ARGS`` with the stand-in as ``cupy`` (one device unless ``env`` says)."""
    e = {"PYTHONPATH": STANDIN + os.pathsep + ROOT, "HPCGPU_STANDIN_STRICT_HOST": "1"}
    e.update({v: None for v in ENV if v not in ("HPCGPU_STANDIN_STRICT_HOST",)})
    e.update(env or {})
    return _mpi.run(nprocs, args, env=e, timeout=timeout)


