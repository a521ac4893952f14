import math

import numpy as np
import pytest

from hpcgpu.train import MLP, SGD, LRSchedule


def _loss(model, X, y):
    logits = model.forward(X)
    z = logits - logits.max(axis=1, keepdims=True)
    return float((np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]).sum())


@pytest.mark.parametrize("sizes", [[5, 7, 4, 3], [5, 3], [2, 16, 16, 16, 4]])
def test_gradient_matches_central_differences(sizes):
    rng = np.random.default_rng(1)
    m = MLP(sizes, dtype="float64", seed=3)
    m.params += rng.normal(0, 0.1, m.n_params)  # non-zero biases, so every term is exercised
    X = rng.normal(size=(9, sizes[0]))
    y = rng.integers(0, sizes[-1], 9)
    m.loss_and_grad(X, y)
    analytic = m.grad.copy()
    assert m.stats[0] == pytest.approx(_loss(m, X, y), rel=1e-12)
    h = 1e-6
    numeric = np.empty(m.n_params)
    for i in range(m.n_params):
        old = m.params[i]
        m.params[i] = old + h
        up = _loss(m, X, y)
        m.params[i] = old - h
        down = _loss(m, X, y)
        m.params[i] = old
        numeric[i] = (up - down) / (2 * h)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_parameters_are_views_of_one_flat_buffer():
    m = MLP([4, 3, 2], seed=0)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"]
    assert m.n_params == 4 * 3 + 3 + 3 * 2 + 2
    for _, v in m.named_parameters():
        assert np.shares_memory(v, m.params)
    m.params[:] = 7
    assert all((v == 7).all() for _, v in m.named_parameters())
    assert m.grad.shape == (m.n_params,) and m.stats.shape == (2,)
    # the gradient and the step's statistics can live in a buffer the caller owns (the trainer's reducer)
    flat = np.zeros(m.n_params + 3)
    mm = MLP([4, 3, 2], dtype="float64", seed=0, grad=flat[: m.n_params], stats=flat[m.n_params : m.n_params + 2])
    mm.loss_and_grad(np.ones((2, 4)), np.array([0, 1]))
    assert flat[: m.n_params].any() and flat[m.n_params] > 0 and flat[-1] == 0
    with pytest.raises(ValueError, match="grad must be of shape"):
        MLP([4, 3, 2], grad=np.zeros(m.n_params + 1, np.float32))


def test_same_seed_same_init_and_he_bound():
    a, b = MLP([100, 50, 10], seed=4), MLP([100, 50, 10], seed=4)
    np.testing.assert_array_equal(a.params, b.params)
    w = dict(a.named_parameters())["fc0.weight"]
    assert np.abs(w).max() <= math.sqrt(6 / 100)
    assert (dict(a.named_parameters())["fc0.bias"] == 0).all()
    assert not np.array_equal(a.params, MLP([100, 50, 10], seed=5).params)


def test_loss_sum_and_correct_count_slots():
    m = MLP([2, 3], dtype="float64", seed=0)
    m.params[:] = 0
    w = dict(m.named_parameters())["fc0.weight"]
    w[0, 1] = 50.0  # class 1 wins whenever x0 > 0
    X = np.array([[1.0, 0], [1.0, 0], [-1.0, 0]])
    y = np.array([1, 0, 0])
    m.loss_and_grad(X, y)
    # logits: [0, 50, 0], [0, 50, 0], [0, -50, 0] -> predictions 1, 1, 0: two right
    assert m.stats[1] == 2
    expected = 2 * math.log(1 + 2 * math.exp(-50)) + (50 + math.log(2 + math.exp(-50)))
    assert m.stats[0] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_accumulated_micro_batches_give_the_whole_batch(dtype):
    """loss_and_grad over K micro-batches with accumulate=True: the gradient and the statistics of the whole
    batch, up to summation order."""
    rng = np.random.default_rng(2)
    whole, parts = MLP([6, 9, 7, 4], dtype=dtype, seed=1), MLP([6, 9, 7, 4], dtype=dtype, seed=1)
    X, y = rng.normal(size=(24, 6)).astype(dtype), rng.integers(0, 4, 24)
    whole.loss_and_grad(X, y)
    parts.grad[:] = np.nan  # overwritten by the first micro-batch, never read
    for k, (lo, hi) in enumerate([(0, 5), (5, 13), (13, 24)]):
        parts.loss_and_grad(X[lo:hi], y[lo:hi], accumulate=k > 0)
    tol = {"float32": 1e-5, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(parts.grad, whole.grad, rtol=tol, atol=tol)
    np.testing.assert_allclose(parts.stats, whole.stats, rtol=tol)


def test_evaluate_matches_loss_and_grad_in_chunks():
    rng = np.random.default_rng(0)
    m = MLP([6, 8, 4], dtype="float64", seed=1)
    X, y = rng.normal(size=(50, 6)), rng.integers(0, 4, 50)
    m.loss_and_grad(X, y)
    tot = m.evaluate_sums(X, y, chunk=7)
    assert tot[0] == pytest.approx(m.stats[0], rel=1e-12) and tot[1] == m.stats[1]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("blas", [True, False])
@pytest.mark.parametrize("momentum, wd", [(0.5, 0.1), (0.0, 0.0), (0.9, 0.0)])
def test_sgd_matches_the_closed_form(dtype, blas, momentum, wd):
    p0, g = np.array([1.0, -2.0, 0.5]), np.array([0.6, 0.8, -0.2])
    p = p0.astype(dtype)
    opt = SGD(0.2, momentum=momentum, weight_decay=wd)
    state = opt.init(p)
    if not blas:
        opt._host_blas = False  # the device path's plain array arithmetic, run on NumPy
    v = np.zeros(3)
    for _ in range(3):
        before = p.astype(np.float64)
        opt.update(g.astype(dtype), state, p, lr=0.2, scale=0.5)
        v = momentum * v + 0.5 * g + wd * before
        np.testing.assert_allclose(p, before - 0.2 * v, rtol=1e-6 if dtype == "float32" else 1e-14)
    np.testing.assert_allclose(state["velocity"], v, rtol=1e-6 if dtype == "float32" else 1e-14)


def test_schedules():
    s = LRSchedule(1.0, total_steps=110, warmup_steps=10, kind="cosine")
    assert s(0) == pytest.approx(0.1) and s(9) == pytest.approx(1.0)
    assert s(10) == pytest.approx(1.0) and s(60) == pytest.approx(0.5) and s(110) == pytest.approx(0.0)
    st = LRSchedule(1.0, 100, 0, "step", step_size=30, gamma=0.1)
    assert [st(0), st(29), st(30), st(65)] == pytest.approx([1, 1, 0.1, 0.01])
    assert LRSchedule(0.3, 10, 0, "constant")(9) == 0.3
    with pytest.raises(ValueError, match="schedule"):
        LRSchedule(1, 10, kind="linear")


# -- the one model protocol ------------------------------------------------------------------------------------

class _Decay:
    """A model of one's own: y = a exp(-k x)."""

    def init(self, rng):
        return {"a": np.ones(1), "k": np.full(1, 0.5)}

    def loss_and_grad(self, p, x, y):
        e = np.exp(-p["k"] * x[:, 0])
        r = p["a"] * e - y.reshape(-1)
        return float((r * r).sum() / 2), {"a": np.array([(r * e).sum()]),
                                           "k": np.array([(r * -p["a"] * x[:, 0] * e).sum()])}

    def predict(self, p, x):
        return p["a"] * np.exp(-p["k"] * x[:, 0])


def test_the_built_in_layers_and_a_model_of_ones_own_both_implement_the_protocol():
    from hpcgpu import nn
    from hpcgpu.nn._protocol import BUILT_IN, OWN, TrainModel, plan_model

    built = plan_model(nn.Sequential(nn.Dense(4, 6, "relu"), nn.Dense(6, 3)), nn.SoftmaxCrossEntropy())
    own = plan_model(_Decay())
    assert built.capabilities == BUILT_IN and own.capabilities == OWN
    assert built.size(1, 0, 0) == (4 * 6 + 6 + 6 * 3 + 3, [(0, 30), (30, 51)]) and own.size(1, 0, 0) == (2, None)
    assert (built.name, built.hidden) == ("the model [4, 6, 3]", [6]) and own.name == "model _Decay"
    net = built.bind(np, np.dtype("float64"), 0, task=None)
    mine = own.bind(np, np.dtype("float64"), 0, task=None)
    for m in (net, mine):
        assert isinstance(m, TrainModel), type(m)
    assert (net.n_inputs, net.n_outputs, net.num_classes, net.loss_name, net.hidden) == (4, 3, 3, "cross-entropy",
                                                                                        (6,))
    assert (mine.n_inputs, mine.num_classes, mine.loss_name, mine.task) == (None, None, "", "regression")
    assert net.flops_per_sample() == 6 * (4 * 6 + 6 * 3) - 2 * 4 * 6 and mine.flops_per_sample() == 0.0
    assert net.describe() == "model [4, 6, 3] (51 parameters), loss cross-entropy"
    assert mine.describe() == "model _Decay (2 parameters)"
    x, y = np.linspace(0, 1, 5)[:, None], np.exp(-np.linspace(0, 1, 5))
    mine.loss_and_grad(x, y)
    assert mine.stats[0] > 0 and np.isfinite(mine.grad).all() and mine.grad.any()


def test_a_model_that_is_no_model_is_one_line_naming_what_it_lacks():
    from hpcgpu import nn
    from hpcgpu.nn._protocol import plan_error

    assert "needs the method(s) loss_and_grad, predict" in str(plan_error(type("Half", (), {"init": id})(), None))
    assert "is a layer: give a Sequential" in str(plan_error(nn.Dense(2, 3), nn.MeanSquaredError()))
    assert "needs a loss" in str(plan_error(nn.Sequential(nn.Dense(2, 3)), None))
    assert "computes its own loss" in str(plan_error(_Decay(), nn.MeanSquaredError()))
    assert plan_error(_Decay(), None) is None


MODEL_CLASSES = {"Network", "Sequential", "FlatModel", "Model", "MLP", "Layer", "Dense"}


def test_only_the_protocols_module_asks_which_kind_a_model_is():
    """No isinstance on a model class anywhere in hpcgpu but nn/_protocol.py, and nn/_layers.py (Sequential
    composing its layers, which are not models): the trainer asks the protocol, never the class."""
    import ast
    import os

    import _mpi

    exempt = [os.path.join("hpcgpu", "nn", m) for m in ("_protocol.py", "_layers.py")]
    found = []
    for dp, _, files in os.walk(os.path.join(_mpi.ROOT, "hpcgpu")):
        for f in files:
            path = os.path.join(dp, f)
            rel = os.path.relpath(path, _mpi.ROOT)
            if not f.endswith(".py") or rel in exempt:
                continue
            for node in ast.walk(ast.parse(open(path).read())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass"):
                    names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                    names |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
                    if names & MODEL_CLASSES:
                        found.append(f"{rel}:{node.lineno}")
    assert not found, found


def test_a_model_adding_into_the_buffer_gives_its_loss_before_any_gradient_is_final():
    """A model's ``loss_and_grad_into`` (the autograd adapters' path): the loss and metric reach the stats before
    the first ``on_layer`` (they ride in the first bucket reduced), the calls come in reverse order whatever order
    the model finishes its parameters in, and a model that says a gradient is final before its loss is refused."""
    from hpcgpu.nn import FlatModel

    class Linear:
        def __init__(self, order, loss_first=True):
            self.order, self.loss_first = order, loss_first

        def init(self, rng):
            return {"w": np.ones(3), "b": np.zeros(1), "c": np.zeros(2)}

        def loss_and_grad(self, p, x, y):
            raise AssertionError("loss_and_grad_into is the path")

        def predict(self, p, x):
            return x @ p["w"] + p["b"]

        def loss_and_grad_into(self, p, g, x, y, forward_done, ready):
            r = x @ p["w"] + p["b"] - y
            if self.loss_first:
                forward_done(float((r * r).sum()), x @ p["w"] + p["b"])
            g["w"] += 2 * (x.T @ r)
            g["b"] += 2 * r.sum()
            for name in self.order:  # "c" never: the loss does not reach it
                ready(name)

    x, y = np.arange(12.0).reshape(4, 3), np.ones(4)
    for order in (["b", "w"], ["w", "b"]):
        m = FlatModel(Linear(order), task="regression")
        seen = []
        m.loss_and_grad(x, y, on_layer=lambda i, m=m, seen=seen: seen.append((i, float(m.stats[0]))))
        r = x @ np.ones(3) - y
        assert seen == [(2, (r * r).sum()), (1, (r * r).sum()), (0, (r * r).sum())], seen
        np.testing.assert_array_equal(m.grad, np.concatenate([2 * (x.T @ r), [2 * r.sum()], [0, 0]]))
    with pytest.raises(RuntimeError, match="ready\\('b'\\) before forward_done"):
        FlatModel(Linear(["b"], loss_first=False), task="regression").loss_and_grad(x, y)
