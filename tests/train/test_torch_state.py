"""nn.Torch's whole module state is the model: frozen parameters and buffers made rank 0's and kept in results files
and checkpoints, tied weights under each of their names, parameter hooks on the gradient the reducer sees; nn.Jax's
leaves are trained unless marked (trainable=)."""

import importlib.util
import json
import os

import numpy as np
import pytest

import _mpi
import torch_state_models as tsm
from hpcgpu import optim
from hpcgpu._device import asnumpy

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")


def _standin() -> bool:
    import hpcgpu._device as d

    cupy = d.cupy_or_none()
    return cupy is not None and cupy.__version__.endswith("+standin")


pytestmark = [pytestmark, pytest.mark.skipif(
    _standin(), reason="nn.Torch on the device path needs PyTorch's CUDA: the CuPy stand-in is no device PyTorch "
    "can take (tests/train/test_autograd.py's GPU test runs it on a GPU node)")]


def _fit(kind, seed):
    """The trainer of ``kind``'s module from ``seed`` after fit, and its adapter."""
    import hpcgpu

    m = tsm.model(kind, seed)
    t = hpcgpu.Trainer(m, optimizer=optim.SGD(lr=0.05, momentum=0.9), **tsm.COMMON)
    t.fit(tsm.data())
    return t, m


def test_frozen_and_tied_weights_train_as_in_pytorch_and_go_back_strictly(tmp_path):
    """A frozen layer stays as initialized and is no parameter of the trainer's; a tied weight is one parameter;
    the results file holds the frozen layer (/buffers), and Torch.state_dict gives every key of the module's
    state_dict (the tied weight under both names, not the non-persistent buffer), which a fresh module of other
    initial values loads strictly and then predicts what the trainer predicts."""
    import torch

    t, m = _fit("frozen_tied", 100)
    frozen = tsm.module("frozen_tied", 100).embed
    assert sorted(t.params) == ["head.bias", "head.weight", "hidden.bias", "hidden.weight"]
    assert sorted(t.model.buffers()) == ["embed.bias", "embed.weight", "scratch"]
    np.testing.assert_array_equal(asnumpy(t.model.buffers()["embed.weight"]), frozen.weight.numpy())
    path = t.save_results(str(tmp_path / "r.h5"))
    fresh = tsm.module("frozen_tied", 999)
    state = m.state_dict(path)
    assert list(state) == list(fresh.state_dict())
    fresh.load_state_dict(state, strict=True)
    assert fresh.out.weight is fresh.hidden.weight  # still tied after the load
    np.testing.assert_array_equal(fresh.embed.weight.detach().numpy(), frozen.weight.numpy())
    X, _ = tsm.data()
    with torch.no_grad():
        np.testing.assert_allclose(fresh.eval()(torch.from_numpy(X)).numpy(), t.predict(X), rtol=1e-12)


def test_a_checkpoint_holds_the_frozen_layer_and_batchnorm_and_resumes_bitwise(tmp_path):
    """A run of 3 epochs against 1 epoch with a checkpoint resumed to 3 by a module of other initial values: the
    checkpoint gives it the frozen layer and BatchNorm's statistics, and the resumed run is the whole one,
    bitwise."""
    import hpcgpu

    opts = dict(tsm.COMMON, optimizer=optim.Adam(0.01))
    ck = str(tmp_path / "ck.h5")
    runs = {}
    for run, seed, extra in (("whole", 100, {}), ("first", 100, {"epochs": 1, "checkpoint": ck}),
                             ("resumed", 300, {"checkpoint": ck, "resume": True})):
        t = hpcgpu.Trainer(tsm.model("frozen_bn", seed), **{**opts, **extra})
        t.fit(tsm.data())
        runs[run] = t
    whole, resumed = runs["whole"], runs["resumed"]
    assert resumed.resumed_from == ck and resumed.history["train_loss"] == whole.history["train_loss"]
    np.testing.assert_array_equal(asnumpy(resumed.model.params), asnumpy(whole.model.params))
    assert sorted(whole.model.buffers()) == ["0.bias", "0.weight", "1.num_batches_tracked", "1.running_mean",
                                             "1.running_var"]
    for k, v in whole.model.buffers().items():
        np.testing.assert_array_equal(asnumpy(resumed.model.buffers()[k]), asnumpy(v), err_msg=k)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([2, 3], [3]))
def test_modules_initialized_per_rank_give_the_one_rank_model(nprocs, tmp_path):
    """Every rank's module from its own seed (the frozen layer too, as a user's per-rank initialization would
    make it): the frozen layer is data rank 0's on every rank, so the model at 2 and 3 ranks is the one of 1 rank
    from rank 0's seed; with BatchNorm, every rank holds data rank 0's statistics after fit, and a checkpoint
    resumed by modules of other initial values is the whole run, bitwise, on every rank."""
    p = _mpi.run(nprocs, [os.path.join(os.path.dirname(__file__), "torch_state_models.py"), str(tmp_path)],
                 timeout=300)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["bn_resumed_bitwise"]
    for rank in got["bn"]:
        assert rank == got["bn"][0]
    one, _ = _fit("frozen_tied", 100)
    np.testing.assert_allclose(got["frozen_tied_loss"], one.history["train_loss"], rtol=1e-10)
    for rank in got["frozen_tied"]:
        for k, v in one.params.items():
            np.testing.assert_allclose(rank["params"][k], asnumpy(v), rtol=1e-9, atol=1e-12, err_msg=k)
        for k, v in one.model.buffers().items():
            np.testing.assert_array_equal(rank["buffers"][k], asnumpy(v), err_msg=k)


def test_a_parameter_hook_runs_on_each_micro_batchs_gradient_before_the_reduction():
    """A hook of p.register_hook runs once a micro-batch on the gradient of the micro-batch's loss sum, and what
    it returns is what is reduced and applied: a hook that zeroes the head's bias gradient leaves the bias as
    initialized. A hook added between two fits is taken at the next step; one removed is no longer run."""
    import hpcgpu
    import torch

    m = tsm.model("frozen_tied", 100)
    calls = []
    handle = m.module.head.bias.register_hook(lambda g: (calls.append(g.clone()), torch.zeros_like(g))[1])
    t = hpcgpu.Trainer(m, optimizer=optim.SGD(lr=0.05, momentum=0.9), **tsm.COMMON, grad_accum_steps=2)
    X, y = tsm.data()
    t.fit((X, y))
    steps = tsm.COMMON["epochs"] * len(X) // tsm.COMMON["batch_size"]
    assert len(calls) == 2 * steps and any(c.abs().sum() > 0 for c in calls)
    np.testing.assert_array_equal(asnumpy(t.params["head.bias"]), tsm.module("frozen_tied", 100).head.bias.detach())
    handle.remove()
    seen = []
    m.module.hidden.weight.register_hook(lambda g: seen.append(1))
    before = asnumpy(t.params["head.bias"]).copy()
    t.fit((X, y), epochs=tsm.COMMON["epochs"] + 1)
    assert len(calls) == 2 * steps and len(seen) == 2 * len(X) // tsm.COMMON["batch_size"]
    assert not np.array_equal(asnumpy(t.params["head.bias"]), before)


def test_only_the_adapter_that_says_so_is_given_no_ready_signal():
    """One rank signals no gradient as ready (nothing overlaps a reduction there): nn.Torch says it takes
    ``ready=None``; a subclass that overrides ``loss_and_grad_into`` (it may call ``ready``) and a model of one's own
    are still given one, and a subclass that overrides it trains at one rank with its ``ready`` called."""
    import hpcgpu
    import torch
    from hpcgpu import nn
    from hpcgpu.nn._model import _ready_optional

    class Counted(nn.Torch):
        calls = 0

        def loss_and_grad_into(self, params, grads, x, y, forward_done, ready):
            def counted(name):
                Counted.calls += 1
                ready(name)
            super().loss_and_grad_into(params, grads, x, y, forward_done, counted)

    class Own:
        def loss_and_grad_into(self, params, grads, x, y, forward_done, ready):
            pass

    loss = torch.nn.CrossEntropyLoss(reduction="sum")
    assert _ready_optional(nn.Torch(torch.nn.Linear(3, 2), loss))
    assert not _ready_optional(Counted(torch.nn.Linear(3, 2), loss)) and not _ready_optional(Own())
    X, y = tsm.data()
    m = Counted(tsm.module("frozen_tied", 100), loss)
    t = hpcgpu.Trainer(m, optimizer=optim.SGD(lr=0.05), **tsm.COMMON)
    t.fit((X, y))
    steps = tsm.COMMON["epochs"] * len(X) // tsm.COMMON["batch_size"]
    assert Counted.calls == steps * len(m.names), (Counted.calls, steps, m.names)
    t.close()


def test_a_post_accumulate_grad_hook_is_refused_in_one_line():
    """register_post_accumulate_grad_hook is where the reducer takes each gradient: a user's is refused at the
    first step in one agreed line, never silently left out."""
    import hpcgpu
    from hpcgpu.errors import AgreedError

    m = tsm.model("frozen_tied", 100)
    m.module.head.weight.register_post_accumulate_grad_hook(lambda p: None)
    t = hpcgpu.Trainer(m, optimizer=optim.SGD(lr=0.05), **tsm.COMMON)
    with pytest.raises(TypeError) as e:
        t.fit(tsm.data())
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == ("Torch: parameter head.weight has a post-accumulate-grad hook "
                            "(register_post_accumulate_grad_hook), which hpcgpu does not run: its reducer takes each "
                            "gradient there; p.register_hook(fn) runs on each micro-batch's gradient")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_a_jax_leaf_that_is_not_floating_point_is_refused_in_one_line():
    """nn.Jax trains every leaf not marked otherwise (trainable=): an integer leaf (an index table, a counter) would
    be trained as floats, so it is refused in one agreed line naming it (tests/train/test_autograd_state.py: the
    mask)."""
    from hpcgpu import nn
    from hpcgpu.errors import AgreedError

    with pytest.raises(TypeError) as e:
        nn.Jax(lambda p, x: x @ p["w"], {"w": np.zeros((6, 3)), "steps": np.zeros(1, np.int32)})
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == ("Jax: params leaf steps is int32, not floating point, and is trained: mark it "
                            "non-trainable (trainable=, a mask of params) or keep it in apply's closure")
