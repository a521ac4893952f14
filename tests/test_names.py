"""Names that cannot lie: the function hpcgpu.matmul survives every import, the error contract is a type."""

import argparse
import importlib
import pkgutil
import re
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

import _mpi
import hpcgpu
from hpcgpu import _gemm
from hpcgpu.errors import AgreedError, agreed, plain_type
from hpcgpu.io import on_root


def test_matmul_is_the_function_after_every_submodule_is_imported():
    for m in pkgutil.walk_packages(hpcgpu.__path__, "hpcgpu."):
        importlib.import_module(m.name)
    assert callable(hpcgpu.matmul)
    assert hpcgpu.matmul is hpcgpu.summa.matmul


@pytest.mark.parametrize("command", [["hpcgpu.train"], ["hpcgpu.train", "predict"], ["hpcgpu.tasks"],
                                     ["hpcgpu", "matmul"], ["hpcgpu", "info"], ["hpcgpu.scaling"],
                                     ["hpcgpu.report"], ["hpcgpu.datasets"]])
def test_help_says_each_default_once_and_every_option_what_it_does(command):
    p = subprocess.run([sys.executable, "-m", *command, "--help"], capture_output=True, text=True, timeout=60,
                       cwd=_mpi.ROOT)
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())  # argparse wraps at the terminal's width
    assert "(default: None)" not in text and "(default: False)" not in text and "``" not in text, text
    entries = re.split(r" (?=-{1,2}[a-z][\w-]*[ ,])", text.split("options:", 1)[1])
    assert len(entries) > 2, text
    for entry in entries:
        assert entry.count("default") <= 1 or "(default:" not in entry, entry  # said twice
    for action in _parser(command)._actions if _parser(command) is not None else []:
        assert action.help, f"{' '.join(command)} {action.option_strings}: no help text"


def _parser(command):
    """The argparse parser of a command, where the module builds it in a function of its own."""
    from hpcgpu import __main__ as top
    from hpcgpu.tasks import __main__ as tasks
    from hpcgpu.train import __main__ as train

    parsers = {("hpcgpu.train",): train.parser, ("hpcgpu.train", "predict"): train.predict_parser,
               ("hpcgpu.tasks",): tasks.parser}
    if tuple(command) in parsers:
        return parsers[tuple(command)]()
    if command[0] == "hpcgpu":
        sub = next(a for a in top.parser()._actions if isinstance(a, argparse._SubParsersAction))
        return sub.choices[command[1]]
    return None


def test_old_matmul_module_is_gone():
    p = subprocess.run([sys.executable, "-m", "hpcgpu.matmul", "--help"], capture_output=True, text=True,
                       timeout=60, cwd=_mpi.ROOT)
    assert p.returncode != 0 and "No module named hpcgpu.matmul" in p.stderr


def test_matmul_subcommand_help():
    p = subprocess.run([sys.executable, "-m", "hpcgpu", "matmul", "--help"], capture_output=True, text=True,
                       timeout=60, cwd=_mpi.ROOT)
    assert p.returncode == 0 and "--panel-memory" in p.stdout and "python -m hpcgpu matmul" in p.stdout


def test_agreed_keeps_the_type_and_pickles_as_the_plain_one():
    e = agreed(FileNotFoundError("--data x.h5: no such file"))
    assert isinstance(e, FileNotFoundError) and isinstance(e, AgreedError)
    assert str(e) == "--data x.h5: no such file" and not e.silent
    assert plain_type(e) is FileNotFoundError
    assert agreed(e, silent=True) is e and e.silent
    assert not isinstance(ValueError("x"), AgreedError)


def test_on_root_agrees_and_propagates_the_unexpected():
    comm = MPI.COMM_SELF
    assert on_root(lambda: 41 + 1, comm=comm) == 42
    with pytest.raises(OSError, match="--out o.h5: cannot write") as e:
        on_root(lambda: open("/nonexistent/dir/x", "w"), comm=comm,
                error=lambda err: OSError(f"--out o.h5: cannot write ({err})"))
    assert isinstance(e.value, AgreedError)
    with pytest.raises(KeyError) as e:  # not in `catch`: raised on the root alone, not agreed
        on_root(lambda: {}["x"], comm=comm)
    assert not isinstance(e.value, AgreedError)


@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (1.0, 1.0), (2.0, 0.5), (-1.0, 0.0), (0.5, -2.0)])
@pytest.mark.parametrize("shape", [(5, 4, 6), (0, 3, 2), (3, 0, 2), (3, 2, 0)])
def test_gemm_honours_alpha_and_beta(alpha, beta, shape):
    m, k, n = shape
    rng = np.random.default_rng(3)
    a, b, c = rng.random((m, k)), rng.random((k, n)), rng.random((m, n))
    want = alpha * (a @ b) + beta * c
    if beta == 0:
        c[...] = np.nan  # beta = 0 ignores C, NaN included (BLAS semantics)
    _gemm.gemm(a, b, c, alpha=alpha, beta=beta)
    np.testing.assert_allclose(c, want, rtol=1e-12)


def test_distmatrix_local_and_global_bytes():
    g = hpcgpu.ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    a = hpcgpu.DistMatrix.random((7, 5), g, "float32")
    assert a.lnbytes == 7 * 5 * 4 == a.gnbytes and g.block_shape((7, 5)) == (7, 5)
    g.free()
