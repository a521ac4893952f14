"""What the device-path tests share besides fixtures: the stand-in's paths and variables, and ranks run with it.

A module of its own, not ``conftest``: a test module importing ``from conftest import ...`` gets whichever
``conftest`` pytest loaded first under that name (tests/cluster's, when both folders are collected).
"""

import os

import _mpi

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "standin")
ROOT = os.path.dirname(os.path.dirname(HERE))
ENV = ("HPCGPU_STANDIN_FAIL", "HPCGPU_STANDIN_DEVICES", "HPCGPU_STANDIN_MEMORY", "HPCGPU_STANDIN_STRICT_HOST",
       "CUDA_VISIBLE_DEVICES", "CUPY_TF32", "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM")



def run_standin(nprocs, args, env=None, timeout=120):
    """``mpiexec -n nprocs python ARGS`` with the stand-in as ``cupy`` (one device unless ``env`` says)."""
    e = {"PYTHONPATH": STANDIN + os.pathsep + ROOT, "HPCGPU_STANDIN_STRICT_HOST": "1"}
    e.update({v: None for v in ENV if v not in ("HPCGPU_STANDIN_STRICT_HOST",)})
    e.update(env or {})
    return _mpi.run(nprocs, args, env=e, timeout=timeout)


