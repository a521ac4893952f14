"""The data-parallel trainer: the user's model, loss and optimizer, wired to the rest.

:class:`Trainer` wires the parts: the process groups
(:mod:`hpcgpu.train.groups`), the model bound to the gradient reducer's
flat buffer (:class:`hpcgpu.nn.Network` for built-in layers,
:class:`hpcgpu.nn.FlatModel` for a model of one's own), the optimizer's
state, the precision policy (:mod:`hpcgpu.train.precision`), the sampler
(:mod:`hpcgpu.train.data`), the step (:mod:`hpcgpu.train.step`), the epoch
metrics (:mod:`hpcgpu.train.metrics`), checkpoints
(:mod:`hpcgpu.train.checkpoint`) and the results file
(:mod:`hpcgpu.train.output`).

The parts are built by :mod:`hpcgpu.train.build`. Each keeps its own state
(``state_dict`` / ``load_state_dict``); :class:`hpcgpu.train.state.TrainState`
collects and restores them, writes and finds checkpoints, and makes every
rank take one rank's (:meth:`Trainer.broadcast_state`, a resume: Horovod's
``TorchState.sync``); :mod:`hpcgpu.train.results` writes what a run
leaves (its results file, its trace). The Trainer keeps ``fit``, the epoch
loop, ``evaluate`` and ``predict``, and the public methods that reach the
parts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import time

import numpy as np
from mpi4py import MPI

from .. import _blas, _device
from .._version import __version__
from ..comm import Allreduce
from ..energy import EnergyMeter
from ..errors import AgreedError, agree, agree_call, agree_inputs, agreed, write_line
from .._outputs import Input, Output, claim, claim_error, release, write_dataset
from ..nn import (Loss, ModelPlan, TrainModel, awaits_data, plan_error, plan_model)
from ..optim import Optimizer, TorchOptimizer, as_optimizer, optimizer_by_name
from ..runtime import Runtime, current_runtime, init, placement
from ..timing import PhaseTimer, reduce_phases
from . import build, results
from .checks import compute_dtype_error, features_error, layout_error, optimizer_error
from .config import TrainConfig
from .data import (HDF5Rows, Split, ZeroTargets, check_labels, split_off)
from .groups import ProcessGroups
from .metrics import HeldOut
from .precision import Precision, policy
from .._stop import StopRequest, installed_request, note_stopped, remove_first, agree_stop_file, trainers_request
from .gemm_threads import GemmPlan
from .state import TrainState

__all__ = ["TrainConfig", "Trainer", "StopRequest"]  # TrainConfig is config.py's, StopRequest _stop.py's

STOP_CHECKPOINT = "hpcgpu-stopped.ckpt.h5"
"""Where a stopped library run with no checkpoint configured (and no ``out`` to put one beside) writes its
checkpoint: in the working directory, through the output policy; the stop's line names it."""
_STOP_OUTPUT = Output(STOP_CHECKPOINT, "the stop's checkpoint")

LIBRARY_DEFAULTS = dict(out=None, schedule="constant", warmup_epochs=0.0, gemm_threads="all")
"""What a Trainer built from a model (library use) changes of :class:`TrainConfig`'s defaults: no results file
unless :meth:`Trainer.save_results` is asked, the optimizer's learning rate throughout (Keras's and PyTorch's),
and every GEMM on the rank's BLAS threads (``gemm_threads="all"``): the same script and seed give the same bits
run after run, where a plan chosen by timing (``"auto"``, the command line's) may choose otherwise on a busy
node, and OpenBLAS's float32 GEMM sums in another order on one thread than on two; no 0.3-2 s of timing at
each start either."""


def _model_error(model, loss, built: bool = True) -> Exception | None:
    """What is wrong with a Trainer's model and loss (the same on every rank), or None."""
    if loss is not None and not isinstance(loss, Loss):
        return TypeError(f"loss must be an hpcgpu.nn loss (SoftmaxCrossEntropy, MeanSquaredError, Huber), got "
                         f"{type(loss).__name__}" + ("; give the optimizer as optimizer=" if isinstance(
                             loss, Optimizer) else ""))
    return plan_error(model, loss, built)


_BOUND = frozenset({"model", "optimizer", "reducer", "watchdog", "opt_state", "epoch", "step", "step_in_epoch",
                    "tensor_bytes", "energy", "timer", "stopped_by", "checkpoint_file", "resumed_from", "gemm_plan",
                    "_steps_run", "_update_params", "_params_pad", "_stat_names", "_energy_reasons",
                    "_phase_carry", "_state", "_clock0"})
"""What a Trainer has once its model is bound (``_bind``, ``_start_counters``): a Dense(units) model has none of it
before its first fit, and asking says so in one line."""


_KERAS_FIT = {
    "x": " (Keras's; here the data is one pair: fit((X, y)))",
    "y": " (Keras's; here the data is one pair: fit((X, y)))",
    "validation_data": " (Keras's; here validation=(X_val, y_val))",
    "batch_size": " (Keras's; here Trainer(batch_size=...), the global batch)",
    "verbose": " (Keras's; here Trainer(progress=\"bar\" | \"lines\" | \"none\"))",
    "shuffle": " (Keras's; here every epoch is shuffled by the seed)",
    "initial_epoch": " (Keras's; here fit(epochs=N) trains on to N in all)",
}
"""Keras's ``fit`` arguments that :meth:`Trainer.fit` does not take, and how hpcgpu says each."""


def _torch_optimizer_error(optimizer: TorchOptimizer, model, c: TrainConfig) -> Exception | None:
    """Why a ``torch.optim`` optimizer cannot train ``model`` with these options (None: it can)."""
    from ..nn import Torch

    if not isinstance(model, Torch):
        return TypeError(f"optimizer: {optimizer.name} trains an nn.Torch module's parameters; give hpcgpu.optim's "
                         f"SGD, Adam or AdamW for {type(model).__name__}")
    if c.zero_stage == 1:
        return ValueError(f"zero_stage=1 shards hpcgpu's optimizer state, not {optimizer.name}'s: give zero_stage=0, "
                          "or hpcgpu.optim's SGD, Adam or AdamW")
    return None


def _input_form(c: TrainConfig, options: dict, model, loss, optimizer) -> dict:
    """What the ranks must agree on at a Trainer's construction, by the names the caller gave them.

    Every option of the config (the command line's, or the library's ``lr=``...), the model (the built-in
    layers by their widths; a model of one's own by its ``describe()`` or its class: :func:`_model_form`),
    the loss and the optimizer (its kind and hyper-parameters).
    """
    form = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}
    form.update({k: v for k, v in options.items() if k not in form})  # an unknown option: its own refusal
    form.update(model=_model_form(model), loss=loss, optimizer=optimizer)
    return form


def _model_form(model):
    """The model as the ranks must agree on it: hpcgpu's own as it is, one's own by its ``describe()`` or class.

    A model of one's own may hold per-rank state (its rank, a shard of data, a generator seeded per rank):
    its attributes are not compared. Its parameter count is agreed once it is known
    (:func:`hpcgpu.train.build.bind_model`).
    """
    if callable(getattr(model, "describe", None)) or type(model).__module__.startswith("hpcgpu."):
        return model
    return f"{type(model).__module__}.{type(model).__qualname__}"


def _data_form(data, validation, sharded: bool) -> dict:
    """``fit``'s and ``evaluate``'s data as the ranks must agree on it.

    The same arrays' shapes and dtypes, or the same files, on every rank; with ``sharded`` each rank passes its
    own rows, so only the switch itself.
    """
    if sharded is True:
        return {"sharded": True}
    return {"data": data, "validation": validation, "sharded": sharded}


def _data_inputs(source, what: str) -> list:
    """The files ``source`` reads, as the output policy's inputs. Not collective.

    A path; h5py datasets (each its file and dataset) and NumPy memory maps (their file) among the arrays of
    an ``(X, y)`` tuple.
    """
    if source is None:
        return []
    if isinstance(source, (str, os.PathLike)):
        return [Input(os.fspath(source), what)]
    found = []
    for part in source if isinstance(source, (tuple, list)) else (source,):
        h5 = getattr(part, "file", None)  # an h5py Dataset: its file, unless one held in memory alone
        file, name = getattr(h5, "filename", None), getattr(part, "name", None)
        if isinstance(file, str) and isinstance(name, str):
            if _on_disk(h5):
                found.append(Input(os.path.abspath(file), what, name))
        elif isinstance(part, np.memmap) and isinstance(getattr(part, "filename", None), str):
            found.append(Input(os.path.abspath(part.filename), what))
    return found


def _on_disk(h5file) -> bool:
    """Whether an h5py file is backed by a file (not the ``core`` driver's memory alone). Not collective."""
    if getattr(h5file, "driver", None) != "core":
        return True
    try:
        return bool(h5file.id.get_access_plist().get_fapl_core()[1])  # (increment, backing_store)
    except Exception:  # noqa: BLE001 - unknown: protect it
        return True


def _same_inputs(given: tuple, first: tuple | None) -> bool:
    """Whether a later fit's ``(data, validation, sharded)`` are the first fit's. Not collective.

    The same file, or the same array objects (a tuple of new arrays is other data, whatever their values); every
    rank decides alike from its own arguments, which the contract asks to be alike.
    """
    if first is None or given[2] != first[2]:
        return False

    def same(a, b):
        if a is None or b is None:
            return a is None and b is None
        if isinstance(a, (str, os.PathLike)) or isinstance(b, (str, os.PathLike)):
            return isinstance(a, (str, os.PathLike)) and isinstance(b, (str, os.PathLike)) and \
                os.path.abspath(os.fspath(a)) == os.path.abspath(os.fspath(b))
        if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
            return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
        return a is b

    data, validation = given[0], given[1]
    return same(data, first[0]) and (validation is None or same(validation, first[1]))


class Trainer:
    """Data-parallel training of a model: the user's, or the command line's MLP.

    Collective: every rank of the runtime's communicator constructs it with
    the same arguments and calls :meth:`fit`, :meth:`evaluate`,
    :meth:`predict` and :meth:`save_results` together.

    Parameters
    ----------
    model : hpcgpu.nn.Sequential, or an object of the hpcgpu.nn.Model contract, or None
        The built-in layers (with ``loss``), or a model of one's own (its
        ``loss_and_grad`` is the loss; see :class:`hpcgpu.nn.Model`). None:
        the command line's MLP, built from ``config`` (``hidden``) and, at
        the first :meth:`fit`, its data file's features and classes.
    loss : hpcgpu.nn.Loss, optional
        For a ``Sequential``: :class:`~hpcgpu.nn.SoftmaxCrossEntropy`,
        :class:`~hpcgpu.nn.MeanSquaredError` or :class:`~hpcgpu.nn.Huber`.
    optimizer : hpcgpu.optim.Optimizer or torch.optim.Optimizer, optional
        :class:`~hpcgpu.optim.SGD`, :class:`~hpcgpu.optim.Adam` or
        :class:`~hpcgpu.optim.AdamW`; by default the config's (SGD with
        momentum 0.9 at lr 0.05). For an :class:`hpcgpu.nn.Torch` model also
        ``torch.optim.SGD``, ``Adam`` or ``AdamW`` built on the module's
        parameters: it steps on the trainer's buffers after the reduction,
        at its own learning rate (:class:`hpcgpu.optim.TorchOptimizer`; not
        with ``zero_stage=1``).
    scheduler : torch.optim.lr_scheduler.LRScheduler, optional
        Of a ``torch.optim`` ``optimizer``: stepped by the trainer, its
        state in checkpoints.
    scheduler_interval : {"epoch", "step"}
        Step ``scheduler`` after each epoch (the default) or after each
        global step (Lightning's ``interval``).
    config : TrainConfig, optional
        The run's options; a ``TrainConfig`` as the first argument is taken
        as ``config`` (the command line's way in). The object is not changed.
    runtime : hpcgpu.Runtime, optional
        Made with ``init(config.device)`` when omitted.
    **options
        Any field of :class:`TrainConfig` (``batch_size=32``, ``epochs=10``,
        ``seed=0``, ``precision="bf16-mixed"``, ``zero_stage=1``...). With a
        model given, the defaults differ in :data:`LIBRARY_DEFAULTS`.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError, OSError
        Bad options, model or data, on every rank with the same message (an
        :class:`hpcgpu.AgreedError`): options, model, loss or optimizer that
        differ across the ranks (:func:`hpcgpu.errors.agree_inputs`, the
        construction's first communication); see :meth:`TrainConfig.validate`,
        :func:`hpcgpu.train.data.load_split`; a model without the contract;
        a model of one's own with tensor parallelism or mixed precision;
        an output that cannot be written or is an input.

    Attributes
    ----------
    model : hpcgpu.nn.TrainModel
        The model on its flat buffers (:class:`hpcgpu.nn.Network` for the built-in layers,
        :class:`hpcgpu.nn.FlatModel` for a model of one's own).
    optimizer : hpcgpu.optim.Optimizer
    opt_state : dict of str to xp.ndarray
        The optimizer's state (this rank's ZeRO block with ZeRO-1).
    precision : hpcgpu.train.precision.Precision
        The precision policy.
    groups : hpcgpu.train.groups.ProcessGroups
    history : dict of list
        Per epoch: ``epoch``, ``train_loss``, the task's metrics
        (``train_accuracy``, ``val_loss``, ``val_accuracy``; or
        ``train_rmse``, ``val_loss``, ``val_rmse``, ``val_r2``), ``lr``,
        ``seconds`` (training time of the epoch, s), ``samples_per_second``,
        energy, and per phase of :data:`PHASES` ``<phase>_seconds_{min,mean,max}``
        over the ranks (with ``timing``). The held-out set's series are
        ``val_*`` for a validation set given in Python (arrays,
        ``validation_split``), as Keras names them, and ``test_*`` for a data
        file's ``/test`` split (the command line's).
    epoch, step, step_in_epoch : int
        Finished epochs, global steps done, steps done in the current epoch.
    stopped_by : str or None
        What stopped :meth:`fit` early, after a checkpoint (``"SIGUSR1"``,
        ``"SIGTERM"``, ``"stop file PATH"``); ``None`` when it ran to the end.
    checkpoint_file : str or None
        The run's newest checkpoint after :meth:`fit`: the config's, or after
        a stop without one, ``out`` with ``.ckpt.h5`` (where ``--resume``
        looks); None when there is none (no checkpoint asked for, or a stop
        with neither a checkpoint path nor ``out``).
    resumed_from : str or None
        The checkpoint file this run continued from.
    gemm_plan : GemmPlan or None
        Which GEMMs of the step run on the rank's BLAS threads (CPU, more
        than one thread per rank, ``gemm_threads="auto"``); ``None``: all
        on the rank's threads.
    """

    PHASES = ("data", "compute", "comm", "io")
    """The phases of a step (:mod:`hpcgpu.timing`): ``data`` the epoch's row exchange and each batch's
    gather; ``compute`` forward, backward and update; ``comm`` the wait for the gradient reduction (and
    ZeRO's Allgather); ``io`` checkpoints written during the epoch."""

    def __init__(self, model=None, loss=None, optimizer: Optimizer | None = None, *, config: TrainConfig | None = None,
                 runtime: Runtime | None = None, scheduler=None, scheduler_interval: str = "epoch", **options):
        # The stop policy from the first instant: a signal while the trainer is built (MPI's start, the data's
        # reading) is kept for fit, not lost to MPICH's SIGUSR1 handler or SIGTERM's default action. The command
        # line's request, installed before anything else, is taken as it is.
        installed = installed_request()
        self.stop_request = installed if installed is not None and not installed.trainers else None
        self._stop_owned = self.stop_request is None
        if self._stop_owned:  # nested over another trainer's, whose state (a stop it saw) is not this one's
            self.stop_request = trainers_request()
        self._scheduler = (scheduler, scheduler_interval)
        try:
            self._build(model, loss, optimizer, config, runtime, options)
        except BaseException:
            self._release_stop()
            raise
        if self._stop_owned:
            self.stop_request.stop_file, self.stop_request.check_file = self.config.stop_file, self.rt.rank == 0

    def _in_words(self, err: BaseException) -> BaseException:
        """``err`` as the caller would say it, the one place the two vocabularies meet.

        In library mode the command line's flags (``--batch-size``) become the Trainer's arguments
        (``batch_size``); the command line's own errors are left as they are.
        """
        text = self._words(str(err))
        if text == str(err):
            return err
        try:
            out = type(err)(text)
        except Exception:  # noqa: BLE001 - a constructor with other arguments: the words as they were
            return err
        out.__cause__ = err.__cause__
        if isinstance(err, AgreedError):
            out.silent = err.silent
        return out

    def _raise_in_words(self, err: AgreedError):
        """Raise ``err`` (being handled) in the caller's words, with its traceback and cause."""
        reworded = self._in_words(err)
        if reworded is err:
            raise err
        raise reworded.with_traceback(err.__traceback__) from err.__cause__

    def _words(self, text: str) -> str:
        """``text`` in the caller's words.

        In library mode each command-line flag of the Trainer's options (``--batch-size``) becomes its
        argument (``batch_size``; a switch, ``overwrite=True``).
        """
        if not getattr(self, "_library", False):
            return text
        fields = {f.name: f.type for f in dataclasses.fields(TrainConfig)}

        def word(m):
            name = m.group(1).replace("-", "_")
            off = name.startswith("no_") and fields.get(name[3:]) in (bool, "bool")  # --no-drop-last
            if off:
                return f"{name[3:]}=False"
            if name not in fields:
                return m.group(0)
            return f"{name}=True" if fields[name] in (bool, "bool") else name

        return re.sub(r"(?<![\w./-])--([a-z][a-z0-9-]*)", word, text)  # not inside a path (runs/--lr/x.h5)

    def _release_stop(self) -> None:
        """Put back the signal handlers this trainer installed (none when the command line's are in force)."""
        if self._stop_owned:
            self.stop_request.uninstall()
            self.stop_request, self._stop_owned = None, False

    def _build(self, model, loss, optimizer, config, runtime, options) -> None:
        """:meth:`__init__`'s body, under the stop request."""
        if isinstance(model, TrainConfig):  # Trainer(config[, runtime]): the command line's way in
            config, model = model, None
            if isinstance(loss, Runtime):
                runtime, loss = loss, None
        base = config if config is not None else TrainConfig(**LIBRARY_DEFAULTS) if model is not None else TrainConfig()
        self._library = model is not None  # errors then name Trainer's arguments, not the command line's flags
        try:
            c, err = dataclasses.replace(base, **options), None
        except TypeError as e:
            c, err = base, TypeError(f"Trainer: {e}")
        pending = awaits_data(model)
        try:  # a torch.optim optimizer (and its scheduler) wrapped to step on the trainer's buffers
            optimizer, own = as_optimizer(optimizer, *self._scheduler), None
        except (TypeError, ValueError) as e:
            own = e
        err = err or c.validate() or (_model_error(model, loss, built=not pending) if model is not None else None) \
            or own or (optimizer_error(optimizer) if optimizer is not None else None) \
            or (_torch_optimizer_error(optimizer, model, c) if isinstance(optimizer, TorchOptimizer) else None)
        # The first communication: the ranks' arguments agreed (a rank given another lr, model or option is one
        # line on every rank, not different models or a hang), a rank's own refusal with them. Before init, which
        # is collective itself and takes the device from them. Over the ranks of the runtime the Trainer then
        # uses: the one given, else the process-wide one (what init returns), else COMM_WORLD's.
        known = runtime if runtime is not None else current_runtime()
        agree_inputs("Trainer", _input_form(c, options, model, loss, optimizer),
                     comm=known.comm if known is not None else MPI.COMM_WORLD,
                     error=None if err is None else self._in_words(err))
        self.rt = rt = runtime if runtime is not None else init(c.device, collectives=c.collectives)
        comm, self.xp = rt.comm, rt.xp
        self._claimed: set = set()
        self._inputs: list = []  # the first fit's files (:func:`_data_inputs`): every later output is checked
        self._overwrite = c.overwrite
        self._claim(build.run_outputs(c), [Input(c.data, "--data")] if c.data else [])  # before any work
        own = {"--data": c.data, "--out": c.out, "--checkpoint": c.checkpoint_path or c.default_checkpoint,
               "--trace": c.trace}
        agree_stop_file(c.stop_file, own, comm, "hpcgpu.train", words=self._words)
        self.precision: Precision = policy(c.precision, c.dtype)
        c = dataclasses.replace(c, dtype=self.precision.master.name)  # --precision 64-true: float64 in the outputs
        agree(compute_dtype_error(self.xp, self.precision), comm=comm)
        plan = None if model is None or pending else plan_model(model, loss)  # the model was agreed above
        if not pending:  # else at the first fit, with the model (_build_model)
            self._agree_layout(c, plan)
        self.groups = ProcessGroups(comm, c.tensor_parallel)
        where = placement(comm)
        self._placement = f" ({where})" if ";" in where else ""  # named in the first line when several hosts
        self.train_split = self._held_out = None
        self.data_path: str | None = None
        self._validation_from_file = True
        self._prepared = False
        self._first_fit = None  # the first fit's (data, validation, sharded) as given: a later fit may give them
        self._first_split = None  # and its validation_split
        self._stop_checkpoint_checked = False  # whether the stop checkpoint's name was checked at a fit's start
        self._per_fit = c.epochs  # a fit() after the run's end trains this many more (Keras's second fit)
        optimizer = optimizer or optimizer_by_name(c.optimizer, c.lr, c.momentum, c.weight_decay)
        self.config = c
        if model is None or pending:  # sized by the first fit's data (the command line's MLP: the config's)
            self._pending = (model, loss, optimizer)
            return
        self._bind(plan, optimizer)
        self.config = build.described(c, self.optimizer, self.model)

    # -- set-up --------------------------------------------------------------------------------
    def _bind(self, plan: ModelPlan, optimizer) -> None:
        """The model on the reducer's flat buffer, the optimizer's state (:func:`build.bind_model`). Collective."""
        p = build.bind_model(plan, optimizer, self.config, self.rt, self.groups, self.precision,
                             tensor_allreduce=self._tensor_allreduce)
        self.model: TrainModel = p.model
        if self.config.sync_batchnorm:  # BatchNorm over the global batch: its sums over the data-parallel ranks
            from ..nn._syncbn import sync_batchnorm

            sync_batchnorm(self.model, lambda buf: Allreduce(buf, comm=self.groups.data_comm))
        self.optimizer, self.opt_state, self.reducer, self.watchdog = p.optimizer, p.opt_state, p.reducer, p.watchdog
        self._update_params, self._params_pad, self._stat_names = p.update_params, p.params_pad, p.stat_names
        self._parts = p
        self._start_counters()

    def _start_counters(self) -> None:
        """The run's counters, meters and flags before the first step (or a resume's restore). Not collective."""
        c, rt = self.config, self.rt
        self.tensor_bytes = 0  # bytes this rank passed to tensor-group Allreduces in training steps
        self._steps_run = 0  # steps this process ran (not those of a checkpoint it resumed from)
        self.epoch = self.step = self.step_in_epoch = 0
        self.energy = EnergyMeter(rt.comm, _device.pci_bus_id(rt.device_id) if rt.device == "gpu" else None)
        self._energy_reasons = {"cpu": "", "gpu": ""}
        self.timer = PhaseTimer(self.PHASES, cupy=None if self.xp is np else self.xp, trace=bool(c.trace),
                                on=c.timing)
        self._phase_carry = dict.fromkeys(self.PHASES, 0.0)  # the unfinished epoch's phases before a resume
        self.stopped_by: str | None = None
        self.checkpoint_file: str | None = None
        self.resumed_from: str | None = None
        self.gemm_plan: GemmPlan | None = None
        self._state = TrainState(self)  # the parts' state: checkpoints, resume, broadcast
        self._clock0 = 0.0

    def _claim(self, outputs: list, inputs: list = ()) -> None:
        """The output policy (``hpcgpu._outputs.claim``) for the outputs not claimed yet. Collective.

        Every output is checked against ``inputs`` and the run's own (the first fit's files and datasets).
        """
        new = [o for o in outputs if (os.path.abspath(os.fspath(o.path)), o.dataset) not in self._claimed]
        if inputs:  # outputs claimed before must still not be one of these inputs (fit's data, save_results')
            new = list(outputs)
        if not new:
            return
        new = [dataclasses.replace(o, what=self._words(o.what)) for o in new]  # its warnings in the caller's words
        try:
            claim(new, [*inputs, *self._inputs], comm=self.rt.comm, overwrite=self._overwrite, prog="hpcgpu.train")
        except AgreedError as e:
            self._raise_in_words(e)
        self._claimed.update((os.path.abspath(os.fspath(o.path)), o.dataset) for o in new)

    def _warn(self, message: str) -> None:
        """A warning line about this rank alone on its stderr, naming it when there are several."""
        if self.rt.size > 1:
            message = message.replace("warning: ", f"warning: rank {self.rt.rank}: ", 1)
        write_line(message)  # several ranks may warn at one step

    def _agree_layout(self, c: TrainConfig, plan: ModelPlan | None) -> None:
        """:func:`hpcgpu.train.checks.layout_error`, agreed over the ranks in the caller's words. Collective."""
        err = layout_error(c, plan, self.rt.size, self.precision)
        agree(None if err is None else self._in_words(err), comm=self.rt.comm)

    def _arrays(self, data, what: str, sharded: bool, required_rows: int, task: str | None = None):
        """A Split of ``data`` (:func:`build.as_split`), the task the model's unless given. Collective."""
        if task is None:
            task = (self.config.task or None) if self.model.capabilities.task_from_data else self.model.task
        return build.as_split(data, what, sharded, required_rows, task, self.model, self.precision.master,
                              self.groups, self.rt.comm)

    def _set_data(self, train: Split, test: Split | None, where: str) -> None:
        """The data's parts: sampler, schedule, held-out set, metrics, step, console (:func:`build.bind_data`)."""
        d = build.bind_data(self._parts, self.config, self.rt, self.groups, self.precision, train, test, where,
                            self._validation_from_file, self.timer,
                            self.timing_keys() if self.config.timing else (), self._warn)
        self.config, self.train_split, self.sampler, self.schedule = d.config, d.train, d.sampler, d.schedule
        self._held_out, self.metrics, self._step_fn, self.console = d.held_out, d.metrics, d.step, d.console
        self._stats_on_device, self._stats, self._graphs_why = d.stats_on_device, d.stats, d.graphs_why

    def _prepare(self) -> None:
        """Resume from a checkpoint if asked, then plan the GEMM threads. Collective; once per run."""
        c = self.config
        plan = self._state.resume() if c.resume else None
        self._drained = self.step_in_epoch  # steps of the epoch whose loss is in the metrics' totals
        self.gemm_plan = build.gemm_plan(self.config, self.model, self.xp, self.sampler.local_micro_batch, plan,
                                         self.rt.comm)
        if self.gemm_plan is not None:  # else every GEMM on the rank's threads, as the model starts
            self.model.gemm_threads = self.gemm_plan.counts(_blas.threads() or 1)
        self.tensor_bytes = 0  # the plan's timed steps are not training steps
        if c.trace:  # time 0 of every rank's track: an instant the ranks shared
            self.rt.comm.Barrier()
            self._clock0 = time.perf_counter()
        self._prepared = True

    def _tensor_allreduce(self, buf) -> None:
        """Sum ``buf`` over the tensor group (the row-parallel output, the column-parallel input gradient)."""
        Allreduce(buf, comm=self.groups.tensor_comm)
        self.tensor_bytes += buf.nbytes

    def close(self) -> None:
        """Stop the stall watchdog, free the energy meter's, the sampler's and the groups' MPI objects. Collective.

        The model lets go of what it kept on the trainer's buffers (``nn.Torch``'s leaf tensors): a module kept
        after its trainer no longer keeps the trainer's memory alive.
        """
        self._release_stop()
        release(path for path, _ in self._claimed)  # its outputs' locks: another job may write them now
        if "model" in self.__dict__:
            self.__dict__["model"].release()
        for part, free in (("watchdog", "close"), ("energy", "free")):  # absent while the model waits for data
            if part in self.__dict__:
                getattr(self.__dict__[part], free)()
        if getattr(self, "sampler", None) is not None:
            self.sampler.free()
        self.groups.free()

    # -- training ------------------------------------------------------------------------------
    def fit(self, data=None, validation=None, *, sharded: bool = False, epochs: int | None = None,
            validation_split: float | None = None, callbacks=(), **others) -> dict[str, list]:
        """Train until the configured number of epochs, evaluating after each. Collective.

        Parameters
        ----------
        data : (X, y) or str, optional
            The training set: arrays in memory (NumPy, CuPy, h5py
            datasets: anything with ``len()``, ``shape`` and row slicing;
            lists are read as NumPy arrays), or an HDF5 file in the
            trainer's layout (``/train/X``, ``/train/y``).
            Not needed when the trainer was built from a config with ``data``.
            Given once: a later ``fit`` continues the same run on the same
            data (other data is refused: make another Trainer for it).
        validation : (X, y) or str, optional
            Evaluated after every epoch (``test_*`` metrics), as ``data``.
        sharded : bool
            Whether each rank passes its own rows of ``data`` and
            ``validation`` (their concatenation in rank order is the set),
            or every rank the whole set (each then takes its block). Nothing
            is ever broadcast from one rank.
        epochs : int, optional
            Train until this many epochs in all (the config's ``epochs`` by
            default): a later ``fit(epochs=20)`` trains on from where the
            run is (Keras's ``fit`` called again); a learning-rate schedule
            then spans the new total. A ``fit`` with nothing left to train
            says so on rank 0's stderr and returns the history.
        validation_split : float, optional
            Keras's: the last fraction of the rows of ``data`` (arrays given
            whole on every rank), before any shuffling, is held out as the
            validation set instead of a ``validation`` argument.
        callbacks : list of hpcgpu.train.callbacks.Callback, optional
            Called on every rank with rank 0's epoch row (one broadcast an
            epoch), so their decisions agree: ``EarlyStopping(monitor=...,
            patience=...)`` ends the training when a metric stops improving
            and puts back the best epoch's parameters.
        **others
            Nothing is taken: Keras's ``fit`` arguments (``x=``, ``y=``,
            ``validation_data=``, ``batch_size=``...) are refused in one line
            that names hpcgpu's way to say them.

        Returns
        -------
        dict of list
            :attr:`history`.

        Raises
        ------
        ValueError, TypeError
            Bad data (every rank, one line): arguments that differ across
            the ranks (the data's shapes and dtypes unless ``sharded``,
            ``epochs``...: :func:`hpcgpu.errors.agree_inputs`); see
            :func:`hpcgpu.train.data.from_arrays`; data of another number of
            features or targets than the model's; data given to a later
            ``fit``; ``epochs`` fewer than the epochs done; a
            ``validation_split`` outside (0, 1), with ``validation``, with
            ``sharded`` or a file, or leaving no row on either side.
        FloatingPointError
            Training diverged (every rank): the loss or the parameters are
            not finite; no checkpoint is written after it.

        Notes
        -----
        SIGINT (Ctrl-C), SIGUSR1 or SIGTERM (Slurm's warning signal,
        preemption), or the config's stop file, make every rank stop after
        the same step and write a checkpoint (the configured one, or one
        beside ``out``); then :attr:`stopped_by` says why. A second SIGINT
        ends the job at once (``hpcgpu._stop``). The handlers are those of
        :attr:`stop_request` when set (the command line installs one before
        anything else, so that a signal during start-up is not lost),
        otherwise installed from the first instant of the Trainer's
        construction to the end of its first ``fit`` (a signal between the
        two stops that fit after its first step), and from the first instant
        of each later ``fit`` to its end. With a checkpoint path, a
        checkpoint is also written at the end.
        """
        err = None
        if others:  # Keras's habits: one line on every rank alike (the arguments), not a traceback each
            name = next(iter(others))
            err = TypeError(f"fit: no argument {name}{_KERAS_FIT.get(name, '')}")
        callbacks = list(callbacks)
        if self.stop_request is None or installed_request() is not self.stop_request:
            # a later fit (the first one's handlers were put back at its end), or another trainer's handlers,
            # since put back: this fit's own, from its first instant
            self.stop_request = trainers_request(self.config.stop_file, self.rt.rank == 0)
            self._stop_owned = True
        if self._prepared and data is not None and validation_split in (None, self._first_split) and \
                _same_inputs((data, validation, sharded), self._first_fit):
            data = validation = validation_split = None  # the first fit's, as given (split or not): go on
        given = (data, validation, sharded, validation_split)
        try:
            # The first communication: the arguments agreed over the ranks (under the stop request: its first instant
            # comes before this)
            agree_inputs("fit", dict(_data_form(data, validation, sharded), epochs=epochs,
                                     validation_split=validation_split, callbacks=callbacks, **others),
                         comm=self.rt.comm, error=err)
            if validation_split is not None:
                data, validation = split_off(data, validation, validation_split, sharded)
            self._fit(data, validation, sharded, epochs, callbacks)
        except AgreedError as e:  # in the caller's words (the checks name the command line's flags)
            self._raise_in_words(e)
        finally:
            self._release_stop()
            if self._first_fit is None and self._prepared:  # what the first fit was given, before any split
                self._first_fit, self._first_split = given[:3], given[3]
        return self.history

    def _fit(self, data, validation, sharded: bool, epochs: int | None = None, callbacks=()) -> None:
        """:meth:`fit`'s body, under the stop request."""
        if "_pending" in self.__dict__ and self._pending[0] is None:  # the command line's MLP: its data file
            if validation is not None:  # (the file's /test split is its held-out set)
                raise agreed(ValueError("fit: the command line's MLP (Trainer(config)) is held out on its data "
                                        "file's /test split: give no validation="))
            self._go_on(None, None, epochs)  # the new total first: the schedule and a resume's check use it
            self._build_mlp(data)
            data = epochs = None  # taken
        elif "_pending" in self.__dict__:
            self._build_model(data)
        data, validation = self._go_on(data, validation, epochs, sharded)
        if not self._prepared:
            self._first_data(data, validation, sharded)
        c, console = self.config, self.console
        if self.epoch >= c.epochs and self._steps_run > 0:  # every rank alike: this process trained them all
            if self.rt.rank == 0:
                print(f"hpcgpu.train: fit: the run has done its {c.epochs} epochs: nothing to train "
                      f"(fit(epochs=N) trains on to N)", file=sys.stderr, flush=True)
            return
        console.say(results.header(self))
        self._check_stop_checkpoint()
        self.stopped_by = None  # this fit's (a fit after a stopped one continues the run)
        self._run_epochs(callbacks)
        just_written = c.checkpoint_every and self.step % c.checkpoint_every == 0 and not self.stopped_by
        unchanged = self.resumed_from is not None and self._steps_run == 0  # what it resumed from is the state
        # A stop always leaves a checkpoint: the one asked for, or beside the output (where --resume looks), or
        # in the working directory when there is neither (a library run).
        path = c.checkpoint_path or (c.default_checkpoint if self.stopped_by else None)
        if self.stopped_by and path is None:
            path = self._stop_checkpoint()
        if path and not just_written and not unchanged:
            self.save_checkpoint(path)
        self.checkpoint_file = path
        note_stopped(id(self), self.stopped_by)  # run_guarded's exit 3 (None: this run has finished)
        if self.stopped_by:
            if not getattr(self.stop_request, "reports_stop", False) and self.rt.rank == 0:  # the command line's own
                saved = (f"checkpoint {path}: {remove_first(self.stop_request)}Trainer(..., checkpoint={path!r}, "
                         "resume=True) continues" if path else "nothing was saved")
                print(f"hpcgpu.train: stopped ({self.stopped_by}) after step {self.step} (epoch {self.epoch + 1}); "
                      f"{saved}", file=sys.stderr, flush=True)

    def _build_model(self, data) -> None:
        """The first fit of a model whose first layer is ``Dense(units)``: its features, then its binding. Collective.

        The input features come from ``data`` (an HDF5 file's ``/train/X``, or the in-memory features, a sample's
        axes multiplied); then the model is planned, checked and bound as at construction.
        """
        model, loss, optimizer = self._pending
        source = data if data is not None else self.config.data
        width = build.input_width(source, self.rt.comm)
        if width < 1:  # what is wrong with the data, where it is the data (the same on every rank: the arguments)
            err = build.pair_error(source, "data") if source is not None else \
                ValueError("fit: give the training data, fit((X, y)) or fit('data.h5')")
            if err is None and isinstance(source, (tuple, list)):
                what = "data"
                try:
                    err = ValueError(f"{what}: X must be 2-D (N x D) with D > 0, has shape "
                                     f"{build.array_shape(source[0])}")
                except (TypeError, ValueError):  # a ragged list: as the data's own check says it
                    arrays, why = "X and y", "its rows are not all of one length"
                    err = ValueError(f"{what}: {arrays} cannot be read as arrays ({why})")
            raise agreed(err or ValueError(f"fit: {model} takes its input features from the data, which gives none: "
                                           "give them, Dense(n_in, n_out)"))
        plan = plan_model(model.build(width), loss)
        self._agree_layout(self.config, plan)
        self._bind(plan, optimizer)
        del self._pending  # bound: an error in _bind (the memory's) leaves the trainer waiting as it was
        self.config = build.described(self.config, self.optimizer, self.model)

    def _build_mlp(self, data) -> None:
        """The first fit of the command line's MLP (``Trainer(config)``): sized by its data file. Collective.

        ``data``, or the config's (the bundled digits without one): the features, the task (the labels', unless
        the config names one), the loss (cross-entropy or mean squared error by the task, unless named) and the
        classes (``num_classes``, or the labels') come from the file (:func:`build.mlp_plan`); then the model is
        bound as any other at its first fit, and the file is its training and held-out data.
        """
        _, _, optimizer = self._pending
        if data is not None and not isinstance(data, (str, os.PathLike)):
            raise agreed(TypeError(f"fit: the command line's MLP (Trainer(config)) is sized by an HDF5 file: give "
                                   f"its path, got {type(data).__name__}"))
        self.data_path = build.bundled_or(os.fspath(data) if data is not None else self.config.data, self.rt.comm)
        if data is not None:  # the data given to fit is an input: never one of this trainer's outputs
            self._claim(build.run_outputs(self.config), [Input(self.data_path, "data")])
        c, where = self.config, f"--data {self.data_path}"
        train, test, nc = build.file_splits(self.data_path, c.task or None, self.precision.master, self.groups,
                                            self.rt.comm)
        plan, self.config = build.mlp_plan(c, train, test, nc, where, self.groups)
        self._bind(plan, optimizer)
        del self._pending
        self.config = build.described(self.config, self.optimizer, self.model)
        self._set_data(train, test, where)
        self._prepare()

    def __getattr__(self, name: str):
        """A model still waiting for the data's features (``Dense(units)`` first): one line saying so."""
        if name in _BOUND and "_pending" in self.__dict__:
            why = "its first layer is Dense(units)" if self._pending[0] is not None else \
                "the command line's MLP, Trainer(config), is sized by its data file"
            raise agreed(ValueError(f"Trainer: the model takes its input features from the first fit's data ({why}): "
                                    "call fit first"))
        raise AttributeError(f"'Trainer' object has no attribute {name!r}")

    def _run_epochs(self, callbacks) -> None:
        """The epochs up to the config's, or to a stop (a signal, a callback's). Collective."""
        c, console = self.config, self.console
        for cb in callbacks:
            cb.on_fit_start(self)
        bar = console.open_bar(self.step)
        # Overflow becomes inf/NaN, which the step detects and reports once with
        # its epoch and step; NumPy's per-operation warnings would only add noise.
        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                while self.epoch < c.epochs:
                    lr = self.schedule(self.epoch * self.sampler.steps)
                    if not self.train_epoch(bar):
                        self.stopped_by = self._agreed_stop_reason()
                        break
                    row = self._finish_epoch(lr)
                    console.epoch(row)
                    if callbacks:  # rank 0's row on every rank: the callbacks' decisions agree by construction
                        with self.watchdog.watch("callbacks' Bcast", f"after epoch {self.epoch}"):
                            row = self.rt.comm.bcast(row, root=0)
                        if any([bool(cb.on_epoch_end(self, row)) for cb in callbacks]):  # each sees the epoch
                            break
        finally:
            console.close_bar()
        if not self.stopped_by:
            for cb in callbacks:
                cb.on_fit_end(self)

    def _agreed_stop_reason(self) -> str:
        """Why the ranks stopped, the same on every rank: the lowest rank's request that had one. Collective.

        The ranks agreed to stop in the step's Allreduce of a flag; a signal
        sent to some of them only (a Ctrl-C in one terminal, ``kill`` of one
        process) is named on every rank.
        """
        with self.watchdog.watch("the stop reason's Allgather", f"at step {self.step}"):
            reasons = self.rt.comm.allgather(self.stop_request.reason)
        return next((r for r in reasons if r), "a stop request")

    def _check_stop_checkpoint(self) -> None:
        """At a fit's start, a warning where a stop's :data:`STOP_CHECKPOINT` would be refused. Not collective.

        A library run with no checkpoint path writes that file when stopped: a file there that the output policy
        may not replace is said before the work, not after it (once a Trainer).
        """
        c = self.config
        if c.checkpoint_path or c.default_checkpoint or self.rt.rank != 0 or self._stop_checkpoint_checked:
            return
        self._stop_checkpoint_checked = True
        try:
            err = claim_error([_STOP_OUTPUT], self._inputs,
                              overwrite=self._overwrite)
        except (OSError, ValueError) as e:  # what claim says at the stop; only a warning here
            err = e
        if err is not None:
            print(f"hpcgpu.train: warning: a stop would save no checkpoint ({self._words(str(err))}): give "
                  "checkpoint=", file=sys.stderr, flush=True)

    def _stop_checkpoint(self) -> str | None:
        """Where a stopped run with no checkpoint configured writes one: :data:`STOP_CHECKPOINT`. Collective.

        Through the output policy: a file there that hpcgpu did not write, or
        a directory it cannot write, gives None and a warning on rank 0.
        """
        try:
            self._claim([_STOP_OUTPUT])  # the trainer's one way to the policy
        except AgreedError as e:
            if self.rt.rank == 0:
                print(f"hpcgpu.train: warning: no checkpoint after the stop: {e}", file=sys.stderr, flush=True)
            return None
        return STOP_CHECKPOINT

    def _first_data(self, data, validation, sharded: bool) -> None:
        """The first ``fit``'s data: read, checked, claimed as inputs, bound to the sampler. Collective."""
        if data is None and self.config.data is None:
            raise agreed(ValueError("fit: give the training data, fit((X, y)) or fit('data.h5')"))
        source = data if data is not None else (self.config.data or self.data_path)
        train = self._arrays(source, "data", sharded, self.groups.data_parallel_size)
        path = isinstance(source, (str, os.PathLike))
        test_source = validation if validation is not None else (source if path else None)
        test = None if test_source is None else self._arrays(test_source, "validation", sharded, 0,
                                                             task=train.task)
        self._validation_from_file = isinstance(test_source, (str, os.PathLike))
        # Every rank's files (sharded data: each rank its own, or a memory map here and a copy there): the claim
        # is collective, and no rank's input may be any rank's output
        files = list(dict.fromkeys(f for mine in self.rt.comm.allgather(
            _data_inputs(source, "data") + _data_inputs(validation, "validation")) for f in mine))
        if files:  # the data given to fit is an input: never one of this trainer's outputs
            self._claim(build.run_outputs(self.config), files)
            self._inputs = files
        self.data_path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "(arrays in memory)"
        self._set_data(train, test, "data" if self.data_path.startswith("(") else f"--data {self.data_path}")
        self._prepare()

    def _go_on(self, data, validation, epochs: int | None, sharded: bool = False) -> tuple:
        """A later ``fit``: the first fit's data or none; ``epochs``, the new total; the data left to read.

        ``epochs`` goes to the config, the schedule and the console; the data and validation returned are None
        once the run has its data. The arguments are the same on every rank: each raises the same error.
        Keras's habit: a later ``fit((X, y))`` of the same arrays (the same objects, or the same file) goes on
        with them, and a ``fit`` without ``epochs`` after the run has reached its epochs trains the Trainer's
        ``epochs`` more.
        """
        done = self.epoch if "_pending" not in self.__dict__ else 0
        if self._prepared and (data is not None or validation is not None) and \
                _same_inputs((data, validation, sharded), self._first_fit):
            data = validation = None  # the first fit's: go on with them
        if epochs is None and self._prepared and data is None and validation is None and \
                done >= self.config.epochs and self._steps_run > 0:
            epochs = done + self._per_fit
        if epochs is not None:
            if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < max(1, done):
                raise agreed(ValueError(f"fit: epochs={epochs!r} must be a whole number of epochs in all, at "
                                        f"least 1 and the {done} done"))
            if self.config.schedule == "cosine" and epochs != self.config.epochs:
                raise agreed(ValueError(f"fit: epochs={epochs}: a cosine schedule spans the run's "
                                        f"{self.config.epochs} epochs and cannot be extended; a constant or step "
                                        f"schedule can"))
            self.config = dataclasses.replace(self.config, epochs=epochs)
        if not self._prepared:
            return data, validation
        if data is not None or validation is not None:
            raise agreed(ValueError("fit: this Trainer trains on the data of its first fit; call fit() without "
                                    "data to go on (fit(epochs=N) to train further), or make a new Trainer"))
        if epochs is not None:  # the schedule and the progress span the new total
            self.schedule.total = self.config.epochs * self.sampler.steps
            self.console.epochs = self.config.epochs
        return None, None

    def train_epoch(self, bar=None) -> bool:
        """Run the rest of the current epoch. Collective.

        Starts at :attr:`step_in_epoch` (non-zero after a resume) and ends
        the epoch, or stops early after the step in which any rank received
        a stop signal (the flag rides in the gradient's Allreduce, so all
        ranks stop after the same step).

        Parameters
        ----------
        bar : tqdm.tqdm, optional
            Progress bar (anything with ``update(n)``), advanced by one after
            every step; ``None`` for none.

        Returns
        -------
        bool
            True when the epoch was finished, False when stopped.

        Raises
        ------
        FloatingPointError
            The reduced loss of a step is NaN or infinite (every rank; no
            checkpoint is written, so the last one stays good). At one rank
            on a GPU the losses are read at the end of the epoch, before a
            checkpoint and at a stop, so it is raised then, naming the same
            first step.
        """
        if not self._prepared:
            raise agreed(RuntimeError("train_epoch: no data yet: call fit(data) first (it runs the epochs, or give "
                                      "it epochs= to stop sooner)"))
        sampler, tm, step = self.sampler, self.timer, self._step_fn
        t0 = MPI.Wtime()
        tm.mark("data", f"epoch {self.epoch + 1} start")
        self.energy.start()
        with self.watchdog.watch("epoch data Alltoallv", f"epoch {self.epoch + 1}"):
            sampler.start_epoch(self.epoch)
        every, on_device = self.config.checkpoint_every, self._stats_on_device
        self._drained = self.step_in_epoch
        finished = True
        for s in range(self.step_in_epoch, sampler.steps):
            tm.mark("data", f"step {self.step + 1}")
            X, y = sampler.batch(s)
            tm.mark("compute", f"step {self.step + 1}")
            stop = self.stop_request is not None and self.stop_request.requested()
            partial = None if sampler.step_batch(s) == sampler.global_batch else \
                (sampler.last_batch, sampler.micro_batch_rows(s))
            slots = step(X, y, self.step, stop, reduce=not on_device or self.rt.size > 1, read=not on_device,
                         partial=partial)
            self.metrics.skipped += step.skipped_last
            if on_device:
                self._stats[s] = self.model.stats  # the reduced sums (a view of the reducer's slots)
                with self.watchdog.watch("stop flag Allreduce", f"step {self.step + 1}"):
                    stop = self.groups.any(stop, self.groups.comm)  # a host flag: no wait for the GPU
            else:  # any rank's request: every rank stops after this step (a data group's sum, then the tensor group's)
                with self.watchdog.watch("stop flag Allreduce", f"step {self.step + 1}"):
                    stop = self.groups.any(bool(slots["stop"]), self.groups.tensor_comm)
                self.metrics.add_step(*self._sums(slots), self.step, self.epoch, sampler.step_batch(s))
                self._drained = s + 1
            self._steps_run += 1
            self.step += 1
            self.step_in_epoch = s + 1
            if bar is not None:
                bar.update(1)
            if stop:
                finished = False
                break
            if every and self.step % every == 0:
                tm.mark("io", f"step {self.step}")
                self.save_checkpoint()
        # The wait for the device's last steps and the energy counters' read are the epoch's too: outside the
        # phases, the GPU kit's H200 found them 20 ms of a 57 ms epoch that the phases did not account for
        tm.mark("compute", f"epoch {self.epoch + 1} end")
        self._drain()
        self.energy.stop()
        tm.mark(None)
        self.metrics.seconds += MPI.Wtime() - t0
        return finished

    def _sums(self, slots: dict) -> tuple:
        """A step's reduced loss sum and metric sum, from the reducer's slots, by the model's slot names."""
        loss, metric = self._stat_names
        return slots[loss], slots[metric]

    def _drain(self) -> None:
        """Add the steps whose sums are still on the device (one copy to the host), in step order.

        Raises FloatingPointError naming the first step whose loss was not finite.
        """
        lo, hi = self._drained, self.step_in_epoch
        if hi > lo:
            first = self.step - (hi - lo)
            for i, (loss_sum, metric) in enumerate(_device.asnumpy(self._stats[lo:hi]).tolist()):
                self.metrics.add_step(loss_sum, metric, first + i, self.epoch, self.sampler.step_batch(lo + i))
        self._drained = hi

    def _finish_epoch(self, lr: float) -> dict:
        n = self.sampler.epoch_samples
        row = dict(epoch=self.epoch + 1, lr=lr, seconds=self.metrics.seconds,
                   samples_per_second=n / self.metrics.seconds if self.metrics.seconds > 0 else math.nan,
                   loss_scale=self.precision.loss_scale, skipped_steps=self._skipped_in_epoch())
        row.update(self.metrics.train_values(n))
        row.update(self._test_metrics())
        self.epoch += 1
        # Every collective of the epoch's end is watched (a rank stopped between two of them left the others
        # waiting in the next one, unwatched, for ever: seen under load)
        with self.watchdog.watch("energy Allgather", f"after epoch {self.epoch}"):
            j = self.energy.total()  # collective: the nodes' joules of this epoch's steps
        gflop = self.flops_per_sample() * n / 1e9
        row.update(energy_joules=j.total, energy_joules_cpu=j.cpu, energy_joules_gpu=j.gpu, gflop=gflop,
                   joules_per_gflop=j.total / gflop if gflop > 0 else math.nan)
        self._energy_reasons = {"cpu": j.cpu_reason, "gpu": j.gpu_reason}
        if self.config.timing:
            seconds = self._collect_phases()
            self._phase_carry = dict.fromkeys(self.PHASES, 0.0)
            with self.watchdog.watch("timing Allreduce", f"after epoch {self.epoch}"):
                phases = reduce_phases(seconds, self.rt.comm)
            for phase, stats in phases.items():
                row.update({f"{phase}_seconds_{n}": v for n, v in zip(("min", "mean", "max"), stats, strict=True)})
        self.metrics.append(row)
        self.step_in_epoch = 0
        return row

    def _skipped_in_epoch(self) -> int:
        return self.metrics.skipped

    def _test_metrics(self, held: HeldOut | None = None) -> dict:
        """The metrics of ``held`` (the run's held-out set by default: none without one; NaN for an empty set).

        Collective over the data-parallel ranks.
        """
        self.groups.share_buffers(self.model)  # every rank evaluates (and ends an epoch) with data rank 0's
        if held is None and self.metrics.held_out is None:  # the run has no held-out set: no such series
            return {}
        held = self._held_out if held is None else held
        if held.n_global == 0:
            return self.metrics.test_values([math.nan, math.nan], 0, math.nan)
        counted = self.tensor_bytes
        tot = self.model.evaluate_sums(held.X, held.y) if held.X.shape[0] else self.xp.zeros(2, dtype=np.float64)
        self.tensor_bytes = counted  # training steps' bytes only
        with self.watchdog.watch("evaluation Allreduce", f"after epoch {self.epoch + 1}"):
            Allreduce(tot, comm=self.groups.data_comm)  # a tensor group's ranks hold the same totals
        return self.metrics.test_values([float(v) for v in _device.asnumpy(tot)], held.n_global, held.sst)

    def evaluate(self, data=None, *, sharded: bool = False) -> dict:
        """The task's metrics on a data set, as exact global means. Collective.

        Parameters
        ----------
        data : (X, y) or str, optional
            As :meth:`fit`'s ``validation``; by default the validation set
            (the ``/test`` split of the training file).
        sharded : bool
            As :meth:`fit`.

        Returns
        -------
        dict
            ``loss`` and ``accuracy`` (classification), or ``loss``, ``rmse``
            and ``r2`` (regression); NaN without data.
        """
        agree_inputs("evaluate", _data_form(data, None, sharded), comm=self.rt.comm)
        if data is None:
            values = self._test_metrics(self._held_out)  # NaN where the run has none
        else:
            split = self._arrays(data, "evaluate", sharded, 0)
            agree(features_error(self.model, "evaluate", split.dim), comm=self.rt.comm)
            if self.model.num_classes is not None:
                check_labels("evaluate", [split], self.model.num_classes, self.groups.data_comm)
            values = self._test_metrics(HeldOut(split, self.xp, self.groups.data_comm))
        return {k.split("_", 1)[1]: v for k, v in values.items()}  # test_loss or val_loss: loss

    def predict(self, X, *, sharded: bool = False, root: int | None = 0, out: str | None = None,
                what: str = "out"):
        """The model's outputs for the rows of ``X``, in input order, with no padding. Collective.

        Each data-parallel rank predicts its block of rows (its own rows with
        ``sharded``); the blocks are gathered in rank order by ``Gatherv``
        (or ``Allgatherv``), or written by each rank into an HDF5 dataset.

        Parameters
        ----------
        X : array_like or str, shape (N, D)
            As :meth:`fit`'s ``data`` features, or an HDF5 ``FILE[:DATASET]``
            (the dataset defaults to ``/test/X``).
        sharded : bool
            Each rank passes its own rows (their concatenation in rank order is ``X``).
        root : int or None
            The rank that receives the predictions (others get None); None: every rank.
        out : str, optional
            ``FILE:DATASET`` to write the predictions to instead (added to
            or replaced in ``FILE``, atomically; each rank writes its rows),
            under the output policy (``hpcgpu._outputs``): never over
            ``X``'s dataset nor a dataset hpcgpu did not write.
        what : str
            How messages name ``out`` (a command line passes its option).

        Returns
        -------
        numpy.ndarray of shape (N, ...), or None
            On ``root`` (every rank with ``root=None``); None elsewhere and with ``out``. In the model's
            output shape: (N, k) for the built-in layers, (N,) for a model of one's own (a PyTorch module, a
            JAX function) whose outputs are (n,). For classification the outputs are logits (before the softmax).

        Raises
        ------
        ValueError
            ``X`` of another number of features than the model's, not 2-D,
            or with NaN; no rows; features that are not real numbers
            (complex, strings) or not an array; an unwritable ``out``;
            arguments that differ across the ranks (``X``'s shape and dtype
            unless ``sharded``, ``root``, ``out``) (every rank).
        """
        from ..io import split_spec

        comm, dcomm = self.rt.comm, self.groups.data_comm
        agree_inputs("predict", dict(X=None if sharded else X, sharded=sharded, root=root, out=out, what=what),
                     comm=comm)
        if out is not None:  # the output policy, before any work: never over X, never over a user's file
            out_path, out_name = split_spec(out, "y_hat")
            source = split_spec(os.fspath(X), "/test/X") if isinstance(X, (str, os.PathLike)) else None
            # X's file is an input (a path; an h5py dataset or memory map on any rank): never the output's
            inputs = [Input(source[0], "X", source[1])] if source else list(dict.fromkeys(
                f for mine in comm.allgather(_data_inputs((X,), "X")) for f in mine))
            self._claim([Output(out_path, what, dataset=out_name)], inputs)
        source_path = source_name = None
        if isinstance(X, (str, os.PathLike)):
            path, name = split_spec(os.fspath(X), "/test/X")
            source_path, source_name = path, name
            X = agree_call(lambda: HDF5Rows(path, name), catch=(ValueError, OSError), comm=comm)
        dtype = self.precision.master
        self.groups.share_buffers(self.model)  # every rank predicts with data rank 0's statistics
        split = self._arrays((X, ZeroTargets(len(X))), "predict", sharded, 0, task="regression")
        named = f"predict {os.fspath(source_path)}:{source_name}" if source_path else "predict"
        agree(features_error(self.model, named, split.dim), comm=comm)
        if split.n_global == 0:  # every rank alike: no output has a width to give
            raise agreed(ValueError(f"{named}: X has no rows"))
        local = _device.asnumpy(self.model.predict(self.xp.asarray(split.X))).astype(dtype, copy=False)
        # the model's output shape a sample, from the ranks with rows: (n,) outputs stay (n,)
        tail = next(t for t in dcomm.allgather(local.shape[1:] if local.shape[0] else None) if t is not None)
        if out is not None:
            path, name = split_spec(out, "y_hat")
            err = None
            if self.groups.tensor_rank == 0:  # one tensor column writes: every column holds the same rows
                try:
                    write_dataset(path, name, (split.n_global, *tail), local.reshape(local.shape[0], *tail),
                                  (slice(split.start, split.stop),) + (slice(None),) * len(tail), comm=dcomm,
                                  attrs=dict(hpcgpu_version=__version__, rows=split.n_global),
                                  what=what, overwrite=self._overwrite)
                except AgreedError as e:
                    err = str(e)
            if self.groups.tensor_comm is not None:  # the other columns learn the outcome
                err = self.groups.tensor_comm.bcast(err, root=0)
            if err is not None:
                raise agreed(OSError(err))
            return None
        k = math.prod(tail)
        full = self.groups.gather_rows(np.ascontiguousarray(local.reshape(local.shape[0], k)), split.n_global, root)
        return None if full is None else full.reshape(split.n_global, *tail)

    def flops_per_sample(self) -> float:
        """Floating-point operations of one sample's forward and backward pass, as the model counts them.

        Analytic for the built-in layers (``6 sum(ab) - 2 a_0 b_0``); 0 for a model of one's own. Not collective.

        Returns
        -------
        float
        """
        return self.model.flops_per_sample()

    @classmethod
    def timing_keys(cls) -> tuple:
        """The history's timing series: ``<phase>_seconds_{min,mean,max}`` for each of :data:`PHASES`.

        Returns
        -------
        tuple of str
        """
        return tuple(f"{p}_seconds_{n}" for p in cls.PHASES for n in ("min", "mean", "max"))

    def _collect_phases(self) -> dict:
        """This rank's seconds per phase of the unfinished epoch (those before a resume included)."""
        got = self.timer.collect()
        self._phase_carry = {k: self._phase_carry[k] + got[k] for k in self.PHASES}
        return dict(self._phase_carry)

    # -- state and checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything a run needs to continue exactly, as host values. Not collective; no side effects.

        Returns
        -------
        dict
            ``model``, ``optimizer`` (its state arrays by name, this rank's),
            ``schedule``, ``sampler``, ``precision`` (each part's own
            ``state_dict()``), ``progress`` (``epoch``, ``step``,
            ``step_in_epoch``, ``updates``, the metrics' state, and the
            unfinished epoch's ``phase_seconds`` as last collected),
            ``gemm_threads`` (the :class:`GemmPlan` as JSON, or "") and
            ``buffers`` (the model's state that is not trained, BatchNorm's
            running statistics, by name; empty for most models).
        """
        return self._state.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Take the parts of ``state`` (as :meth:`state_dict` gives them) that it has. Not collective.

        The GEMM thread plan is not taken here: it is chosen at
        construction (see ``gemm_threads`` of :class:`TrainConfig`).

        Parameters
        ----------
        state : dict
            Some or all of :meth:`state_dict`'s keys.

        Raises
        ------
        ValueError
            A part does not fit this run (another model size, another
            sample order, another optimizer's state).
        """
        self._state.load_state_dict(state)

    def broadcast_state(self, root: int = 0) -> None:
        """Make every rank's state rank ``root``'s. Collective.

        The parameters and the optimizer state go by ``Bcast`` (device to
        device where MPI can), the rest as one pickled object (Horovod's
        ``TorchState.sync``). With tensor parallelism or ZeRO the ranks hold
        different slices: the unsplit state is gathered on rank 0 and each
        rank takes its slice of it (``root`` must then be 0).

        Parameters
        ----------
        root : int
            The rank whose state every rank takes.

        Raises
        ------
        ValueError
            ``root`` is not 0 with tensor parallelism or ZeRO (every rank).
        """
        if root != 0 and (self.groups.tensor_comm is not None or self.reducer.shard is not None):
            raise agreed(ValueError("broadcast_state: the root must be rank 0 with tensor parallelism or ZeRO"))
        self._state.sync(root)

    def gather_global(self) -> tuple:
        """The unsplit model's parameters and optimizer state, on rank 0. Collective.

        Returns
        -------
        (numpy.ndarray, dict) or (None, None)
            ``params`` of shape (n_global,) and the optimizer's state arrays
            by name, each of shape (n_global,), on rank 0; None elsewhere.
        """
        return self._state.gather_global()

    def load_weights(self, path: str) -> None:
        """Set the model's parameters to those a results file holds, by name. Collective.

        Keras's ``model.load_weights``, PyTorch's ``load_state_dict`` for a
        trained model: the file ``save_results`` (or the command line's
        ``--out``) wrote, of this model's parameters, at any number of ranks
        and any tensor-parallel split. Rank 0 reads the file and broadcasts
        the unsplit parameters; each rank keeps its slice. Works for the
        built-in layers and a model of one's own alike; the optimizer's
        state, the step and the epoch are not touched (a checkpoint and
        ``resume=True`` continue a run). The preprocessing a script applies
        to its data (standardization) is the script's: apply it again.

        Parameters
        ----------
        path : str
            The results file (HDF5, its ``/model`` group).

        Raises
        ------
        FileNotFoundError, ValueError
            Every rank: no such file, not a results file, or a parameter
            missing, extra or of another shape (named).
        """
        agree_inputs("load_weights", {"path": path}, comm=self.rt.comm)
        self._state.load_weights(path, "load_weights")

    def load_global(self, params, states: dict) -> None:
        """Take this rank's slice (and ZeRO block) of the unsplit ``params`` and optimizer state. Not collective.

        Parameters
        ----------
        params : numpy.ndarray, shape (n_global,)
        states : dict of str to numpy.ndarray
            Each of shape (n_global,), in the layout of :meth:`gather_global`.
        """
        self._state.load_global(params, states)

    def data_fingerprint(self) -> dict:
        """The training (and test) data's fingerprints (:func:`hpcgpu.train.data.fingerprint`). Collective.

        Computed on the first call (one pass over each rank's shard), then
        kept; written into checkpoints and checked on resume.

        Returns
        -------
        dict
            ``{"train": {...}, "test": {...}}`` (``test`` absent without a test split).
        """
        return self._state.fingerprint()

    def save_checkpoint(self, path: str | None = None) -> str:
        """Write a checkpoint (rank 0, atomically; the last ``keep_checkpoints`` kept).

        Collective: the outcome is agreed, so a failed write raises
        ``OSError`` on every rank.

        Parameters
        ----------
        path : str, optional
            The checkpoint file; the config's :attr:`TrainConfig.checkpoint_path`
            when omitted. Older files are kept as ``path.1``, ``path.2``, ...

        Returns
        -------
        str
            The path written.

        Raises
        ------
        ValueError
            No path; no data yet (before the first ``fit``).
        OSError
            The checkpoint cannot be written (every rank); the older ones are
            untouched.
        FloatingPointError
            The parameters are not finite (every rank); nothing is written.
        """
        return self._state.save_checkpoint(path)

    # -- output --------------------------------------------------------------------------------
    def save_results(self, path: str | None = None) -> str:
        """Write metrics, the model and provenance to HDF5, atomically, from rank 0.

        Collective (the outcome is agreed, so a failed write raises on every
        rank). Layout: :mod:`hpcgpu.train.output`; root attributes
        ``config`` (JSON), ``model`` (JSON), ``task``, ``world_size``,
        ``device``, ``mpi_library``, ``hpcgpu_version``, ``data``,
        ``data_fingerprint``, ``num_classes`` (classification),
        ``epochs_done``, ``steps_done``, ``resumed_from``, ``blas_threads``
        and ``gemm_threads`` (the :class:`GemmPlan` as JSON; empty when every
        GEMM ran on the rank's threads).

        Parameters
        ----------
        path : str, optional
            The HDF5 file, replaced if it exists; the config's ``out`` when
            omitted.

        Returns
        -------
        str
            The path written.

        Raises
        ------
        ValueError
            No path, and the config has no ``out`` (every rank).
        OSError
            The file cannot be written, or is an input (every rank).
        """
        return results.save_results(self, path)

    @property
    def history(self) -> dict:
        """Per-epoch series by name (see the class's attributes); empty before data is given."""
        metrics = getattr(self, "metrics", None)
        return metrics.history if metrics is not None else {}

    @property
    def params(self) -> dict:
        """This rank's parameters by name, as views into the flat buffer (a tensor slice with tensor parallelism)."""
        return dict(self.model.named_parameters())

    def write_trace(self, path: str | None = None) -> str | None:
        """Write the phases of every step of this run as a Chrome trace, one track per rank.

        Collective (the events are gathered to rank 0, which writes; the
        outcome is agreed).

        Parameters
        ----------
        path : str, optional
            The JSON file; the config's ``trace`` when omitted.

        Returns
        -------
        str or None
            The path written; ``None`` when no trace was asked for.

        Raises
        ------
        OSError
            The file cannot be written (every rank).
        """
        return results.write_trace(self, path)

    def comm_stats(self) -> dict:
        """This rank's communication per training step, and its optimizer state. Not collective.

        Returns
        -------
        dict
            ``data_parallel`` (D), ``tensor_parallel`` (T), ``zero_stage``;
            ``tensor_bytes_per_step`` and ``data_bytes_per_step``: the bytes
            this rank passed to tensor-group and data-group collectives, per
            step of this run (message sizes: evaluation excluded);
            ``optimizer_state_bytes``: the optimizer state this rank holds.
        """
        return results.comm_stats(self)

    # -- rank 0's voice ------------------------------------------------------------------------
