"""PyTorch's optimizers and LR schedulers as the Trainer's optimizer of an nn.Torch module: the step runs on the
trainer's buffers after the reduction (the module's parameters are views of the flat buffer, their ``.grad`` views
of the flat gradient), the state is checkpointed and a stopped run resumes bitwise; clipping works on them as on
any model; the combinations that cannot be had are one line naming the alternative."""

import importlib.util
import os
import signal

import numpy as np
import pytest

import autograd_models as am
import test_clipping as tc
from hpcgpu import optim
from hpcgpu._device import asnumpy

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")


def _standin() -> bool:
    import hpcgpu._device as d

    cupy = d.cupy_or_none()
    return cupy is not None and cupy.__version__.endswith("+standin")


if _standin():  # the trainer's device arrays go to torch.from_dlpack: the stand-in is no device PyTorch can take
    pytestmark = pytest.mark.skip(reason="nn.Torch on the device path needs PyTorch's CUDA")


def _fit(opt, scheduler=None, model=None, **options):
    """A run of the shared MLP (float64, 8 steps an epoch) with ``opt(module)`` as its optimizer."""
    import hpcgpu

    m = model or am.model("torch")
    o = opt(m.module)
    s = scheduler(o) if scheduler is not None else None
    extra = dict(scheduler=s) if s is not None else {}
    t = hpcgpu.Trainer(m, optimizer=o, **extra, **dict(am.COMMON, **options))
    t.fit(am.data())
    return t


def test_a_torch_sgd_with_momentum_is_hpcgpus_sgd_and_steps_the_modules_own_parameters():
    """torch.optim.SGD(momentum) on the module's parameters gives hpcgpu's SGD(momentum) run to rounding; the
    module's parameters are then views of the trainer's buffer (the trained values, no copy back)."""
    import torch

    mine = _fit(lambda m: optim.SGD(lr=0.05, momentum=0.9, weight_decay=0.0))
    theirs = _fit(lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
    np.testing.assert_allclose(theirs.history["train_loss"], mine.history["train_loss"], rtol=1e-12)
    np.testing.assert_allclose(asnumpy(theirs.model.params), asnumpy(mine.model.params), rtol=1e-12, atol=1e-14)
    module = theirs.model.model.module
    flat = asnumpy(theirs.model.params)
    for p in module.parameters():  # each parameter lies in the trainer's buffer
        assert flat.ctypes.data <= p.data_ptr() < flat.ctypes.data + flat.nbytes
    assert theirs.optimizer.name == "torch.optim.SGD" and theirs.config.momentum == 0.9
    assert sorted(theirs.opt_state) == ["momentum_buffer"]


def test_a_torch_adam_is_hpcgpus_adam():
    """Adam's step count (its bias correction) and moments on the trainer's state arrays: hpcgpu's Adam's run."""
    import torch

    mine = _fit(lambda m: optim.Adam(lr=0.01))
    theirs = _fit(lambda m: torch.optim.Adam(m.parameters(), lr=0.01))
    np.testing.assert_allclose(asnumpy(theirs.model.params), asnumpy(mine.model.params), rtol=1e-9, atol=1e-12)
    assert sorted(theirs.opt_state) == ["exp_avg", "exp_avg_sq"]
    np.testing.assert_allclose(asnumpy(theirs.opt_state["exp_avg"]), asnumpy(mine.opt_state["m"]), rtol=1e-9,
                               atol=1e-14)


def test_a_step_lr_changes_the_rate_per_epoch_or_per_step_as_asked():
    """StepLR every 2 epochs is hpcgpu's step schedule (the same model); per step it decays within the epoch."""
    import torch

    steps = 8  # 240 samples, batch 30
    theirs = _fit(lambda m: torch.optim.SGD(m.parameters(), lr=0.05),
                  lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5))
    assert theirs.history["lr"] == [0.05, 0.05, 0.025, 0.025]
    mine = _fit(lambda m: optim.SGD(lr=0.05, weight_decay=0.0), schedule="step", lr_step_epochs=2, lr_gamma=0.5)
    np.testing.assert_allclose(asnumpy(theirs.model.params), asnumpy(mine.model.params), rtol=1e-12, atol=1e-14)
    import hpcgpu

    m = am.model("torch")
    o = torch.optim.SGD(m.module.parameters(), lr=0.05)
    s = torch.optim.lr_scheduler.StepLR(o, step_size=steps // 2, gamma=0.5)
    t = hpcgpu.Trainer(m, optimizer=o, scheduler=s, scheduler_interval="step", **am.COMMON)
    t.fit(am.data())
    assert t.history["lr"] == [0.05 * 0.5 ** (2 * e) for e in range(4)]


def _sgd_step_lr(m):
    import torch

    o = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    return o


def _step_lr(o):
    import torch

    return torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)


@pytest.mark.mpi
def test_a_torch_optimizer_at_three_ranks_is_the_one_rank_model(tmp_path):
    """Every rank steps its own torch optimizer on the reduced gradient: at 3 ranks (with gradient accumulation)
    the model is the one of 1 rank, and the same on every rank."""
    import json

    import _mpi

    p = _mpi.run(3, [os.path.abspath(__file__)], timeout=240)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["alike"]
    one = _fit(_sgd_step_lr, _step_lr, grad_accum_steps=2)
    assert got["lr"] == one.history["lr"]
    np.testing.assert_allclose(got["loss"], one.history["train_loss"], rtol=1e-10)
    np.testing.assert_allclose(np.asarray(got["params"]), asnumpy(one.model.params), rtol=1e-9, atol=1e-12)


def _signal_at_step(trainer, step, monkeypatch):
    """A real SIGUSR1 when ``trainer`` asks, at its ``step``-th step, whether a stop was requested."""
    import itertools

    request, asked = trainer.stop_request, itertools.count(1)
    ask = request.requested

    def requested():
        if next(asked) == step:
            os.kill(os.getpid(), signal.SIGUSR1)
        return ask()

    monkeypatch.setattr(request, "requested", requested)


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_a_torch_optimizer_stopped_at_a_checkpoint_resumes_bitwise(kind, tmp_path, monkeypatch):
    """A run of 4 epochs stopped by a signal in its 11th step and resumed is bitwise the run of 4: the optimizer's
    state (momentum; Adam's moments and step count) and the scheduler's (a StepLR per step) are in the
    checkpoint."""
    import hpcgpu
    import torch

    def parts():
        m = am.model("torch")
        o = torch.optim.SGD(m.module.parameters(), lr=0.05, momentum=0.9) if kind == "SGD" else \
            torch.optim.Adam(m.module.parameters(), lr=0.01)
        return m, o, torch.optim.lr_scheduler.StepLR(o, step_size=5, gamma=0.7)

    m, o, s = parts()
    whole = hpcgpu.Trainer(m, optimizer=o, scheduler=s, scheduler_interval="step", **am.COMMON)
    whole.fit(am.data())
    ck = str(tmp_path / "ck.h5")
    m, o, s = parts()
    stopped = hpcgpu.Trainer(m, optimizer=o, scheduler=s, scheduler_interval="step", checkpoint=ck, **am.COMMON)
    _signal_at_step(stopped, 11, monkeypatch)
    stopped.fit(am.data())
    assert stopped.stopped_by == "SIGUSR1" and stopped.step == 11
    stopped.close()
    m, o, s = parts()
    resumed = hpcgpu.Trainer(m, optimizer=o, scheduler=s, scheduler_interval="step", checkpoint=ck, resume=True,
                             **am.COMMON)
    resumed.fit(am.data())
    assert resumed.resumed_from == ck and resumed.step == 32
    assert resumed.history["train_loss"] == whole.history["train_loss"]
    assert resumed.history["lr"] == whole.history["lr"]
    np.testing.assert_array_equal(asnumpy(resumed.model.params), asnumpy(whole.model.params))
    for k in whole.opt_state:
        np.testing.assert_array_equal(asnumpy(resumed.opt_state[k]), asnumpy(whole.opt_state[k]), err_msg=k)


def test_clipping_an_nn_torch_model_with_a_torch_optimizer_is_the_reference():
    """test_clipping's linear model as a PyTorch module, clipped by norm, stepped by torch.optim.SGD(momentum)
    and by hpcgpu's: both are the reference computed by hand."""
    import hpcgpu
    import torch

    from hpcgpu import nn

    def module():
        m = torch.nn.Linear(tc.D, tc.K).double()
        w = tc.start()
        with torch.no_grad():
            m.weight.copy_(torch.from_numpy(w["w"].T))
            m.bias.copy_(torch.from_numpy(w["b"]))
        return m

    def loss(out, y):
        return 0.5 * ((out - y) ** 2).sum()

    want, norms = tc.reference("zero1")  # clip_grad_norm=0.5, momentum 0.9 (run here without ZeRO)
    for make in (lambda m: torch.optim.SGD(m.parameters(), lr=tc.LR, momentum=0.9),
                 lambda m: optim.SGD(lr=tc.LR, momentum=0.9, weight_decay=0.0)):
        m = module()
        t = hpcgpu.Trainer(nn.Torch(m, loss), optimizer=make(m), batch_size=tc.N, epochs=tc.EPOCHS, dtype="float64",
                           progress="none", clip_grad_norm=0.5)
        t.fit(tc.data())
        np.testing.assert_allclose(asnumpy(t.params["weight"]).T if asnumpy(t.params["weight"]).shape == (tc.K, tc.D)
                                   else asnumpy(t.params["weight"]), want["w"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(asnumpy(t.params["bias"]), want["b"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(t.history["grad_norm"], norms, rtol=1e-10)


def _refusal(**kw):
    import hpcgpu

    with pytest.raises((TypeError, ValueError)) as e:
        hpcgpu.Trainer(**kw)
    return str(e.value)


def test_combinations_that_cannot_be_had_are_one_line_naming_the_alternative():
    import torch

    from hpcgpu import nn

    m = am.model("torch")
    sgd = torch.optim.SGD(m.module.parameters(), lr=0.1)
    assert _refusal(model=m, optimizer=sgd, zero_stage=1) == (
        "zero_stage=1 shards hpcgpu's optimizer state, not torch.optim.SGD's: give zero_stage=0, or hpcgpu.optim's "
        "SGD, Adam or AdamW")
    assert _refusal(model=nn.Sequential([nn.Dense(6, 3)]), loss=nn.SoftmaxCrossEntropy(), optimizer=sgd) == (
        "optimizer: torch.optim.SGD trains an nn.Torch module's parameters; give hpcgpu.optim's SGD, Adam or AdamW "
        "for Sequential")
    assert _refusal(model=m, optimizer=torch.optim.RMSprop(m.module.parameters())) == (
        "optimizer must be an hpcgpu.optim optimizer (SGD, Adam, AdamW) or torch.optim.SGD, Adam or AdamW, got "
        "torch.optim.RMSprop")
    assert _refusal(model=m, optimizer=optim.SGD(0.1),
                    scheduler=torch.optim.lr_scheduler.StepLR(sgd, 1)) == (
        "scheduler: a torch.optim.lr_scheduler steps a torch.optim optimizer given as optimizer=; hpcgpu's "
        "optimizers follow schedule= (cosine, step, constant)")
    other = torch.optim.SGD(m.module.parameters(), lr=0.1)
    assert _refusal(model=m, optimizer=sgd, scheduler=torch.optim.lr_scheduler.StepLR(other, 1)) == (
        "scheduler must be a torch.optim.lr_scheduler of the optimizer given as optimizer=")
    assert _refusal(model=m, optimizer=sgd, scheduler_interval="batch") == (
        "scheduler_interval must be epoch or step, got 'batch'")
    assert _refusal(model=m, optimizer="sgd") == (
        "optimizer must be an hpcgpu.optim optimizer (SGD, Adam, AdamW), or for an nn.Torch model torch.optim.SGD, "
        "Adam or AdamW, got str")


def test_an_optimizer_of_another_modules_parameters_is_refused():
    import hpcgpu
    import torch

    m = am.model("torch")
    stray = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1)
    with pytest.raises(TypeError) as e:
        hpcgpu.Trainer(m, optimizer=stray, **am.COMMON)
    assert str(e.value) == ("optimizer: torch.optim.SGD holds a tensor that is not a parameter of the module; build "
                            "it on module.parameters()")


if __name__ == "__main__":  # the ranks' script of test_a_torch_optimizer_at_three_ranks_is_the_one_rank_model
    import json

    from mpi4py import MPI

    t = _fit(_sgd_step_lr, _step_lr, grad_accum_steps=2)
    params = asnumpy(t.model.params).tolist()
    alike = all(q == params for q in MPI.COMM_WORLD.allgather(params))
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps({"alike": alike, "params": params, "lr": list(map(float, t.history["lr"])),
                          "loss": list(map(float, t.history["train_loss"]))}), flush=True)
