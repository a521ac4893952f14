"""hpcgpu.linalg's names: every public name is the routine, never a submodule that happens to share it."""

import importlib
import os
import pkgutil
import subprocess
import sys
import types

import _mpi


def test_no_submodule_shares_a_public_name_so_an_import_never_hides_a_routine():
    import hpcgpu.linalg as linalg

    stems = {m.name for m in pkgutil.iter_modules([os.path.dirname(linalg.__file__)])}
    assert stems & set(linalg.__all__) == set()  # importing such a submodule would set it over the function
    code = ("import importlib, pkgutil, os, types, hpcgpu.linalg as L\n"
            "for m in pkgutil.iter_modules([os.path.dirname(L.__file__)]):\n"
            "    importlib.import_module('hpcgpu.linalg.' + m.name)\n"
            "bad = [n for n in L.__all__ if isinstance(getattr(L, n), types.ModuleType)]\n"
            "print(bad)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=_mpi.environment())
    assert (p.returncode, p.stdout) == (0, "[]\n"), p.stderr


def test_the_former_module_names_are_the_same_modules():
    import hpcgpu

    for name in ("grid", "blocks", "distmatrix", "summa"):
        old, new = importlib.import_module(f"hpcgpu.{name}"), importlib.import_module(f"hpcgpu.linalg.{name}")
        assert old is new and isinstance(old, types.ModuleType)
    assert hpcgpu.matmul is hpcgpu.linalg.matmul is hpcgpu.linalg.pdgemm
    assert hpcgpu.DistMatrix is hpcgpu.linalg.DistMatrix and hpcgpu.ProcessGrid is hpcgpu.linalg.ProcessGrid
