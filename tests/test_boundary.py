"""The boundary of library errors as one table: each hostile input, run as a user runs it, is one agreed line.

Command-line rows run the program under mpiexec at 1 and 3 ranks and assert exit status 2, exactly one line on
stderr (what every rank wrote together: rank 0 speaks, the others are silent) and nothing written. Library rows run
one small script under mpiexec at 1 and 3 ranks (one launch a rank count for the whole table): every rank must
raise an :class:`hpcgpu.AgreedError` of the row's ordinary type with the row's message, and the same on every rank.
Adding a case is adding a row to :data:`CLI_ROWS` or :data:`LIBRARY_ROWS`.
"""

import importlib.util
import json
import os
import re
import shutil
import textwrap

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi

pytestmark = pytest.mark.mpi

RANKS = (1, 3)


# -- the inputs: a trained model and its broken copies, two small matrices --------------------------------------

def _break(path, how):
    """Make the results file ``path`` broken in the way ``how`` names."""
    with h5py.File(path, "r+") as f:
        if how == "noloss":
            spec = json.loads(f.attrs["model"])
            del spec["loss"]
            f.attrs["model"] = json.dumps(spec)
        elif how == "list":
            f.attrs["model"] = "[1, 2]"
        elif how == "nan":
            f["model"]["fc0.weight"][0, 0] = np.nan
        elif how == "inf":
            f["model"]["fc1.bias"][0] = np.inf


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The data, a model trained on it (one run) and its broken copies, and two small matrices, by name."""
    d = tmp_path_factory.mktemp("boundary")
    X, y = blobs(64, d=4)
    data = write_h5(d / "data.h5", train__X=X, train__y=y, test__X=X[:20], test__y=y[:20])
    model = d / "model.h5"
    p = _mpi.run(1, ["-m", "hpcgpu.train", "--data", data, "--out", model, "--epochs", "1", "--hidden", "4",
                     "--batch-size", "16", "--progress", "none"], timeout=180)
    assert p.returncode == 0, p.stderr
    paths = {"dir": str(d), "data": str(data), "model": str(model)}
    for how in ("noloss", "list", "nan", "inf"):
        shutil.copy(model, d / f"{how}.h5")
        _break(d / f"{how}.h5", how)
        paths[how] = str(d / f"{how}.h5")
    rng = np.random.default_rng(0)
    write_h5(d / "A.h5", A=rng.random((6, 5)))
    write_h5(d / "B.h5", B=rng.random((5, 4)))
    paths["A"], paths["B"] = str(d / "A.h5"), str(d / "B.h5")
    return paths


# -- command-line rows ----------------------------------------------------------------------------------------
# Each: (environment, argv given the inputs' paths, the one line on stderr given the inputs (a str, or a compiled
# pattern where the line holds a figure of this machine), the path that must not be written).

CLI_ROWS = {
    "a switch variable that is no switch": (
        {"HPCGPU_IGNORE_SLURM_NTASKS": "maybe"}, lambda p: ["-m", "hpcgpu", "matmul", "--bench", "8"],
        lambda p: "hpcgpu: error: HPCGPU_IGNORE_SLURM_NTASKS must be 0 or 1 (or no/yes, false/true, off/on), "
                  "got 'maybe'", None),
    "another switch, read only where threads are capped": (
        {"HPCGPU_BLAS_OVERSUBSCRIBE": "abc"},
        lambda p: ["-m", "hpcgpu.train", "predict", "--model", p["model"], "--data", p["data"], "--out",
                   f"{p['dir']}/pred_env.h5"],
        lambda p: "hpcgpu.train: error: HPCGPU_BLAS_OVERSUBSCRIBE must be 0 or 1 (or no/yes, false/true, off/on), "
                  "got 'abc'", "pred_env.h5"),
    "a device variable that names no device": (
        {"HPCGPU_DEVICE": "garbage"},
        lambda p: ["-m", "hpcgpu", "matmul", p["A"], p["B"], "-o", f"{p['dir']}/C_env.h5"],
        lambda p: "hpcgpu: error: HPCGPU_DEVICE must be auto, cpu or gpu, got 'garbage'", "C_env.h5"),
    "an output dataset with an empty name": (
        {}, lambda p: ["-m", "hpcgpu", "matmul", p["A"], p["B"], "-o", f"{p['dir']}/C_slash.h5:C/"],
        lambda p: f"hpcgpu: error: -o {p['dir']}/C_slash.h5:C/: the dataset's name ends in '/' (an empty name in "
                  f"group C): name the dataset, e.g. -o {p['dir']}/C_slash.h5:C", "C_slash.h5"),
    "a benchmark beyond the node's memory": (
        {}, lambda p: ["-m", "hpcgpu", "matmul", "--bench", "2000000"],
        # the host's line; on a GPU (or the stand-in's pass) the device's
        lambda p: re.compile(r"hpcgpu: error: --bench 2000000: (the ranks of a node need [0-9.]+ GiB for their "
                             r"blocks, more than its memory \([0-9.]+ GiB\)|rank 0 needs [0-9.]+ GiB of device "
                             r"memory for its matrices, more than its GPU has \([0-9.]+ GiB\)): give a smaller N "
                             r"\(rank 0 also holds the three N x N matrices of the one-process reference\)"), None),
    "a model description without its loss": (
        {}, lambda p: ["-m", "hpcgpu.train", "predict", "--model", p["noloss"], "--data", p["data"], "--out",
                       f"{p['dir']}/pred_noloss.h5"],
        lambda p: f"hpcgpu.train: error: --model {p['noloss']}: its model description has no 'loss': the file was "
                  "not written by python -m hpcgpu.train, or was changed since", "pred_noloss.h5"),
    "a model description that is not a JSON object": (
        {}, lambda p: ["-m", "hpcgpu.train", "predict", "--model", p["list"], "--data", p["data"], "--out",
                       f"{p['dir']}/pred_list.h5"],
        lambda p: f"hpcgpu.train: error: --model {p['list']}: its model description (the model and config "
                  "attributes) is not a JSON object: not a results file of python -m hpcgpu.train",
        "pred_list.h5"),
    "weights holding NaN": (
        {}, lambda p: ["-m", "hpcgpu.train", "predict", "--model", p["nan"], "--data", p["data"], "--out",
                       f"{p['dir']}/pred_nan.h5"],
        lambda p: f"hpcgpu.train: error: --model {p['nan']}:/model/fc0.weight holds NaN: these weights predict "
                  "nothing", "pred_nan.h5"),
    "weights holding inf": (
        {}, lambda p: ["-m", "hpcgpu.train", "predict", "--model", p["inf"], "--data", p["data"], "--out",
                       f"{p['dir']}/pred_inf.h5"],
        lambda p: f"hpcgpu.train: error: --model {p['inf']}:/model/fc1.bias holds inf: these weights predict "
                  "nothing", "pred_inf.h5"),
}


@pytest.mark.parametrize("nprocs", RANKS)
@pytest.mark.parametrize("case", list(CLI_ROWS))
def test_a_hostile_command_line_is_one_line_and_exit_2(inputs, case, nprocs):
    env, argv, line, output = CLI_ROWS[case]
    p = _mpi.run(nprocs, [str(a) for a in argv(inputs)], env=env, timeout=180)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    want = line(inputs)
    assert len(lines) == 1, p.stderr
    if isinstance(want, str):
        assert lines[0] == want
    else:
        assert want.fullmatch(lines[0]), lines[0]
    if output is not None:
        assert not os.path.exists(os.path.join(inputs["dir"], output))


# -- library rows ---------------------------------------------------------------------------------------------
# Each: (the code that must raise, with X, y, paths (p), comm, np, hpcgpu and nn in scope; the ordinary type; the
# message given the inputs and the number of ranks; what it needs installed).

_OWN_MODEL = '''
class Bad:
    """y = x . w + b, which breaks its contract from call ``when`` on the ranks ``ranks``."""

    def __init__(self, when, ranks, how):
        self.when, self.ranks, self.how, self.calls = when, ranks, how, 0

    def init(self, rng):
        return {"w": np.zeros(2), "b": np.zeros(1)}

    def loss_and_grad(self, p, x, y):
        self.calls += 1
        r = x @ p["w"] + p["b"] - y
        g = {"w": x.T @ r, "b": np.array([r.sum()])}
        if self.calls >= self.when and comm.rank in self.ranks:
            if self.how == "shape":
                g["w"] = np.zeros(3)
            else:
                del g["b"]
        return float((r * r).sum() / 2), g

    def predict(self, p, x):
        return x @ p["w"] + p["b"]


class Tup(torch.nn.Module if torch else object):
    """A module whose forward returns a tuple, a dict or a tensor (``how``)."""

    def __init__(self, how):
        super().__init__()
        self.lin, self.how = torch.nn.Linear(2, 1), how

    def forward(self, x):
        out = self.lin(x).reshape(-1)
        return (out, out) if self.how == "tuple" else {"y": out} if self.how == "dict" else out
'''

_FIT = "hpcgpu.Trainer({model}, batch_size=12, epochs=2, progress='none').fit((X, y))"

LIBRARY_ROWS = {
    "a gradient of the wrong shape at step 4": (
        _FIT.format(model="Bad(4, range(comm.size), 'shape')"), "TypeError",
        lambda p, n: "model Bad: the gradient of w has shape (3,), the parameter (2,) (at step 4, rank 0)", None),
    "a gradient missing on the last rank only, at step 3": (
        _FIT.format(model="Bad(3, [comm.size - 1], 'missing')"), "TypeError",
        lambda p, n: f"model Bad: loss_and_grad's gradient has no b (the parameters are w, b) (at step 3, rank "
                     f"{n - 1})", None),
    "nn.Torch: a module returning a tuple": (
        _FIT.format(model="nn.Torch(Tup('tuple'), torch.nn.MSELoss(reduction='sum'))"), "TypeError",
        lambda p, n: "Torch: Tup returned a tuple, not a tensor: its forward must return the outputs as one tensor, "
                     "(n, k) or (n,)", "torch"),
    "nn.Torch: a module returning a dict": (
        _FIT.format(model="nn.Torch(Tup('dict'), torch.nn.MSELoss(reduction='sum'))"), "TypeError",
        lambda p, n: "Torch: Tup returned a dict, not a tensor: its forward must return the outputs as one tensor, "
                     "(n, k) or (n,)", "torch"),
    "nn.Torch: a loss that is not a tensor": (
        _FIT.format(model="nn.Torch(Tup('tensor'), lambda o, t: float(((o - t) ** 2).sum()))"), "TypeError",
        lambda p, n: "Torch: the loss returned a float, not a tensor: loss(outputs, y) must return the sum over "
                     "the samples as a 0-d tensor", "torch"),
    "nn.Torch: a loss that is not one number": (
        _FIT.format(model="nn.Torch(Tup('tensor'), lambda o, t: (o - t) ** 2)"), "TypeError",
        lambda p, n: f"Torch: the loss returned a tensor of shape ({12 // n},), not one number: loss(outputs, y) "
                     "must return the sum over the samples (reduction=\"sum\")", "torch"),
    "nn.Jax: params without leaves": (
        "nn.Jax(lambda params, x: x, {'w': []})", "TypeError", lambda p, n: "Jax: params has no leaves (arrays)",
        "jax"),
    "nn.Jax: an apply returning a tuple": (
        _FIT.format(model="nn.Jax(lambda params, x: (x @ params['w'], x), {'w': np.zeros(2)}, loss='mse')"),
        "TypeError", lambda p, n: "Jax: <lambda> returned a tuple, not an array: apply must return the outputs as one "
                                  "array, (n, k) or (n,)", "jax"),
    "nn.Jax: a loss that is not one number": (
        _FIT.format(model="nn.Jax(lambda params, x: x @ params['w'], {'w': np.zeros(2)}, loss=lambda o, t: o - t)"),
        "TypeError", lambda p, n: f"Jax: the loss returned an array of shape ({12 // n},), not one number: "
                                  "loss(outputs, y) must return the sum over the samples", "jax"),
    "load_model: a description without its loss": (
        "hpcgpu.load_model(p['noloss'])", "ValueError",
        lambda p, n: f"load_model {p['noloss']}: its model description has no 'loss': the file was not written by "
                     "python -m hpcgpu.train, or was changed since", None),
    "load_model: a description that is not a JSON object": (
        "hpcgpu.load_model(p['list'])", "ValueError",
        lambda p, n: f"load_model {p['list']}: its model description (the model and config attributes) is not a "
                     "JSON object: not a results file of python -m hpcgpu.train", None),
    "load_model: weights holding NaN": (
        "hpcgpu.load_model(p['nan'])", "ValueError",
        lambda p, n: f"load_model {p['nan']}:/model/fc0.weight holds NaN: these weights predict nothing", None),
    "ProcessGrid: dims as a string": (
        "hpcgpu.ProcessGrid('2x2')", "TypeError",
        lambda p, n: "ProcessGrid: dims (pr, pc) must be two integers, got '2x2'", None),
    "ProcessGrid.rows: a size as a string": (
        "hpcgpu.ProcessGrid().rows('4')", "TypeError",
        lambda p, n: "ProcessGrid.rows: m and row must be integers, got ('4', None)", None),
    "DistMatrix.zeros: a grid that is no grid": (
        "hpcgpu.DistMatrix.zeros((4, 4), '2x1')", "TypeError",
        lambda p, n: "zeros: grid must be a ProcessGrid, got str", None),
    "DistMatrix.random: a seed as a string": (
        "hpcgpu.DistMatrix.random((4, 4), seed='a')", "TypeError",
        lambda p, n: "random: seed must be an integer >= 0, got 'a'", None),
    "DistMatrix.from_hdf5: a dataset's name that is a number": (
        "hpcgpu.DistMatrix.from_hdf5(p['A'], 5)", "TypeError",
        lambda p, n: "from_hdf5: name must be a dataset's name (str), got int", None),
    "matmul: alpha as a string": (
        "A = hpcgpu.DistMatrix.random((4, 4)); hpcgpu.matmul(A, A, alpha='2')", "TypeError",
        lambda p, n: "matmul: alpha must be a number, got '2'", None),
    "matmul: a panel that is no integer": (
        "A = hpcgpu.DistMatrix.random((4, 4)); hpcgpu.matmul(A, A, panel=2.5)", "TypeError",
        lambda p, n: "matmul: panel must be an integer, got 2.5", None),
    "matmul: timings that is no dict": (
        "A = hpcgpu.DistMatrix.random((4, 4)); hpcgpu.matmul(A, A, timings='yes')", "TypeError",
        lambda p, n: "matmul: timings must be a dict to fill, or None, got str", None),
    "nn.Dense: a size that is no integer": (
        "nn.Dense(4.5, 3)", "TypeError", lambda p, n: "Dense takes integer sizes, got Dense(4.5, 3)", None),
    "nn.Huber: a delta that is no number": (
        "nn.Huber('x')", "TypeError", lambda p, n: "Huber's delta must be a number > 0, got 'x'", None),
    "nn.relu_stack: sizes as a string": (
        "nn.relu_stack('4,3')", "TypeError",
        lambda p, n: "layer sizes must be a sequence of integers [D, h_1, ..., C], got '4,3'", None),
    "nn.from_spec: a Dense without its sizes": (
        "nn.from_spec({'type': 'Dense'})", "ValueError",
        lambda p, n: "the description of a Dense layer has no 'n_in'", None),
    "nn.Standardize: a mean of strings": (
        "nn.Standardize(mean=['a'], std=[1.0])", "TypeError",
        lambda p, n: "Standardize: mean and std must be arrays of numbers, got <U1 and float64", None),
    "nn.plan_model: a loss given by its name": (
        "nn.plan_model(nn.Sequential(nn.Dense(2, 2)), 'mse')", "TypeError",
        lambda p, n: "loss must be an hpcgpu.nn loss (SoftmaxCrossEntropy, MeanSquaredError, Huber), got str", None),
    "nn.FlatModel: a seed as a string": (
        "nn.FlatModel(Bad(1, [], 'shape'), seed='x')", "TypeError",
        lambda p, n: "model Bad: seed must be an integer, got 'x'", None),
    "nn.FlatModel: an object without the contract's methods": (
        "nn.FlatModel(object())", "TypeError",
        lambda p, n: "model object: needs the method(s) init, loss_and_grad, predict (init(rng), loss_and_grad("
                     "params, x, y), predict(params, x); see hpcgpu.nn.Model)", None),
}

_SCRIPT = '''
import json, sys
import numpy as np
from mpi4py import MPI
import hpcgpu
from hpcgpu import nn
from hpcgpu.errors import AgreedError, plain_type
try:
    import torch
except ImportError:
    torch = None

comm = MPI.COMM_WORLD
hpcgpu.init(device="cpu")
p = json.loads(sys.argv[1])
rows = json.loads(open(sys.argv[2]).read())
X = np.random.default_rng(0).random((48, 2))
y = X @ np.array([1.0, -1.0])
{own}
got = {{}}
for case, code in rows.items():
    try:
        exec(code)
        got[case] = ["no error", False, ""]
    except Exception as e:
        got[case] = [plain_type(e).__name__, isinstance(e, AgreedError), str(e)]
every = comm.gather(got)
if comm.rank == 0:
    with open(sys.argv[3], "w") as f:
        json.dump(every, f)
'''


def _installed(module):
    return module is None or importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module", params=RANKS, ids=lambda n: f"{n} rank(s)")
def library(request, inputs, tmp_path_factory):
    """``(nprocs, [each rank's {case: [type, agreed, message]}])``: the table's code run in one launch."""
    n = request.param
    d = tmp_path_factory.mktemp(f"library{n}")
    script, rows, results = d / "rows_lib.py", d / "rows.json", d / "results.json"
    script.write_text(_SCRIPT.format(own=_OWN_MODEL))
    rows.write_text(json.dumps({case: textwrap.dedent(code) for case, (code, _, _, needs) in LIBRARY_ROWS.items()
                                if _installed(needs)}))
    p = _mpi.run(n, [script, json.dumps(inputs), rows, results], timeout=400)
    assert p.returncode == 0 and results.exists(), (p.stdout, p.stderr)
    return n, json.loads(results.read_text())


@pytest.mark.parametrize("case", list(LIBRARY_ROWS))
def test_a_hostile_library_call_is_one_agreed_error_on_every_rank(library, inputs, case):
    code, kind, message, needs = LIBRARY_ROWS[case]
    if not _installed(needs):
        pytest.skip(f"{needs} is not installed")
    n, every = library
    want = [kind, True, message(inputs, n)]
    for rank, got in enumerate(every):
        assert got[case] == want, f"rank {rank}"
