"""Models with autograd: a PyTorch module (nn.Torch) and a JAX function (nn.Jax) train through the same trainer as
the built-in layers: the same model as the built-in MLP of the same weights, the same at 1 and 3 ranks, their
gradient autograd's of the loss sum, a trained module back into plain PyTorch from the results file."""

import importlib
import importlib.util
import json
import os

import numpy as np
import pytest

import _mpi
import autograd_models as am
from hpcgpu import nn, optim
from hpcgpu._device import asnumpy

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
# the JAX cases need JAX; the PyTorch ones run without it (a GPU node may have PyTorch alone)
HAS_JAX = importlib.util.find_spec("jax") is not None
JAX = pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")


class _OnFirstUse:
    """A module imported when a test first uses it: the pytest workers that collect this file without running
    its tests (each collects every file) do not import PyTorch (2 s of CPU a worker)."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


torch = _OnFirstUse("torch")


TORCH_DEVICE = _mpi.torch_device()


def _kinds(*kinds):
    """``kinds`` as parameters, the JAX ones skipped where JAX is not installed, the PyTorch ones in the stand-in's
    pass (:data:`TORCH_DEVICE`)."""
    return [pytest.param(k, marks=JAX if k.startswith("jax") else TORCH_DEVICE) for k in kinds]


def _built_in_run():
    """The built-in layers' run of the MLP from the same weights: what each adapter must give."""
    import hpcgpu

    t = hpcgpu.Trainer(nn.Sequential(nn.Dense(6, 16, "relu"), nn.Dense(16, 3)), nn.SoftmaxCrossEntropy(),
                       optim.SGD(lr=0.05, momentum=0.9), **am.COMMON)
    for view, w in zip(t.params.values(), am.weights(), strict=True):
        view[...] = t.xp.asarray(w)
    t.fit(am.data())
    return t


@pytest.mark.parametrize("kind", _kinds("torch", "jax"))
def test_an_autograd_model_trains_the_built_in_layers_model(kind):
    """The same MLP from the same weights: the adapter's run is the built-in layers' run, loss for loss and
    parameter for parameter (float64, up to the order of summation), and predicts the same outputs."""
    import hpcgpu

    want = _built_in_run()
    X, y = am.data()
    t = hpcgpu.Trainer(am.model(kind), optimizer=optim.SGD(lr=0.05, momentum=0.9), **am.COMMON)
    t.fit((X, y))
    assert t.model.task == "classification" and np.isfinite(t.history["train_accuracy"]).all()
    np.testing.assert_allclose(t.history["train_loss"], want.history["train_loss"], rtol=1e-10)
    ours = np.concatenate([asnumpy(v).ravel() for v in want.params.values()])
    # the same parameters in each layout: torch holds (out, in) weights
    theirs = {k: asnumpy(v) for k, v in t.params.items()}
    if kind == "torch":
        got = np.concatenate([theirs["0.weight"].T.ravel(), theirs["0.bias"], theirs["2.weight"].T.ravel(),
                              theirs["2.bias"]])
    else:
        got = np.concatenate([theirs[k].ravel() for k in ("fc0.w", "fc0.b", "fc1.w", "fc1.b")])
    np.testing.assert_allclose(got, ours, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(t.predict(X), want.predict(X), rtol=1e-9, atol=1e-12)


@pytest.mark.mpi
@JAX
@TORCH_DEVICE
def test_autograd_models_give_the_same_model_at_1_and_3_ranks(tmp_path):
    """Both adapters at 3 ranks (one launch) against 1 rank in process: the gradient is the SUM's, the trainer
    divides by the global batch once, so the model does not depend on the number of ranks. In the same launch, a
    PyTorch model with dropout under ZeRO-1, stopped at a checkpoint and resumed, is bitwise the uninterrupted
    run."""
    import hpcgpu

    p = _mpi.run(3, [os.path.join(_mpi.SCRIPTS, "library_fit.py"), "autograd", os.path.dirname(__file__)],
                 timeout=240)
    assert p.returncode == 0, p.stderr
    three = json.loads(p.stdout.strip().splitlines()[-1])
    # 100-byte buckets close at parameter boundaries: the last two parameters (24 + 384 bytes) make one
    assert three["torch_nbuckets"] == 1 and three["torch_per_parameter_nbuckets"] == 3
    assert three["bn_alike"] and three["bn_moved"]  # BatchNorm's statistics: data rank 0's on every rank
    # dropout under ZeRO-1 at 3 ranks: 2 epochs, a checkpoint, resumed to 4 is bitwise the run of 4
    assert three["dropout_zero1_resumed_bitwise"] and len(three["dropout_zero1_loss"]) == 4
    X, y = am.data()
    for kind in ("torch", "torch_per_parameter", "jax"):
        t = hpcgpu.Trainer(am.model(kind.split("_")[0]), optimizer=optim.SGD(lr=0.05, momentum=0.9), **am.COMMON)
        t.fit((X, y))
        np.testing.assert_allclose(three[kind + "_loss"], t.history["train_loss"], rtol=1e-10)
        for k, v in t.params.items():
            np.testing.assert_allclose(np.asarray(three[kind][k]), asnumpy(v), rtol=1e-9, atol=1e-12, err_msg=k)


@TORCH_DEVICE
def test_torch_adds_its_gradient_into_the_trainers_buffer_as_each_parameter_finishes():
    """nn.Torch's parameters' .grad are views of the trainer's flat gradient buffer: autograd adds into it (no
    copy; the adapter checks the memory is the same), each parameter says when its gradient is final, and the
    trainer passes that on in reverse order (the reducer's rule), a parameter the loss never reaches included."""
    import hpcgpu

    class TwoHeads(torch.nn.Module):  # "unused" takes no part in the loss: autograd never finishes it
        def __init__(self):
            super().__init__()
            self.body, self.unused = torch.nn.Linear(6, 3).double(), torch.nn.Linear(6, 2).double()

        def forward(self, x):
            return self.body(x)

    t = hpcgpu.Trainer(nn.Torch(TwoHeads(), torch.nn.CrossEntropyLoss(reduction="sum")),
                       optimizer=optim.SGD(lr=0.05), **am.COMMON)
    assert t.model.layer_ranges() == [(0, 18), (18, 21), (21, 33), (33, 35)]
    X, y = am.data()
    X, y = X[:30], np.minimum(y[:30], 2)
    calls = []
    t.model.grad[...] = 7.0  # a step's first micro-batch starts from zero, whatever the buffer held
    t.model.loss_and_grad(t.xp.asarray(X), t.xp.asarray(y), on_layer=calls.append)
    assert calls == [3, 2, 1, 0]
    ps = {n: torch.from_numpy(asnumpy(v).copy()).requires_grad_(True) for n, v in t.model._p.items()}
    out = torch.func.functional_call(TwoHeads(), ps, (torch.from_numpy(X),))
    loss = torch.nn.CrossEntropyLoss(reduction="sum")(out, torch.from_numpy(y))
    want = np.concatenate([g.numpy().ravel() for g in torch.autograd.grad(loss, list(ps.values())[:2])])
    np.testing.assert_allclose(asnumpy(t.model.grad[:21]), want, rtol=1e-12)
    assert not asnumpy(t.model.grad[21:]).any()  # the unused head: zero
    t.model.loss_and_grad(t.xp.asarray(X), t.xp.asarray(y), accumulate=True)  # a second micro-batch adds to the first
    np.testing.assert_allclose(asnumpy(t.model.grad[:21]), 2 * want, rtol=1e-12)


def test_the_gradient_is_autograds_and_the_contract_is_checked():
    """check_grad (finite differences in float64) passes for both adapters; a mean loss and an unknown loss name
    are refused with one line each."""
    X, y = am.data(12)
    for kind in ("torch", "jax") if HAS_JAX else ("torch",):
        errors = nn.check_grad(am.model(kind), X, y)
        assert max(errors.values()) < 1e-6, errors
    with pytest.raises(TypeError, match=r"the loss must sum over the samples .*reduction='mean'"):
        nn.Torch(torch.nn.Linear(6, 3), torch.nn.CrossEntropyLoss())
    if not HAS_JAX:
        return
    with pytest.raises(TypeError, match=r"Jax: loss must be 'cross-entropy', 'mse' or a callable, got 'l1'"):
        nn.Jax(lambda p, x: x, {"w": np.zeros(2)}, loss="l1")


@TORCH_DEVICE
def test_a_trained_module_goes_back_to_plain_pytorch(tmp_path):
    """save_results, then Torch.state_dict(path) into a fresh module of the same shape: plain PyTorch gives the
    trainer's predictions; JAX's tree() gives the pytree back by path."""
    import hpcgpu

    X, y = am.data()
    model = am.model("torch")
    t = hpcgpu.Trainer(model, optimizer=optim.Adam(0.01), out=str(tmp_path / "r.h5"), **am.COMMON)
    t.fit((X, y))
    t.save_results()
    fresh = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).double()
    fresh.load_state_dict(model.state_dict(str(tmp_path / "r.h5")))
    with torch.no_grad():
        plain = fresh(torch.from_numpy(X)).numpy()
    np.testing.assert_allclose(plain, t.predict(X), rtol=1e-12, atol=1e-12)
    if not HAS_JAX:
        return
    jm = am.model("jax")
    tree = jm.tree({k: asnumpy(v) for k, v in hpcgpu.Trainer(jm, optimizer=optim.SGD(0.1), **am.COMMON)
                    .params.items()})
    np.testing.assert_array_equal(tree["fc1"]["w"], am.weights()[2])


def _signal_at_step(trainer, step, monkeypatch):
    """A real SIGUSR1 to this process as ``trainer`` asks, at its ``step``-th step, whether a stop was requested (it
    asks once a step): a signal mid-epoch at a known step, not at a time."""
    import itertools
    import signal

    request, asked = trainer.stop_request, itertools.count(1)
    ask = request.requested

    def requested():
        if next(asked) == step:
            os.kill(os.getpid(), signal.SIGUSR1)
        return ask()

    monkeypatch.setattr(request, "requested", requested)


@pytest.mark.parametrize("kind", _kinds("torch", "torch-dropout", "torch-bn", "jax"))
def test_an_autograd_run_stopped_at_a_checkpoint_resumes_bitwise(kind, tmp_path, monkeypatch):
    """Checkpoints hold an adapter's parameters as any model's: a run of 4 epochs that a signal stops in its 11th
    step (the third of epoch 2: 8 steps an epoch), then resume=True to its end, is bitwise the run of 4; with
    dropout too (its masks are drawn from the step's key, not from what ran before), and with BatchNorm's running
    statistics (the checkpoint's /buffers)."""
    import hpcgpu

    X, y = am.data()
    opts = dict(am.COMMON, epochs=4)
    whole = hpcgpu.Trainer(am.model(kind), optimizer=optim.Adam(0.01), **opts)
    whole.fit((X, y))
    ck = str(tmp_path / "ck.h5")
    stopped = hpcgpu.Trainer(am.model(kind), optimizer=optim.Adam(0.01), **opts, checkpoint=ck)
    _signal_at_step(stopped, 11, monkeypatch)
    stopped.fit((X, y))
    assert stopped.stopped_by == "SIGUSR1" and stopped.step == 11 and stopped.checkpoint_file == ck, \
        (stopped.stopped_by, stopped.step)
    stopped.close()
    resumed = hpcgpu.Trainer(am.model(kind), optimizer=optim.Adam(0.01), **opts, checkpoint=ck, resume=True)
    resumed.fit((X, y))
    assert resumed.resumed_from == ck and resumed.stopped_by is None and resumed.step == 32
    assert resumed.history["train_loss"] == whole.history["train_loss"]
    np.testing.assert_array_equal(asnumpy(resumed.model.params), asnumpy(whole.model.params))
    for k, v in whole.model.buffers().items():
        np.testing.assert_array_equal(asnumpy(resumed.model.buffers()[k]), asnumpy(v), err_msg=k)


@TORCH_DEVICE
def test_dropout_draws_from_the_step_and_rank_not_from_the_process():
    """nn.Torch's dropout in training: active (another loss than without it), the same run after run whatever
    the process drew before, a mask of its own for each step and each data-parallel rank; PyTorch's own
    generator is left as it was."""
    import hpcgpu

    X, y = am.data()

    def run(model):
        t = hpcgpu.Trainer(model, optimizer=optim.SGD(lr=0.05), **am.COMMON)
        t.fit((X, y))
        return t.history["train_loss"], asnumpy(t.model.params)

    first = run(am.model("torch-dropout"))
    model = am.model("torch-dropout")  # (building a module draws from PyTorch's generator)
    torch.manual_seed(123)
    torch.rand(1000)  # the process draws something else in between
    state = torch.get_rng_state()
    again = run(model)
    assert torch.equal(torch.get_rng_state(), state)  # the trainer's draws came from forks of it
    assert first[0] == again[0]
    np.testing.assert_array_equal(first[1], again[1])
    assert run(am.model("torch"))[0] != first[0]  # the dropout is there
    m = am.model("torch-dropout")
    t = hpcgpu.Trainer(m, optimizer=optim.SGD(lr=0.05), **am.COMMON)
    Xb = t.xp.asarray(X[:30])
    losses = {}
    for key in [(5, 0, 0, 0), (5, 0, 0, 0), (5, 1, 0, 0), (5, 0, 0, 1)]:
        m.set_rng_key(key)
        t.model.loss_and_grad(Xb, t.xp.asarray(y[:30]))
        losses.setdefault(key, []).append(float(t.model.stats[0]))
    assert losses[(5, 0, 0, 0)][0] == losses[(5, 0, 0, 0)][1]  # the same key, the same masks
    assert len({v[0] for v in losses.values()}) == 3  # another step, another rank: other masks


@TORCH_DEVICE
def test_batchnorm_statistics_are_trained_kept_and_go_back_to_plain_pytorch(tmp_path):
    """A module with BatchNorm: its running statistics move in training, are written to the results file
    (/buffers), and a fresh module given Torch.state_dict(path) (strict) predicts in eval mode what the trainer
    predicts; load_weights puts them back in another trainer too."""
    import hpcgpu

    X, y = am.data()
    model = am.model("torch-bn")
    t = hpcgpu.Trainer(model, optimizer=optim.Adam(0.01), out=str(tmp_path / "r.h5"), **am.COMMON)
    t.fit((X, y))
    t.save_results()
    stats = {k: asnumpy(v).copy() for k, v in t.model.buffers().items()}
    assert set(stats) == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    assert np.abs(stats["1.running_mean"]).max() > 0 and int(stats["1.num_batches_tracked"]) == 4 * 8
    fresh = am.model("torch-bn").module
    fresh.load_state_dict(model.state_dict(str(tmp_path / "r.h5")))  # strict: parameters and buffers
    fresh.eval()
    with torch.no_grad():
        plain = fresh(torch.from_numpy(X)).numpy()
    np.testing.assert_allclose(plain, t.predict(X), rtol=1e-12, atol=1e-12)
    other = hpcgpu.Trainer(am.model("torch-bn"), optimizer=optim.Adam(0.01), **am.COMMON)
    other.load_weights(str(tmp_path / "r.h5"))
    np.testing.assert_array_equal(other.predict(X), t.predict(X))
    import h5py

    with h5py.File(tmp_path / "r.h5", "a") as f:  # a file without the statistics: refused, by name
        del f["buffers"]
    with pytest.raises(ValueError, match=r"r\.h5: no /buffers: the file holds no buffer of the model's"):
        other.load_weights(str(tmp_path / "r.h5"))


@TORCH_DEVICE
def test_bf16_mixed_runs_the_module_under_autocast_on_float32_weights():
    """precision="bf16-mixed" with nn.Torch: torch.autocast to bfloat16 in the forward pass, float32 master
    weights and gradients; the losses follow the float32 run's closely but not bitwise (the products are
    bfloat16's); "16-mixed" is one line (its loss scale would belong inside autograd)."""
    import hpcgpu

    X, y = am.data()

    def module():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    runs = {}
    for precision in ("32-true", "bf16-mixed"):
        t = hpcgpu.Trainer(nn.Torch(module(), torch.nn.CrossEntropyLoss(reduction="sum")), optimizer=optim.SGD(0.05),
                           **dict(am.COMMON, dtype="float32"), precision=precision)
        t.fit((X.astype(np.float32), y))
        assert t.model.params.dtype == np.float32 and t.model.grad.dtype == np.float32
        runs[precision] = t.history["train_loss"]
    np.testing.assert_allclose(runs["bf16-mixed"], runs["32-true"], rtol=2e-2)
    assert runs["bf16-mixed"] != runs["32-true"]
    with pytest.raises(ValueError, match=r"^precision 16-mixed: Torch computes bf16-mixed only$"):
        hpcgpu.Trainer(nn.Torch(module(), torch.nn.CrossEntropyLoss(reduction="sum")), optimizer=optim.SGD(0.05),
                       **dict(am.COMMON, dtype="float32"), precision="16-mixed")


@TORCH_DEVICE
def test_a_convolutional_module_takes_the_images_as_given():
    """Images (n, 1, 8, 8) reach a PyTorch module with a Conv2d in that shape, batch by batch: the trainer holds
    them as rows and gives each batch back in the samples' shape; it learns digits, and predicts in input order
    what the module itself gives."""
    import hpcgpu
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    images = (X[:400] / 16.0).reshape(-1, 1, 8, 8)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                 torch.nn.Linear(4 * 6 * 6, 10)).double()
    t = hpcgpu.Trainer(nn.Torch(module, loss=torch.nn.CrossEntropyLoss(reduction="sum")), optimizer=optim.Adam(lr=1e-2),
                       batch_size=32, epochs=4, seed=1, dtype="float64", progress="none")
    t.fit((images, y[:400]))
    assert t.history["train_loss"][-1] < 0.5 * t.history["train_loss"][0]
    assert t.history["train_accuracy"][-1] > 0.8
    got = t.predict(images[:50])
    with torch.no_grad():
        want = torch.func.functional_call(module, {k: torch.from_numpy(asnumpy(v)) for k, v in t.params.items()},
                                          (torch.from_numpy(images[:50]),)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"takes samples of shape \(1, 8, 8\), got \(64,\)"):
        t.model.set_sample_shape((64,))


@JAX
def test_bf16_mixed_runs_a_jax_function_in_bfloat16_on_float32_weights():
    """precision="bf16-mixed" with nn.Jax: the function gets bfloat16 parameters and inputs (jmp's mixed policy),
    the loss and the gradient are float32; the losses follow the float32 run's closely, not bitwise; 16-mixed is
    one line."""
    import hpcgpu

    X, y = am.data()
    runs = {}
    for precision in ("32-true", "bf16-mixed"):
        t = hpcgpu.Trainer(am.model("jax"), optimizer=optim.SGD(0.05), **dict(am.COMMON, dtype="float32"),
                           precision=precision)
        t.fit((X.astype(np.float32), y))
        assert t.model.params.dtype == np.float32 and t.model.grad.dtype == np.float32
        runs[precision] = t.history["train_loss"]
    np.testing.assert_allclose(runs["bf16-mixed"], runs["32-true"], rtol=2e-2)
    assert runs["bf16-mixed"] != runs["32-true"]
    seen = []
    model = am.model("jax")
    apply = model.apply
    model.apply = lambda p, x: (seen.append((p["fc0"]["w"].dtype, x.dtype)), apply(p, x))[1]
    model._compile(None)
    model.set_compute_dtype("bfloat16")
    model.predict({k: v.astype(np.float32) for k, v in model.init(None).items()}, X[:4].astype(np.float32))
    assert [(str(a), str(b)) for a, b in seen] == [("bfloat16", "bfloat16")]
    with pytest.raises(ValueError, match=r"^precision 16-mixed: Jax computes bf16-mixed only$"):
        hpcgpu.Trainer(am.model("jax"), optimizer=optim.SGD(0.05), **dict(am.COMMON, dtype="float32"),
                       precision="16-mixed")


@JAX
def test_a_keras_model_on_the_jax_backend_trains_the_built_in_layers_model(monkeypatch):
    """A Keras 3 model (Keras's JAX backend) from the MLP's weights trains as the built-in layers do, loss for
    loss (float64); assign writes the trained parameters back, so Keras's own predict gives the trainer's; a
    last softmax and non-trainable variables are one line each."""
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "jax":
        pytest.skip("keras was imported with another backend in this process")
    import hpcgpu

    am.model("jax")  # jax_enable_x64, as the built-in run
    keras.config.set_floatx("float64")
    try:
        want = _built_in_run()
        X, y = am.data()
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(3)])
        model.set_weights(am.weights())  # kernels are (in, out), as the built-in layers hold them
        km = nn.Keras(model)
        t = hpcgpu.Trainer(km, optimizer=optim.SGD(lr=0.05, momentum=0.9), **am.COMMON)
        t.fit((X, y))
        np.testing.assert_allclose(t.history["train_loss"], want.history["train_loss"], rtol=1e-10)
        assert list(t.params) == ["sequential.dense.bias", "sequential.dense.kernel", "sequential.dense_1.bias",
                                  "sequential.dense_1.kernel"]
        km.assign(t.params)
        np.testing.assert_allclose(model.predict(X, verbose=0), t.predict(X), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(t.predict(X), want.predict(X), rtol=1e-9, atol=1e-12)
        for soft in (keras.Sequential([keras.Input((6,)), keras.layers.Dense(3, activation="softmax")]),
                     keras.Sequential([keras.Input((6,)), keras.layers.Dense(3), keras.layers.Softmax()])):
            with pytest.raises(TypeError, match="the last layer applies a softmax"):
                nn.Keras(soft)
        with pytest.raises(ValueError, match=r"precision bf16-mixed: a model of one's own \(Keras\) computes in"):
            hpcgpu.Trainer(nn.Keras(model), optimizer=optim.SGD(0.05), **dict(am.COMMON, dtype="float32"),
                           precision="bf16-mixed")
        bn = keras.Sequential([keras.Input((6,)), keras.layers.BatchNormalization(), keras.layers.Dense(3)])
        with pytest.raises(TypeError, match="non-trainable variables"):
            nn.Keras(bn)
    finally:
        keras.config.set_floatx("float32")


def _gpu() -> bool:
    """CuPy with a real GPU (not the stand-in) and PyTorch's CUDA: the GPU kit's node."""
    import hpcgpu._device as d

    cupy = d.cupy_or_none()
    return (cupy is not None and not cupy.__version__.endswith("+standin") and d.device_count() > 0
            and torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.skipif(not _gpu(), reason="needs a GPU, CuPy and PyTorch's CUDA")
def test_on_a_gpu_the_module_trains_there_its_streams_ordered_by_events(tmp_path):
    """On a GPU, 1 rank in process and 2 ranks sharing it: nn.Torch's parameters, gradients and BatchNorm
    statistics are device memory shared by DLPack, the module runs on a torch stream of the user's own, and the
    model is the host's (float64): torch's stream and the trainer's are ordered by events at each exchange, the
    buckets posted from autograd's own thread on the trainer's stream; PyTorch's sync debug mode sees no host
    synchronization of its operations in fit."""
    import hpcgpu

    X, y = am.data()
    host = hpcgpu.Trainer(am.model("torch-bn"), optimizer=optim.SGD(lr=0.05, momentum=0.9), device="cpu",
                          **am.COMMON)
    host.fit((X, y))
    t = hpcgpu.Trainer(am.model("torch-bn"), optimizer=optim.SGD(lr=0.05, momentum=0.9), device="gpu",
                       bucket_mb=1e-4, **am.COMMON)
    import warnings

    # PyTorch's own count of the host synchronizations its operations make (set_sync_debug_mode "warn": one
    # warning each): none in the steps, the evaluation or the exchanges with the trainer's stream (events only)
    with torch.cuda.stream(torch.cuda.Stream()), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            t.fit((X, y))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message).lower()]
    assert not syncs, f"{len(syncs)} host synchronizations by torch in fit: {syncs[:3]}"
    assert not isinstance(t.params["0.weight"], np.ndarray)
    np.testing.assert_allclose(t.history["train_loss"], host.history["train_loss"], rtol=1e-9)
    for k, v in host.params.items():
        np.testing.assert_allclose(asnumpy(t.params[k]), v, rtol=1e-8, atol=1e-10, err_msg=k)
    for k, v in host.model.buffers().items():
        np.testing.assert_allclose(asnumpy(t.model.buffers()[k]), v, rtol=1e-8, atol=1e-10, err_msg=k)
    np.testing.assert_allclose(t.predict(X), host.predict(X), rtol=1e-8, atol=1e-10)

    # 2 ranks: the plain MLP (BatchNorm's statistics are each rank's own batch's, not the 1-rank run's)
    host = hpcgpu.Trainer(am.model("torch"), optimizer=optim.SGD(lr=0.05, momentum=0.9), device="cpu", **am.COMMON)
    host.fit((X, y))
    p = _mpi.run(2, [os.path.join(_mpi.SCRIPTS, "library_fit.py"), "autograd-gpu", os.path.dirname(__file__)],
                 timeout=240)
    assert p.returncode == 0, p.stderr
    two = json.loads(p.stdout.strip().splitlines()[-1])
    assert two["on_device"] and two["nbuckets"] > 1
    np.testing.assert_allclose(two["loss"], host.history["train_loss"], rtol=1e-9)
    for k, v in host.params.items():
        np.testing.assert_allclose(np.asarray(two["params"][k]), v, rtol=1e-8, atol=1e-10, err_msg=k)


@JAX
def test_jax_is_started_without_taking_the_gpus_memory_unless_the_user_says_so():
    """nn.Jax sets XLA_PYTHON_CLIENT_PREALLOCATE=false before JAX's backend starts (on a GPU, JAX takes 75% of
    its memory otherwise: the trainer's CuPy buffers and every other rank sharing the GPU ran out of memory on
    an H200); a user's own value stays."""
    import subprocess
    import sys

    code = ("import os, numpy as np; from hpcgpu import nn; nn.Jax(lambda p, x: x @ p['w'], {'w': np.zeros((2, 2))});"
            "print(os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])")
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    for given, want in ((None, "false"), ("true", "true")):
        if given is not None:
            env["XLA_PYTHON_CLIENT_PREALLOCATE"] = given
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split()[-1] == want


def _jax_on_the_device(dlpack: bool, rtol: float, atol: float) -> None:
    """nn.Jax on the device path against the host run (float64): DLPack taken, or the host copies' fallback."""
    import hpcgpu

    X, y = am.data()
    host = hpcgpu.Trainer(am.model("jax"), optimizer=optim.SGD(lr=0.05, momentum=0.9), device="cpu", **am.COMMON)
    host.fit((X, y))
    assert host.model.model._dlpack is None  # the host path never tries DLPack
    t = hpcgpu.Trainer(am.model("jax"), optimizer=optim.SGD(lr=0.05, momentum=0.9), device="gpu", **am.COMMON)
    t.fit((X, y))
    assert t.model.model._dlpack is dlpack and not isinstance(t.params["fc0.w"], np.ndarray)
    np.testing.assert_allclose(t.history["train_loss"], host.history["train_loss"], rtol=rtol)
    for k, v in host.params.items():
        np.testing.assert_allclose(asnumpy(t.params[k]), v, rtol=rtol, atol=atol, err_msg=k)
    np.testing.assert_allclose(asnumpy(t.predict(X)), host.predict(X), rtol=rtol, atol=atol)


@pytest.mark.gpu
@JAX
@pytest.mark.skipif(not _gpu(), reason="needs a GPU, CuPy and PyTorch's CUDA")
def test_on_a_gpu_a_jax_function_trains_on_the_ranks_gpu_by_dlpack():
    """On a GPU, nn.Jax takes the trainer's device arrays by DLPack (JAX computes on the rank's GPU) and gives
    the host run's model (float64); on the host, JAX computes on its CPU device whatever GPU it sees."""
    _jax_on_the_device(True, 1e-8, 1e-10)


@pytest.mark.device
@JAX
@pytest.mark.skipif(not _mpi.standin(), reason="the CuPy stand-in's pass (--device=standin)")
def test_a_jax_without_the_ranks_gpu_gets_host_copies_and_the_same_model():
    """On the device path with a JAX that cannot take the trainer's arrays by DLPack (here the stand-in's; a
    CPU-only jaxlib on a GPU node), nn.Jax falls back to host copies once, and the model is the host run's."""
    _jax_on_the_device(False, 1e-12, 1e-15)


@TORCH_DEVICE
def test_a_frozen_batchnorm_stays_frozen_and_a_closed_trainer_lets_go_of_the_module():
    """A BatchNorm the user put in eval mode stays so through every step, the epoch-end evaluation and predict
    (its running statistics never move), as under DDP; after close() the adapter holds none of the trainer's
    buffers, and adapter and module are freed with the last reference (no cycle through torch's hooks)."""
    import gc
    import weakref

    import hpcgpu

    X, y = am.data()
    model = am.model("torch-bn")
    bn = model.module[1]
    bn.eval()
    before = bn.running_mean.clone()
    t = hpcgpu.Trainer(model, optimizer=optim.Adam(0.01), **am.COMMON)
    t.fit((X, y), validation=(X[:40], y[:40]))
    t.predict(X)
    assert not bn.training and torch.equal(bn.running_mean, before) and int(bn.num_batches_tracked) == 0
    assert model.module.training  # the rest of the module as it was
    t.close()
    assert getattr(model, "_leaf_cache", None) is None
    refs = weakref.ref(model), weakref.ref(model.module)
    del t, model, bn
    gc.collect()
    assert refs[0]() is None and refs[1]() is None
