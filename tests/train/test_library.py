"""The trainer as a library: built-in layers and losses, a model of one's own, SGD/Adam/AdamW, data in memory,
prediction, and the command line's regression and predict."""

import json
import os

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi
from hpcgpu import nn, optim
from hpcgpu._device import asnumpy
from hpcgpu.nn import check_grad

SCRIPT = os.path.join(_mpi.SCRIPTS, "library_fit.py")


def _fit(case, nprocs, *args):
    p = _mpi.run(nprocs, [SCRIPT, case, *map(str, args)], timeout=180)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- layers, losses, the engine ----------------------------------------------------------------

ACTS = [None, "relu", "tanh", "gelu"]


@pytest.mark.parametrize("loss", [nn.SoftmaxCrossEntropy(), nn.MeanSquaredError(), nn.Huber(0.3)])
def test_every_layer_and_loss_has_the_gradient_of_its_forward_pass(loss):
    rng = np.random.default_rng(0)
    net = nn.Sequential(nn.Dense(5, 7), nn.ReLU(), nn.Dense(7, 6, "tanh"), nn.Dense(6, 4), nn.GELU(), nn.Dense(4, 3))
    x = rng.normal(size=(9, 5))
    y = rng.integers(0, 3, 9) if loss.task == "classification" else rng.normal(size=(9, 3)) * 2
    errors = check_grad(net, x, y, loss=loss)
    assert set(errors) == {f"fc{i}.{p}" for i in range(4) for p in ("weight", "bias")}
    assert max(errors.values()) < 1e-5


def test_check_grad_refuses_a_model_holding_cupy_and_array_module_serves_both():
    """A model that keeps the runtime's module (self.xp = rt.xp: CuPy on a GPU) gets NumPy arrays in check_grad
    and CuPy arrays in training: check_grad says so in one line, naming the attribute, before any call;
    nn.array_module(x) is the module of the arrays given (NumPy here, without importing CuPy)."""
    import sys
    import types

    class Holding(nn.Model):
        def __init__(self):
            self.xp = types.ModuleType("cupy")

        def init(self, rng):
            return {"w": np.zeros(2)}

    with pytest.raises(ValueError, match=r"check_grad: the model holds CuPy itself \(its attribute xp\)"):
        check_grad(Holding(), np.ones((3, 2)), np.ones(3))
    loaded = "cupy" in sys.modules
    assert nn.array_module(np.ones(2)) is np
    assert ("cupy" in sys.modules) == loaded  # array_module imported nothing


def test_check_grad_catches_a_wrong_gradient():
    class Wrong:
        def init(self, rng):
            return {"w": np.ones(3)}

        def loss_and_grad(self, p, x, y):
            r = x @ p["w"] - y
            return (r * r).sum(), {"w": x.T @ r}  # missing the factor 2

        def predict(self, p, x):
            return x @ p["w"]

    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="the gradient of w is off by"):
        check_grad(Wrong(), rng.normal(size=(5, 3)), rng.normal(size=5))


def _plain_forward(p: dict, activations, x):
    """The layers' composition written out in NumPy: the reference of the one engine (Network)."""
    act = {None: lambda z: z, "relu": lambda z: np.maximum(z, 0), "tanh": np.tanh,
           "gelu": lambda z: 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))}
    for i, name in enumerate(activations):
        x = act[name](x @ p[f"fc{i}.weight"] + p[f"fc{i}.bias"])
    return x


@pytest.mark.parametrize("last", ACTS)
@pytest.mark.parametrize("loss", [nn.SoftmaxCrossEntropy(), nn.MeanSquaredError(), nn.Huber()])
def test_the_engine_computes_the_layers_and_check_grad_checks_the_engine(loss, last):
    """Network (fused, on flat buffers) gives the layers' composition written out in NumPy, and its gradient is
    finite differences' (check_grad runs this engine: there is no second one)."""
    rng = np.random.default_rng(2)
    net = nn.Sequential(nn.Dense(4, 8, "gelu"), nn.Dense(8, 6, "tanh"), nn.Dense(6, 5, "relu"), nn.Dense(5, 3, last))
    m = nn.Network(net, loss, dtype="float64", seed=4)
    m.params += rng.normal(0, 0.1, m.n_params)
    x = rng.normal(size=(11, 4))
    y = rng.integers(0, 3, 11) if loss.task == "classification" else rng.normal(size=(11, 3))
    p = {k: v.copy() for k, v in m.named_parameters()}
    np.testing.assert_allclose(m.forward(x), _plain_forward(p, ["gelu", "tanh", "relu", last], x), rtol=1e-13)
    errors = check_grad(net, x, y, loss=loss, params=p)
    assert max(errors.values()) < 1e-5
    assert m.spec() == {"net": net.spec(), "loss": loss.spec()} and nn.from_spec(net.spec()).spec() == net.spec()


def test_sequential_folds_activations_and_names_dense_layers():
    net = nn.Sequential([nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 10)])
    assert [repr(x) for x in net.layers] == ["Dense(64, 128, activation='relu')", "Dense(128, 10)"]
    assert net.sizes == [64, 128, 10] and [n for n, _ in net.shapes()] == ["fc0.weight", "fc0.bias", "fc1.weight",
                                                                           "fc1.bias"]
    with pytest.raises(ValueError, match=r"Dense\(10, 5\) follows a layer of 128 outputs"):
        nn.Sequential(nn.Dense(64, 128), nn.Dense(10, 5))


# -- optimizers --------------------------------------------------------------------------------

def _adam_reference(p, g_seq, lr, b1, b2, eps, wd, decoupled, scale):
    m = v = np.zeros_like(p)
    for t, g in enumerate(g_seq, start=1):
        if decoupled:
            p = p * (1 - lr * wd)
            d = scale * g
        else:
            d = scale * g + wd * p
        m = b1 * m + (1 - b1) * d
        v = b2 * v + (1 - b2) * d * d
        mhat, vhat = m / (1 - b1**t), v / (1 - b2**t)
        p = p - lr * mhat / (np.sqrt(vhat) + eps)
    return p, m, v


@pytest.mark.parametrize("kind", ["adam", "adamw"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_and_adamw_match_the_papers_algorithm(kind, dtype):
    rng = np.random.default_rng(3)
    p0 = rng.normal(size=7)
    grads = [rng.normal(size=7) for _ in range(4)]
    opt = optim.Adam(lr=0.1, weight_decay=0.05) if kind == "adam" else optim.AdamW(lr=0.1, weight_decay=0.05)
    p = p0.astype(dtype)
    state = opt.init(p)
    assert set(state) == {"m", "v"} and state["m"].dtype == p.dtype
    for t, g in enumerate(grads, start=1):
        opt.update(g.astype(dtype), state, p, lr=0.1, scale=0.5, count=t)
    want, m, v = _adam_reference(p0, grads, 0.1, 0.9, 0.999, 1e-8, 0.05, kind == "adamw", 0.5)
    tol = 1e-5 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(p, want, rtol=tol)
    np.testing.assert_allclose(state["m"], m, rtol=tol)
    np.testing.assert_allclose(state["v"], v, rtol=tol)


@pytest.mark.parametrize("blas", [True, False])
def test_nesterov_sgd_matches_pytorchs_form(blas):
    rng = np.random.default_rng(4)
    p, mu, wd, lr = rng.normal(size=5), 0.9, 0.01, 0.1
    opt = optim.SGD(lr, momentum=mu, nesterov=True, weight_decay=wd)
    opt._host_blas = blas
    state, want, v = opt.init(p), p.copy(), np.zeros(5)
    for _ in range(3):
        g = rng.normal(size=5)
        d = 0.5 * g + wd * want
        v = mu * v + d
        want = want - lr * (d + mu * v)
        opt.update(g.copy(), state, p, lr=lr, scale=0.5)
    np.testing.assert_allclose(p, want, rtol=1e-13)
    with pytest.raises(ValueError, match="Nesterov momentum needs momentum > 0"):
        optim.SGD(0.1, nesterov=True)


# -- training at 1, 2 and 3 ranks ----------------------------------------------------------------

CASES = ["seq-sgd", "seq-adam", "seq-adamw", "mse", "huber", "own-sgd", "own-adam"]


@pytest.mark.mpi
@pytest.mark.parametrize("case", _mpi.cases(
    [pytest.param(c, marks=pytest.mark.device) if c in ("seq-adamw", "own-adam") else c for c in CASES],
    ["seq-adam", "huber", "own-adam"]))
def test_the_same_seed_gives_the_same_model_at_1_2_and_3_ranks(case):
    """Built-in layers (every activation) and a model of one's own, with SGD (Nesterov), Adam and AdamW, on
    classification and regression: the losses and the parameters agree to 1e-6 in float64 at any rank count,
    and the model learns."""
    runs = {n: _fit(case, n) for n in (1, 2, 3)}
    ref = runs[1]
    assert ref["steps"] == 3 * (250 // 24)
    assert ref["val_loss"][-1] < ref["val_loss"][0] and ref["train_loss"][-1] < ref["train_loss"][0]
    metric = "val_accuracy" if case.startswith("seq") else "val_r2"
    assert ref[metric][-1] > (0.6 if case.startswith("seq") else 0.8), ref[metric]
    for n in (2, 3):
        for k in ("train_loss", "val_loss", metric):
            np.testing.assert_allclose(runs[n][k], ref[k], rtol=1e-6, err_msg=f"{k} at {n} ranks")
        for k, v in ref["params"].items():
            np.testing.assert_allclose(runs[n]["params"][k], v, rtol=1e-6, atol=1e-9, err_msg=f"{k} at {n} ranks")


@pytest.mark.device
@pytest.mark.mpi
def test_each_ranks_own_rows_give_the_model_of_the_whole_set():
    """sharded=True with uneven shards (27, 84, 139 rows at 3 ranks) trains the same model as every rank
    passing the whole set; the sharded run's layers are written Keras's way (Dense(units), the first one's
    inputs from the ranks' data) and are the same layers."""
    whole, own = _fit("seq-adam", 3), _fit("sharded", 3)
    np.testing.assert_allclose(own["train_loss"], whole["train_loss"], rtol=1e-10)
    for k, v in whole["params"].items():
        np.testing.assert_allclose(own["params"][k], v, rtol=1e-9, atol=1e-12, err_msg=k)


@pytest.mark.device
@pytest.mark.mpi
def test_predict_at_3_ranks_equals_1_rank_row_for_row(tmp_path):
    one = _fit("predict", 1, tmp_path / "p1.h5")
    three = _fit("predict", 3, tmp_path / "p3.h5")
    a, b = np.asarray(one["pred"]), np.asarray(three["pred"])
    assert a.shape == (103, 3)
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
    for f in ("p1.h5", "p3.h5"):
        with h5py.File(tmp_path / f) as h:
            np.testing.assert_allclose(h["preds/y_hat"][()], a, rtol=1e-12, atol=1e-14)


@pytest.mark.mpi
def test_ranks_whose_own_samples_differ_in_shape_are_one_line_and_exit_2():
    p = _mpi.run(2, [SCRIPT, "mixed-shapes"], timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "library_fit.py: error: the ranks' features have samples of different shapes: [(2, 3), (3, 2)]"]


@pytest.mark.mpi
def test_a_model_of_ones_own_asked_for_tensor_parallelism_is_one_line_and_exit_2():
    p = _mpi.run(2, [SCRIPT, "own-tp"], timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "library_fit.py: error: tensor_parallel 2: a model of one's own (Quadratic) cannot be split over ranks; "
        "tensor parallelism needs the built-in Dense layers (hpcgpu.nn.Sequential)"]


# -- the command line: optimizers, regression, predict ----------------------------------------

def _cli(n, *args, timeout=180):
    return _mpi.run(n, ["-m", "hpcgpu.train", "--progress", "none", *map(str, args)], timeout=timeout)


def _model(path):
    with h5py.File(path) as f:
        return {k: f["model"][k][()] for k in f["model"]}


@pytest.mark.device
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs, zero", [(2, 0), (2, 1)])
def test_an_adam_run_stopped_and_resumed_is_bitwise_the_uninterrupted_one(tmp_path, nprocs, zero):
    """Adam's two moments and its update count go through the checkpoint (ZeRO-1: sharded, gathered)."""
    X, y = blobs(240, d=6)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y, test__X=X[:40], test__y=y[:40])
    opts = ["--data", data, "--epochs", "3", "--batch-size", "20", "--hidden", "16", "--dtype", "float64",
            "--optimizer", "adam", "--lr", "0.01", "--zero-stage", zero, "--keep-checkpoints", "20"]
    ck = tmp_path / "ck.h5"
    p = _cli(nprocs, *opts, "--out", tmp_path / "full.h5", "--checkpoint", ck, "--checkpoint-every", "7")
    assert p.returncode == 0, p.stderr
    with h5py.File(f"{ck}.4") as f:  # steps 7, 14, ..., 35 and the end (36): .4 is step 14, mid-epoch 2
        assert f.attrs["step"] == 14 and sorted(f["optimizer"]) == ["m", "v"] and f.attrs["optimizer"] == "adam"
    (tmp_path / "again").mkdir()
    os.link(f"{ck}.4", tmp_path / "again" / "ck.h5")
    p = _cli(nprocs, *opts, "--out", tmp_path / "again.h5", "--checkpoint", tmp_path / "again" / "ck.h5", "--resume")
    assert p.returncode == 0, p.stderr
    a, b = _model(tmp_path / "full.h5"), _model(tmp_path / "again.h5")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # another optimizer cannot continue it
    p = _cli(nprocs, *[o if o != "adam" else "adamw" for o in opts], "--out", tmp_path / "w.h5", "--checkpoint", ck,
             "--resume")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"hpcgpu.train: error: --resume: {ck} was written with --optimizer adam, this run has adamw"], p.stderr


@pytest.mark.mpi
def test_regression_on_the_command_line_and_predict_from_its_results(tmp_path):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 5))
    y = np.stack([X @ rng.normal(size=5), np.sin(X[:, 0])], axis=1) + 0.05 * rng.normal(size=(400, 2))
    data = write_h5(tmp_path / "r.h5", train__X=X[:300], train__y=y[:300], test__X=X[300:], test__y=y[300:])
    out = tmp_path / "run.h5"
    p = _mpi.run(3, ["-m", "hpcgpu.train", "--data", data, "--out", out, "--hidden", "32", "--epochs", "30",
                     "--batch-size", "30", "--loss", "huber", "--optimizer", "adamw", "--lr", "0.01",
                     "--dtype", "float64", "--progress", "lines"], timeout=180)
    assert p.returncode == 0, p.stderr
    assert "regression, model [5, 32, 2]" in p.stdout.splitlines()[0] and "loss huber" in p.stdout
    assert p.stdout.strip().splitlines()[-1].startswith("final test_rmse ")
    with h5py.File(out) as f:
        assert f.attrs["task"] == "regression" and json.loads(f.attrs["model"])["loss"] == {"type": "Huber",
                                                                                             "delta": 1.0}
        assert f["metrics/test_r2"][-1] > 0.9 and "test_accuracy" not in f["metrics"]
    pred = tmp_path / "pred.h5"
    write_h5(pred, keep=np.arange(3))
    p = _mpi.run(2, ["-m", "hpcgpu.train", "predict", "--model", out, "--data", data, "-o", f"{pred}:y_hat"],
                 timeout=120)
    assert p.returncode == 0, p.stderr
    with h5py.File(pred) as f:
        got = f["y_hat"][()]
        assert list(f["keep"][()]) == [0, 1, 2]
    params = _model(out)
    want = np.maximum(X[300:] @ params["fc0.weight"] + params["fc0.bias"], 0) @ params["fc1.weight"] + \
        params["fc1.bias"]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    r2 = 1 - ((got - y[300:]) ** 2).sum() / ((y[300:] - y[300:].mean(axis=0)) ** 2).sum()
    with h5py.File(out) as f:
        np.testing.assert_allclose(r2, f["metrics/test_r2"][-1], rtol=1e-9)


# -- in one process: h5py datasets as data, a config left alone, a pure state_dict ----------------

@pytest.mark.device
def test_h5py_datasets_train_as_arrays_do_and_the_config_is_left_alone(tmp_path):
    import dataclasses

    from mpi4py import MPI

    import hpcgpu

    X, y = blobs(200, d=6)
    path = write_h5(tmp_path / "d.h5", X=X.astype(np.float64), y=y)
    rt = hpcgpu.init("cpu", comm=MPI.COMM_SELF)
    config = hpcgpu.TrainConfig(epochs=2, batch_size=20, dtype="float64", progress="none", timing=True, out=None)
    before = dataclasses.asdict(config)
    runs = []
    for source in ("arrays", "datasets"):
        net = nn.Sequential(nn.Dense(6, 8, "relu"), nn.Dense(8, 3))
        t = hpcgpu.Trainer(net, nn.SoftmaxCrossEntropy(), optim.SGD(lr=0.1, momentum=0.9), config=config, runtime=rt)
        if source == "arrays":
            t.fit((X, y))
        else:
            with h5py.File(path) as f:
                t.fit((f["X"], f["y"]))
        first = t.state_dict()
        second = t.state_dict()
        assert json.dumps(first["progress"], sort_keys=True) == json.dumps(second["progress"], sort_keys=True)
        runs.append(t.model.params.copy())
        assert t.config is not config and t.config.optimizer == "sgd" and t.config.lr == 0.1
        t.close()
    assert dataclasses.asdict(config) == before  # the caller's config, unchanged
    np.testing.assert_array_equal(runs[0], runs[1])
    rt.free()


BROADCAST = r"""
import sys
import numpy as np
from mpi4py import MPI
import hpcgpu
from hpcgpu import nn, optim

root, zero = int(sys.argv[1]), int(sys.argv[2])
rt = hpcgpu.init("cpu")
rng = np.random.default_rng(0)
X, y = rng.normal(size=(60, 5)), rng.integers(0, 3, 60)
t = hpcgpu.Trainer(nn.Sequential(nn.Dense(5, 8, "relu"), nn.Dense(8, 3)), nn.SoftmaxCrossEntropy(),
                   optim.Adam(0.01), runtime=rt, batch_size=12, epochs=2, seed=1, zero_stage=zero, dtype="float64",
                   progress="none")
t.fit((X, y))
r = rt.rank
t.model.params[...] += r  # each rank a state of its own
for v in t.opt_state.values():
    v[...] += r
t.epoch, t.step = 10 + r, 100 + r
t.broadcast_state(root=root)
params = rt.comm.bcast(t.gather_global()[0], root=0)  # collective: every rank calls gather_global
mine = rt.comm.allgather((t.model.params.copy(), {k: v.copy() for k, v in t.opt_state.items()}, t.epoch, t.step))
ok = all(e == 10 + root and s == 100 + root for _, _, e, s in mine)
if not zero:
    ok = ok and all(np.array_equal(p, mine[root][0]) and all(np.array_equal(o[k], mine[root][1][k]) for k in o)
                    for p, o, _, _ in mine)
else:  # the ZeRO blocks of the optimizer state differ by rank; the parameters are whole everywhere
    ok = ok and all(np.array_equal(p, mine[root][0]) for p, _, _, _ in mine) and np.isfinite(params).all()
if r == 0:
    print("broadcast:", "ok" if ok else "FAILED", flush=True)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs, root, zero", [(3, 2, 0), (2, 0, 1)])
def test_broadcast_state_makes_every_rank_the_roots(nprocs, root, zero):
    """Each rank perturbed on its own; after broadcast_state(root) every rank holds the root's parameters,
    optimizer state and progress (ZeRO-1: the parameters whole, the state in blocks, root 0)."""
    p = _mpi.run(nprocs, ["-c", BROADCAST, str(root), str(zero)], timeout=120)
    assert p.returncode == 0, p.stderr
    assert "broadcast: ok" in p.stdout, p.stdout


class _Softmax:
    """PyTorch's MyModel shape of a classifier, written by hand: Linear, ReLU, Linear, softmax cross-entropy."""

    def __init__(self, outputs: bool):
        self.outputs, self.label_types = outputs, set()

    def init(self, rng):
        return {"w1": rng.normal(0, 0.3, (4, 8)), "b1": np.zeros(8), "w2": rng.normal(0, 0.3, (8, 3)),
                "b2": np.zeros(3)}

    def _forward(self, p, x):
        h = np.maximum(x @ p["w1"] + p["b1"], 0)
        return h, h @ p["w2"] + p["b2"]

    def loss_and_grad(self, p, x, y):
        self.label_types.add(y.dtype.kind)
        h, z = self._forward(p, x)
        e = np.exp(z - z.max(1, keepdims=True))
        s = e / e.sum(1, keepdims=True)
        rows = np.arange(len(y))
        dz = s.copy()
        dz[rows, y] -= 1  # integer labels index the rows' scores
        dh = (dz @ p["w2"].T) * (h > 0)
        grads = {"w1": x.T @ dh, "b1": dh.sum(0), "w2": h.T @ dz, "b2": dz.sum(0)}
        loss = -np.log(s[rows, y]).sum()
        return (loss, grads, z) if self.outputs else (loss, grads)

    def predict(self, p, x):
        return self._forward(p, x)[1]


@pytest.mark.parametrize("outputs", [True, False])
def test_a_classifier_of_ones_own_trains_as_a_classifier_on_integer_labels(outputs):
    """Integer labels make a model of one's own a classifier (its task from the data, as the built-in layers'):
    ``y`` reaches its ``loss_and_grad`` as integers, the metric is accuracy; computed from the outputs it
    returns third, NaN without them."""
    import hpcgpu

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 1)
    model = _Softmax(outputs)
    t = hpcgpu.Trainer(model, optimizer=optim.SGD(0.2), batch_size=20, epochs=8, progress="none",
                       dtype="float64")
    t.fit((X, y), validation=(X[:30], y[:30]))
    assert t.model.task == t.config.task == "classification" and model.label_types == {"i"}
    assert "train_accuracy" in t.history and "train_rmse" not in t.history
    acc = np.asarray(t.history["train_accuracy"])
    if outputs:
        assert np.isfinite(acc).all() and 0 <= acc.min() and acc[-1] > 0.6, acc
    else:
        assert np.isnan(acc).all(), acc
    assert t.history["val_accuracy"][-1] > 0.6


def test_a_library_run_is_the_same_bits_every_time_and_times_nothing():
    """A Trainer built from a model runs every GEMM on the rank's threads (no plan chosen by timing, which a busy
    node may choose otherwise): two fits of one script and seed give the same bits; the command line's default
    stays the timed plan."""
    import hpcgpu
    from hpcgpu.train import TrainConfig

    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(200, 12)), rng.integers(0, 4, 200)
    params = []
    for _ in range(2):
        t = hpcgpu.Trainer(nn.Sequential(nn.Dense(12, 64, "relu"), nn.Dense(64, 4)), nn.SoftmaxCrossEntropy(),
                           optim.SGD(0.05, momentum=0.9), batch_size=40, epochs=3, seed=7, progress="none")
        t.fit((X, y))
        assert t.config.gemm_threads == "all" and t.gemm_plan is None
        params.append(asnumpy(t.model.params))  # a GPU node's library default is the GPU
    np.testing.assert_array_equal(params[0], params[1])
    assert TrainConfig().gemm_threads == "auto"


def test_a_model_of_ones_own_predicts_only_on_the_width_it_was_fit_on():
    """predict, evaluate and a second fit with another number of features than fit saw: one agreed ValueError
    naming both widths, not NumPy's matmul error inside the user's code."""
    import hpcgpu
    from hpcgpu.errors import AgreedError

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 4)), rng.integers(0, 3, 60)
    t = hpcgpu.Trainer(_Softmax(True), optimizer=optim.SGD(0.1), batch_size=20, epochs=1, progress="none")
    t.fit((X, y))
    assert t.model.n_inputs == 4 and t.predict(X).shape == (60, 3)
    with pytest.raises(ValueError, match="predict: X has 5 features, the model takes 4") as e:
        t.predict(rng.normal(size=(10, 5)))
    assert isinstance(e.value, AgreedError)
    with pytest.raises(ValueError, match="X has 5 features, the model takes 4"):
        t.evaluate((rng.normal(size=(10, 5)), y[:10]))


@pytest.mark.mpi
def test_a_saved_model_comes_back_in_python_at_other_ranks_and_splits(tmp_path):
    """save_results, then hpcgpu.load_model predicts the same bits in process and at 2 ranks split by tensor
    parallelism; a model of one's own comes back through Trainer.load_weights; another model's file, and a model of
    one's own given to load_model, are one agreed line each."""
    import hpcgpu
    from hpcgpu.errors import AgreedError

    X = np.random.default_rng(7).normal(size=(103, 6))  # library_fit.py's data("classification", 103)
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 1)
    common = dict(batch_size=20, epochs=2, seed=4, dtype="float64", progress="none")
    built_in = tmp_path / "built_in.h5"
    t = hpcgpu.Trainer(nn.Sequential(nn.Dense(6, 16, "relu"), nn.Dense(16, 3)), nn.SoftmaxCrossEntropy(),
                       optim.Adam(0.02), out=str(built_in), **common)
    t.fit((X, y))
    t.save_results()
    want = t.predict(X)
    np.testing.assert_array_equal(hpcgpu.load_model(built_in).predict(X), want)
    got = _fit("load", 2, built_in)
    assert got["shapes"]["fc0.weight"] == [6, 8]  # each rank holds half the hidden layer
    np.testing.assert_allclose(np.asarray(got["pred"]), want, rtol=1e-12, atol=1e-13)

    own = tmp_path / "own.h5"
    first = hpcgpu.Trainer(_Softmax(True), optimizer=optim.SGD(0.2), out=str(own), **common)
    first.fit((X[:, :4], y))
    first.save_results()
    second = hpcgpu.Trainer(_Softmax(True), optimizer=optim.SGD(0.2), **common)
    second.load_weights(own)
    np.testing.assert_array_equal(second.predict(X[:, :4]), first.predict(X[:, :4]))
    with pytest.raises(ValueError, match=r"load_weights .*built_in.h5: this model's parameter w1 is not in the "
                                         r"file") as e:
        second.load_weights(built_in)
    assert isinstance(e.value, AgreedError)
    with pytest.raises(ValueError, match=r"load_model .*own.h5: holds a model of one's own .* call "
                                         r"Trainer.load_weights"):
        hpcgpu.load_model(own)


def test_a_finished_run_resumed_with_more_epochs_trains_on_as_one_run_would(tmp_path):
    """resume=True with more epochs than the checkpoint's run goes on to the new total: the bits of one run of that
    total (a constant rate); fewer epochs than it has done is one agreed line naming both counts."""
    import hpcgpu
    from hpcgpu.errors import AgreedError

    rng = np.random.default_rng(8)
    X, y = rng.normal(size=(80, 5)), rng.integers(0, 3, 80)
    ck = str(tmp_path / "ck.h5")

    def trainer(epochs, **kw):
        return hpcgpu.Trainer(nn.Sequential(nn.Dense(5, 9, "tanh"), nn.Dense(9, 3)), nn.SoftmaxCrossEntropy(),
                              optim.Adam(0.01), batch_size=16, epochs=epochs, seed=6, progress="none",
                              dtype="float64", **kw)

    once = trainer(5)
    once.fit((X, y))
    trainer(3, checkpoint=ck).fit((X, y))
    more = trainer(5, checkpoint=ck, resume=True)
    more.fit((X, y))
    assert more.resumed_from == ck and more.epoch == 5 and more.history["train_loss"] == once.history["train_loss"]
    np.testing.assert_array_equal(asnumpy(more.model.params), asnumpy(once.model.params))
    with pytest.raises(ValueError, match=r"ck.h5: has done 5 epochs, this run asks for 4 in all: give at least 5") \
            as e:
        trainer(4, checkpoint=ck, resume=True).fit((X, y))
    assert isinstance(e.value, AgreedError)
    # in the library's words, not the command line's flags
    with pytest.raises(ValueError, match=r"^resume=True: .*ck.h5 was written with batch_size 16, this run has 20$"):
        hpcgpu.Trainer(nn.Sequential(nn.Dense(5, 9, "tanh"), nn.Dense(9, 3)), nn.SoftmaxCrossEntropy(),
                       optim.Adam(0.01), batch_size=20, epochs=6, seed=6, progress="none", dtype="float64",
                       checkpoint=ck, resume=True).fit((X, y))
    # a cosine schedule spans the run's epochs: it is not extended, by resume or by fit
    cosine = dict(schedule="cosine", checkpoint=str(tmp_path / "cos.h5"))
    trainer(3, **cosine).fit((X, y))
    with pytest.raises(ValueError, match=r"^resume=True: .*cos.h5 was written for epochs 3 of a cosine schedule, which "
                                         r"spans the run's epochs: this run has 5"):
        trainer(5, **cosine, resume=True).fit((X, y))
    with pytest.raises(ValueError, match=r"^fit: epochs=5: a cosine schedule spans the run's 3 epochs"):
        trainer(3, schedule="cosine").fit((X, y), epochs=5)
    with pytest.raises(ValueError, match=r"^batch_size must be >= 1, got 0$"):
        hpcgpu.Trainer(nn.Sequential(nn.Dense(5, 3)), nn.SoftmaxCrossEntropy(), batch_size=0)


def test_fit_again_trains_on_to_the_new_total_as_one_fit_would(capsys):
    """Keras's habit: a second fit of the same arrays trains the Trainer's epochs again, the bits of one fit of
    twice as many (constant rate); fit(epochs=N) trains on to N in all; a fit with nothing left says so and trains
    nothing; other data, fewer epochs than done, and train_epoch before any data are one line each."""
    import hpcgpu

    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(90, 6)), rng.integers(0, 3, 90)

    def trainer(epochs):
        return hpcgpu.Trainer(nn.Sequential(nn.Dense(6, 10, "tanh"), nn.Dense(10, 3)), nn.SoftmaxCrossEntropy(),
                              optim.Adam(0.01), batch_size=15, epochs=epochs, seed=2, progress="none",
                              dtype="float64")

    once = trainer(8)
    with pytest.raises(RuntimeError, match="train_epoch: no data yet: call fit"):
        once.train_epoch()
    once.fit((X, y))
    twice = trainer(3)
    twice.fit((X, y))
    h = twice.fit((X, y))  # the same arrays again: 3 more epochs
    assert twice.epoch == 6 and len(h["train_loss"]) == 6
    assert twice.history["train_loss"] == once.history["train_loss"][:6]
    twice.fit(epochs=8)
    assert twice.epoch == 8 and twice.history["train_loss"] == once.history["train_loss"]
    np.testing.assert_array_equal(asnumpy(twice.model.params), asnumpy(once.model.params))
    twice.fit(epochs=8)
    assert "the run has done its 8 epochs: nothing to train" in capsys.readouterr().err and twice.epoch == 8
    with pytest.raises(ValueError, match="trains on the data of its first fit"):
        twice.fit((X.copy(), y), epochs=9)  # other arrays, however equal
    with pytest.raises(ValueError, match="epochs=4 must be a whole number of epochs in all, at least 1 and the 8"):
        twice.fit(epochs=4)


def test_fit_again_with_the_same_validation_split_goes_on():
    """Keras's fit(X, y, validation_split=0.2) twice (found by a third new user's trial: the split's new slices
    were taken as other data and refused): the same arrays with the same split, or with none, go on with the first
    fit's rows and held-out rows, the bits of one fit of all the epochs; another fraction is other data."""
    import hpcgpu

    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(100, 5)), rng.normal(size=100)

    def trainer(epochs):
        return hpcgpu.Trainer(nn.Sequential(nn.Dense(8, "tanh"), nn.Dense(1)), nn.MeanSquaredError(),
                              optim.Adam(0.01), batch_size=16, epochs=epochs, seed=3, progress="none",
                              dtype="float64")

    once = trainer(6)
    once.fit((X, y), validation_split=0.2)
    thrice = trainer(2)
    thrice.fit((X, y), validation_split=0.2)
    thrice.fit((X, y), validation_split=0.2)
    thrice.fit((X, y))
    assert thrice.epoch == 6 and thrice.history["val_loss"] == once.history["val_loss"]
    np.testing.assert_array_equal(asnumpy(thrice.model.params), asnumpy(once.model.params))
    with pytest.raises(ValueError, match="trains on the data of its first fit"):
        thrice.fit((X, y), validation_split=0.3, epochs=7)


def test_two_trainers_keep_their_own_stops_and_put_the_handlers_back(tmp_path, monkeypatch):
    """Two trainers built one after the other: a SIGUSR1 before their fits stops the innermost (the last built)
    after its first step, not the other, and its checkpoint is the working directory's hpcgpu-stopped.ckpt.h5;
    once both have fit, SIGTERM's handler is what it was before them."""
    import signal

    import hpcgpu

    monkeypatch.chdir(tmp_path)  # where the stopped trainer, given no checkpoint=, writes one

    before = signal.getsignal(signal.SIGTERM)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 4)), rng.integers(0, 2, 200)

    def trainer():
        return hpcgpu.Trainer(nn.Sequential(nn.Dense(4, 2)), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                              batch_size=20, epochs=3, progress="none")

    first, second = trainer(), trainer()
    os.kill(os.getpid(), signal.SIGUSR1)
    second.fit((X, y))
    first.fit((X, y))
    assert (second.stopped_by, second.step, second.checkpoint_file) == ("SIGUSR1", 1, "hpcgpu-stopped.ckpt.h5")
    assert (tmp_path / "hpcgpu-stopped.ckpt.h5").is_file()
    assert (first.stopped_by, first.step) == (None, 30)
    assert signal.getsignal(signal.SIGTERM) == before


def test_validation_split_holds_out_the_last_rows_as_keras_does():
    """fit((X, y), validation_split=0.25) is fit on the first 75% with the last 25% as validation, to the bit; a
    split with validation=, of a file, or leaving no row is one agreed line."""
    import hpcgpu
    from hpcgpu.errors import AgreedError

    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(80, 5)), rng.integers(0, 3, 80)

    def trainer():
        return hpcgpu.Trainer(nn.Sequential(nn.Dense(5, 3)), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                              batch_size=20, epochs=2, seed=3, progress="none", dtype="float64")

    split = trainer()
    split.fit((X, y), validation_split=0.25)
    whole = trainer()
    whole.fit((X[:60], y[:60]), validation=(X[60:], y[60:]))
    assert split.history["val_loss"] == whole.history["val_loss"]
    np.testing.assert_array_equal(asnumpy(split.model.params), asnumpy(whole.model.params))
    for kwargs, words in (({"validation_split": 0.25, "validation": (X, y)}, "without validation="),
                          ({"validation_split": 1.5}, "between 0 and 1"),
                          ({"validation_split": 0.999}, "leaves no row")):
        with pytest.raises(ValueError, match=words) as e:
            trainer().fit((X, y), **kwargs)
        assert isinstance(e.value, AgreedError)


def test_an_epoch_line_shows_only_the_metrics_that_exist(capsys):
    """Without a validation set the epoch line has no test_* (they would be NaN); with one, it has them."""
    import hpcgpu

    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(60, 4)), rng.integers(0, 2, 60)
    for kwargs, shown in (({}, False), ({"validation_split": 0.5}, True)):
        hpcgpu.Trainer(nn.Sequential(nn.Dense(4, 2)), nn.SoftmaxCrossEntropy(), optim.SGD(0.1), batch_size=10,
                       epochs=1, progress="lines").fit((X, y), **kwargs)
        line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("epoch")][-1]
        assert ("val_loss" in line and "val_accuracy" in line) == shown and "nan" not in line, line


def test_early_stopping_ends_after_patience_and_restores_the_best_epoch():
    """EarlyStopping on a metric that never improves after epoch 1 (train_loss watched as if larger were better):
    the training ends after epoch 1 + patience, and the parameters are epoch 1's, bitwise a 1-epoch run's; a
    val_* monitor without a validation set is one agreed line."""
    import hpcgpu
    from hpcgpu.errors import AgreedError
    from hpcgpu.train import EarlyStopping

    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(90, 5)), rng.integers(0, 3, 90)

    def trainer(epochs):
        return hpcgpu.Trainer(nn.Sequential(nn.Dense(5, 8, "relu"), nn.Dense(8, 3)), nn.SoftmaxCrossEntropy(),
                              optim.SGD(0.1), batch_size=30, epochs=epochs, seed=9, progress="none",
                              dtype="float64")

    stop = EarlyStopping(monitor="train_loss", mode="max", patience=2)
    t = trainer(10)
    t.fit((X, y), callbacks=[stop])
    assert t.epoch == 3 and len(t.history["train_loss"]) == 3 and (stop.best_epoch, stop.stopped_epoch) == (1, 3)
    one = trainer(1)
    one.fit((X, y))
    np.testing.assert_array_equal(asnumpy(t.model.params), asnumpy(one.model.params))
    with pytest.raises(ValueError, match="EarlyStopping: the epochs have no val_loss \\(no validation set\\)") as e:
        trainer(3).fit((X, y), callbacks=[EarlyStopping()])
    assert isinstance(e.value, AgreedError)
    assert str(e.value).endswith("monitor one of train_loss, train_accuracy")  # the metrics, not lr or timings


@pytest.mark.mpi
def test_early_stopping_agrees_at_3_ranks():
    """At 3 ranks the callbacks see rank 0's row: every rank stops after the same epoch with the same best
    parameters as at 1 rank; a monitor the epochs lack is one line and exit 2, never a hang."""
    one, three = _fit("early", 1), _fit("early", 3)
    assert one["epoch"] == three["epoch"] == 3
    for k, v in one["params"].items():
        np.testing.assert_allclose(three["params"][k], v, rtol=1e-9, atol=1e-12, err_msg=k)
    p = _mpi.run(3, [SCRIPT, "early-bad"], timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "EarlyStopping: the epochs have no val_loss (no validation set)" in lines[0], p.stderr


@pytest.mark.mpi
def test_standardize_takes_the_training_rows_statistics_and_travels_with_the_model(tmp_path):
    """nn.Standardize without statistics: the first fit computes every feature's mean and standard deviation
    over all the ranks' rows (3 ranks, each its own uneven rows, as 1 rank with them all; numpy's); the model
    trains on the standardized inputs, and the statistics are saved with it: load_model predicts the same bits."""
    import importlib.util

    import hpcgpu

    spec = importlib.util.spec_from_file_location("library_fit", os.path.join(_mpi.SCRIPTS, "library_fit.py"))
    library_fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(library_fit)
    p = _mpi.run(3, [os.path.join(_mpi.SCRIPTS, "library_fit.py"), "standardize"], timeout=240)
    assert p.returncode == 0, p.stderr
    three = json.loads(p.stdout.strip().splitlines()[-1])
    X, y = library_fit.data("classification")
    X = X * np.array([1.0, 100.0, 0.01, 5.0, 1e3, 1.0]) + np.array([0.0, 50.0, -3.0, 0.0, 1e4, 7.0])
    t = hpcgpu.Trainer(library_fit.standardized_net(), nn.SoftmaxCrossEntropy(), optim.Adam(lr=1e-2),
                       batch_size=24, epochs=3, seed=3, dtype="float64", progress="none", out=str(tmp_path / "r.h5"))
    t.fit((X[:250], y[:250]))
    layer = t.model.net.standardize
    np.testing.assert_allclose(layer.mean, X[:250].mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(layer.std, X[:250].std(axis=0), rtol=1e-13)
    np.testing.assert_allclose(three["mean"], layer.mean, rtol=1e-14)
    np.testing.assert_allclose(three["std"], layer.std, rtol=1e-13)
    for k, v in t.params.items():
        np.testing.assert_allclose(three["params"][k], asnumpy(v), rtol=1e-6, atol=1e-9, err_msg=k)
    raw = hpcgpu.Trainer(nn.Sequential(nn.Dense(6, 16, "relu"), nn.Dense(16, 3)), nn.SoftmaxCrossEntropy(),
                         optim.Adam(lr=1e-2), batch_size=24, epochs=3, seed=3, dtype="float64", progress="none")
    raw.fit((X[:250], y[:250]))  # the same layers on the raw features (scales 0.01 to 1e3, offsets to 1e4)
    assert t.history["train_loss"][-1] < 0.8 * raw.history["train_loss"][-1]
    assert t.history["train_accuracy"][-1] > raw.history["train_accuracy"][-1] + 0.1
    views = {k: asnumpy(v) for k, v in t.params.items()}  # the engine standardizes, then runs the layers
    want = _plain_forward(views, ["relu", None], (X[250:] - layer.mean) / layer.std)
    np.testing.assert_allclose(t.predict(X[250:]), want, rtol=1e-12, atol=1e-12)
    t.save_results()
    back = hpcgpu.load_model(str(tmp_path / "r.h5"))
    np.testing.assert_array_equal(back.model.net.standardize.std, layer.std)
    np.testing.assert_array_equal(back.predict(X[250:]), t.predict(X[250:]))
    with pytest.raises(ValueError, match="Standardize must be the first layer"):
        nn.Sequential(nn.Dense(6, 4), nn.Standardize())


@pytest.mark.device
def test_flatten_takes_samples_of_any_shape_as_the_rows_they_hold(tmp_path):
    """Features given as 8 x 8 images train through nn.Flatten() as the same 64 features given as rows (the same
    bits); the flattened model saves, loads and predicts images; without Flatten, images are one line naming the
    shape and the cure; Flatten anywhere but first is refused."""
    import hpcgpu
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = X[:300] / 16.0, y[:300]
    images = X.reshape(-1, 8, 8)

    def trainer(net, out=None):
        return hpcgpu.Trainer(net, nn.SoftmaxCrossEntropy(), optim.Adam(lr=1e-2), batch_size=32, epochs=2, seed=5,
                              dtype="float64", progress="none", out=out)

    rows = trainer(nn.Sequential(nn.Dense(64, 16, "relu"), nn.Dense(16, 10)))
    rows.fit((X, y))
    flat = trainer(nn.Sequential(nn.Flatten(), nn.Dense(64, 16, "relu"), nn.Dense(16, 10)), str(tmp_path / "f.h5"))
    flat.fit((images, y), validation=(images[:50], y[:50]))
    for k, v in rows.params.items():
        np.testing.assert_array_equal(asnumpy(flat.params[k]), asnumpy(v), err_msg=k)
    np.testing.assert_array_equal(flat.predict(images), rows.predict(X))
    assert flat.evaluate((images, y))["accuracy"] == rows.evaluate((X, y))["accuracy"]
    flat.save_results()
    back = hpcgpu.load_model(str(tmp_path / "f.h5"))
    assert back.model.net.flatten
    np.testing.assert_array_equal(back.predict(images), flat.predict(images))
    with pytest.raises(ValueError, match=r"samples of shape \(8, 8\): put nn.Flatten\(\) first .* \(n, 64\)"):
        trainer(nn.Sequential(nn.Dense(64, 10))).fit((images, y))
    with pytest.raises(ValueError, match="Flatten must be the first layer"):
        nn.Sequential(nn.Dense(64, 10), nn.Flatten())
    std = nn.Sequential(nn.Flatten(), nn.Standardize(), nn.Dense(64, 10))  # Standardize right after Flatten
    assert std.flatten and std.standardize is not None and std.sizes == [64, 10]


@pytest.mark.device
def test_dense_units_takes_its_inputs_from_the_layer_before_and_the_first_from_the_data(tmp_path):
    """Keras's Dense(units): the first layer's input features come from the first fit's data (arrays, images
    through Flatten, an HDF5 file), the others' from the layer before; the model is bitwise the one written with
    every width. Before that fit, what needs the model is one line saying to fit first."""
    import hpcgpu

    X, y = blobs(240, 5, 3, seed=4, dtype=np.float64)

    def trainer(net, **kw):
        return hpcgpu.Trainer(net, nn.SoftmaxCrossEntropy(), optim.SGD(lr=0.1, momentum=0.9), batch_size=24,
                              epochs=2, seed=2, dtype="float64", progress="none", **kw)

    full = trainer(nn.Sequential(nn.Dense(5, 8, "relu"), nn.Dense(8, 3)))
    full.fit((X, y))
    units = trainer(nn.Sequential(nn.Dense(8, activation="relu"), nn.Dense(3)), out=str(tmp_path / "u.h5"))
    with pytest.raises(ValueError, match=r"^Trainer: the model takes its input features from the first "
                                         r"fit's data \(its first layer is Dense\(units\)\): call fit first$"):
        _ = units.params
    for ask in (lambda: units.predict(X), units.comm_stats, lambda: units.stopped_by,
                lambda: units.save_checkpoint(str(tmp_path / "c.h5"))):
        with pytest.raises(ValueError, match="call fit first"):
            ask()
    units.fit((X, y))
    waiting = trainer(nn.Sequential(nn.Dense(8), nn.Dense(3)))
    waiting.close()  # nothing bound yet: nothing to free, no error
    with pytest.raises(ValueError, match="^save_checkpoint: no data yet: .* call fit first$"):  # a built model too
        full_before = trainer(nn.Sequential(nn.Dense(5, 3)))
        full_before.save_checkpoint(str(tmp_path / "c.h5"))
    with pytest.raises(TypeError, match="optimizer must be an hpcgpu.optim optimizer"):  # checked at once
        hpcgpu.Trainer(nn.Sequential(nn.Dense(8), nn.Dense(3)), nn.SoftmaxCrossEntropy(), "sgd", progress="none")
    assert repr(units.model.net) == "Sequential(Dense(5, 8, activation='relu'), Dense(8, 3))"
    for k, v in full.params.items():
        np.testing.assert_array_equal(asnumpy(units.params[k]), asnumpy(v), err_msg=k)
    units.save_results()
    np.testing.assert_array_equal(hpcgpu.load_model(str(tmp_path / "u.h5")).predict(X), full.predict(X))
    images = trainer(nn.Sequential(nn.Flatten(), nn.Dense(8, "relu"), nn.Dense(3)))
    images.fit((X[:, :4].reshape(-1, 2, 2), y))
    assert images.model.net.sizes == [4, 8, 3]
    path = tmp_path / "d.h5"
    write_h5(str(path), **{"train/X": X[:200], "train/y": y[:200], "test/X": X[200:], "test/y": y[200:]})
    from_file = trainer(nn.Sequential(nn.Dense(8, "relu"), nn.Dense(3)))
    from_file.fit(str(path))
    assert from_file.model.net.sizes == [5, 8, 3]
    with pytest.raises(ValueError, match="first Dense layer's input features are not known"):
        nn.plan_model(nn.Sequential(nn.Dense(4), nn.Dense(2)), nn.SoftmaxCrossEntropy())


def test_the_held_out_metrics_are_named_by_where_the_set_comes_from(tmp_path):
    """A validation set given in Python (arrays, validation_split) gives Keras's val_* names, a data file's /test
    split the command line's test_* (in the history, the epoch line's words and the results file); evaluate
    drops the prefix and EarlyStopping() watches the held-out loss by either name."""
    import hpcgpu
    from hpcgpu.train import EarlyStopping

    X, y = blobs(200)
    path = write_h5(tmp_path / "d.h5", train__X=X[:160], train__y=y[:160], test__X=X[160:], test__y=y[160:])
    seen = {}
    for name, args, kwargs in (("val", ((X, y),), {"validation_split": 0.2}), ("test", (path,), {})):
        stop = EarlyStopping(patience=50)
        t = hpcgpu.Trainer(nn.Sequential(nn.Dense(6, 8, "relu"), nn.Dense(8, 3)), nn.SoftmaxCrossEntropy(),
                           optim.SGD(0.1), batch_size=40, epochs=2, seed=1, progress="none",
                           out=str(tmp_path / f"{name}.h5"))
        h = t.fit(*args, callbacks=[stop], **kwargs)
        other = "test" if name == "val" else "val"
        assert f"{name}_loss" in h and f"{name}_accuracy" in h and f"{other}_loss" not in h
        assert np.isfinite(h[f"{name}_loss"]).all() and stop.monitor == f"{name}_loss"
        assert set(t.evaluate((X, y))) == {"loss", "accuracy"}
        t.save_results()
        with h5py.File(tmp_path / f"{name}.h5") as f:
            assert f"{name}_accuracy" in f["metrics"] and f"{other}_accuracy" not in f["metrics"]
        seen[name] = h
    # validation_split holds out the last fifth, the rows of the file's /test: the same values by either name
    assert seen["val"]["val_loss"] == seen["test"]["test_loss"]


def test_labels_of_every_array_kind_and_values_beyond_float32_are_read_alike(tmp_path):
    """Labels as a column (N, 1) or True/False train as their integers whether NumPy arrays or h5py datasets
    (a NumPy-only conversion missed h5py: the review of the third trial's fixes); a finite value beyond
    float32's range is named as such in features of objects and in regression targets, with no NumPy warning."""
    import warnings

    import h5py

    import hpcgpu

    rng = np.random.default_rng(7)
    X, y = rng.normal(size=(40, 3)), rng.integers(0, 2, 40)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["X"], f["col"], f["flag"] = X, y.reshape(-1, 1), y == 1

    def trainer(**kw):
        return hpcgpu.Trainer(nn.Sequential(nn.Dense(3, 2)), nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
                              batch_size=10, epochs=1, seed=0, progress="none", dtype="float64", **kw)

    ref = trainer()
    ref.fit((X, y))
    with h5py.File(tmp_path / "d.h5", "r") as f:
        for labels in (y.reshape(-1, 1), y == 1, f["col"], f["flag"]):
            t = trainer()
            t.fit((f["X"], labels))
            np.testing.assert_array_equal(asnumpy(t.model.params), asnumpy(ref.model.params))
    big = X.astype(object)
    big[5, 1] = 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning before the line
        with pytest.raises(ValueError, match=r"^data: X row 5 holds 1e\+300, beyond float32's range"):
            hpcgpu.Trainer(nn.Sequential(nn.Dense(3, 2)), nn.SoftmaxCrossEntropy(), batch_size=10,
                           progress="none").fit((big, y))
        target = rng.normal(size=40)
        target[3] = -1e300
        with pytest.raises(ValueError, match=r"^data: y row 3 holds 1e\+300, beyond float32's range .*rescale the "
                                             r"data$"):
            hpcgpu.Trainer(nn.Sequential(nn.Dense(3, 1)), nn.MeanSquaredError(), batch_size=10,
                           progress="none").fit((X, target))
