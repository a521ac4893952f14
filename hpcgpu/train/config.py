"""The options of a training run: :class:`TrainConfig`, one field per command-line option."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from dataclasses import dataclass

from ..watchdog import stall_timeout

__all__ = ["TrainConfig"]

_WANTS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "True or False",
          "tuple": "a tuple of integers"}
"""What :meth:`TrainConfig.type_error` says each field type wants."""
_PATHS = ("data", "out", "checkpoint", "stop_file", "trace")
"""The fields that name a file: a string or an ``os.PathLike``."""


def _integer(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _of_kind(kind: str, value, path: bool) -> bool:
    """Whether ``value`` is of the field type ``kind`` (a file name's ``str`` may be an ``os.PathLike``)."""
    if kind == "int":
        return _integer(value)
    if kind == "float":
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str) or path and isinstance(value, os.PathLike)
    if kind == "bool":
        return isinstance(value, bool)
    return isinstance(value, (tuple, list)) and all(_integer(h) for h in value)  # "tuple": hidden widths


@dataclass
class TrainConfig:
    """Every option of a training run (the command line's, one to one).

    Attributes
    ----------
    data : str or None
        HDF5 file in the layout of :mod:`hpcgpu.datasets`; ``None`` means the
        bundled digits set, written on first use to
        :func:`hpcgpu.datasets.default_data_path`.
    out : str
        HDF5 file for metrics and model, written atomically by rank 0.
    epochs : int
        Passes over the training set.
    batch_size : int
        GLOBAL batch size B (samples per step over all ranks).
    grad_accum_steps : int
        K: each step runs K micro-batches of B / K samples (over all ranks)
        and reduces once (PyTorch DDP's ``no_sync``, Horovod's
        ``backward_passes_per_step``); activations take 1/K of the memory.
        K must divide B, and B / K must be at least the number of ranks.
    drop_last : bool
        True (the default): the last ``N mod B`` samples of each epoch's
        order wait for a later epoch, so every step averages over exactly B
        samples. False (PyTorch's ``DataLoader`` default): they are an
        epoch's last, smaller step, averaged over its own samples. Either
        way the same samples at any number of ranks
        (:class:`hpcgpu.train.GlobalBatchSampler`).
    lr : float
        Peak learning rate (per mean-loss gradient).
    clip_grad_norm : float or None
        Scale the gradient so that its global L2 norm is at most this
        (PyTorch's ``clip_grad_norm_`` after DDP's reduction): the norm of
        the reduced, averaged gradient over all parameters, the same on
        every rank, after the last micro-batch and after mixed precision's
        unscaling (a skipped step is left alone). The epoch's mean and
        largest pre-clip norms are the history's ``grad_norm`` and
        ``grad_norm_max``. None: no clipping.
    clip_grad_value : float or None
        Clamp each element of the reduced, averaged gradient to
        ``[-clip_grad_value, clip_grad_value]`` (PyTorch's
        ``clip_grad_value_``). None: no clipping.
    momentum, weight_decay : float
        SGD momentum, and the weight decay: L2 for SGD and Adam,
        decoupled for AdamW.
    optimizer : {"sgd", "adam", "adamw"}
        :class:`hpcgpu.optim.SGD` (with ``momentum``), ``Adam`` or ``AdamW``
        (betas 0.9 and 0.999, eps 1e-8).
    task : {"", "classification", "regression"}
        "" (the default): from the targets, integer labels or float values.
    loss : {"", "cross-entropy", "mse", "huber"}
        "" (the default): ``cross-entropy`` for classification, ``mse`` for
        regression.
    hidden : tuple of int
        Hidden layer widths; empty for softmax regression.
    seed : int
        Seeds initial weights and every epoch's sample order.
    device : {"auto", "cpu", "gpu"}
    collectives : {"auto", "nccl", "mpi"}
        How device buffers travel between ranks (:func:`hpcgpu.init`).
    schedule : {"cosine", "step", "constant"}
    warmup_epochs : float
        Linear warm-up length, in epochs.
    lr_step_epochs : int
        Epochs between decays (``schedule="step"``).
    lr_gamma : float
        Decay factor (``schedule="step"``).
    dtype : {"float32", "float64"}
        The alias of ``precision`` ``32-true`` / ``64-true`` (and the type of
        the data as read).
    precision : {"", "64-true", "32-true", "bf16-mixed", "16-mixed"}
        PyTorch Lightning's names (``hpcgpu.train.precision``); "" (the
        default): from ``dtype``. The mixed ones keep float32 weights,
        optimizer state and gradient reduction, and multiply in 16 bits;
        ``16-mixed`` scales the loss dynamically (``torch.amp.GradScaler``'s
        constants).
    progress : {"auto", "bar", "lines", "none"}
        Rank 0's output: a bar on a terminal, one line per epoch otherwise.
    checkpoint : str or None
        Checkpoint file (HDF5). ``None``: ``<out without .h5>.ckpt.h5`` when
        ``checkpoint_every`` or ``resume`` asks for checkpoints, else none.
    checkpoint_every : int
        Write a checkpoint every this many global steps (0: only when
        stopped by a signal and at the end).
    keep_checkpoints : int
        How many checkpoint files to keep (``PATH``, ``PATH.1``, ...).
    resume : bool
        Continue from the newest readable checkpoint (falling back to older
        ones); start from scratch when there is none.
    stop_file : str or None
        When this file appears, checkpoint after the current step and stop
        (see :class:`StopRequest`). One that exists already stops the run
        after its first step (a warning says so); the run's data, output
        or checkpoint file is refused.
    stall_timeout : float or None
        Seconds a collective may wait before the job is aborted with a
        report of the ranks that have not arrived (0: off; ``None``:
        ``$HPCGPU_STALL_TIMEOUT``, else 600, see
        :data:`hpcgpu.watchdog.DEFAULT_STALL_TIMEOUT` and
        :class:`hpcgpu.watchdog.Watchdog`).
    tensor_parallel : int
        T: the ranks form a data x tensor grid of ``P / T`` replicas of T
        ranks each (consecutive ranks: a node's, under block placement);
        each tensor group splits the layers in Megatron-LM's pattern
        (``hpcgpu.nn.layer_plan``). T must divide P and be at
        most the smallest hidden width.
    zero_stage : {0, 1}
        1: ZeRO stage 1, the momentum sharded over the data-parallel ranks
        (a ``Reduce_scatter`` of the gradient, each rank's block updated,
        an ``Allgather`` of the parameters).
    sync_batchnorm : bool
        BatchNorm normalizes over the GLOBAL batch in training (PyTorch's
        ``SyncBatchNorm``): each ``BatchNorm1d/2d/3d`` of an
        :class:`hpcgpu.nn.Torch` module takes its mean and variance from
        the data-parallel ranks' local batches together (an Allreduce per
        layer forward and backward), so the model does not depend on the
        number of ranks. The layers are replaced in the module itself (as
        ``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` does; the same
        parameter and buffer names); in eval mode they are PyTorch's
        batch normalization. Nothing to do for other models (the built-in
        layers have no BatchNorm). False: each rank's rows alone. The
        library's only: the command line trains the built-in MLP, so it has
        no ``--sync-batchnorm``.
    data_placement : {"auto", "sharded", "replicated"}
        ``sharded``: each rank holds its ``1/P`` of the training set and the
        rows each epoch needs arrive by one ``Alltoallv`` per epoch;
        ``replicated``: every rank holds all of it (gathered once), and an
        epoch starts without communication; ``auto``: replicated when the
        set takes at most 2 GiB and all the node's ranks' copies at most an
        eighth of its memory. The batches, and so the model, are the same.
    bucket_mb : float
        Gradient bucket size in MB (10**6 bytes; PyTorch DDP's default 25):
        with more than one bucket, each bucket's ``Iallreduce`` is posted as
        soon as the backward pass has written it, overlapping the rest of
        the backward pass; one bucket is one ``Allreduce`` after it.
    gemm_threads : {"auto", "all"}
        On the CPU with more than one BLAS thread per rank: ``auto`` times
        each GEMM of the step at one thread and at the rank's threads at
        start and keeps the threads only where they pay (a resumed run
        reuses the checkpoint's choice); ``all`` runs every GEMM on the
        rank's threads (see ``hpcgpu.train.gemm_threads``).
    cuda_graphs : {"auto", "off"}
        On a GPU: ``auto`` replays each step's forward and backward passes
        from a CUDA graph where they can be captured (one rank or one
        bucket, no gradient accumulation, no mixed precision, no tensor
        parallelism; see ``hpcgpu.train.cuda_graphs``), ``off`` launches every
        kernel from Python. The run's first line says which.
    trace : str or None
        Write a Chrome trace (``chrome://tracing``, Perfetto) of every
        step's phases, one track per rank, to this JSON file at the end.
    overwrite : bool
        Replace existing output files that hpcgpu did not write (refused
        otherwise: the output policy, ``hpcgpu._outputs``).
    timing : bool
        Time the phases of each step (data, compute, comm, io) into
        ``/timing``; on by default (its cost is measured by
        ``benchmarks/observe.py``), off only to measure that cost.
    """

    data: str | None = None
    out: str = os.path.join("results", "train.h5")
    epochs: int = 20
    batch_size: int = 64
    grad_accum_steps: int = 1
    drop_last: bool = True
    lr: float = 0.05
    clip_grad_norm: float | None = None
    clip_grad_value: float | None = None
    momentum: float = 0.9
    weight_decay: float = 1e-4
    optimizer: str = "sgd"
    task: str = ""
    loss: str = ""
    hidden: tuple = (256, 256)
    seed: int = 0
    device: str = "auto"
    collectives: str = "auto"
    schedule: str = "cosine"
    warmup_epochs: float = 1.0
    lr_step_epochs: int = 10
    lr_gamma: float = 0.1
    dtype: str = "float32"
    precision: str = ""
    progress: str = "auto"
    checkpoint: str | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    stop_file: str | None = None
    stall_timeout: float | None = None
    gemm_threads: str = "auto"
    bucket_mb: float = 25.0
    cuda_graphs: str = "auto"
    data_placement: str = "auto"
    tensor_parallel: int = 1
    zero_stage: int = 0
    sync_batchnorm: bool = False
    trace: str | None = None
    timing: bool = True
    overwrite: bool = False

    @property
    def checkpoint_path(self) -> str | None:
        """The checkpoint file, from ``checkpoint`` or ``out``; ``None`` when none is asked for."""
        if self.checkpoint:
            return self.checkpoint
        if self.checkpoint_every or self.resume:
            return self.default_checkpoint
        return None

    @property
    def default_checkpoint(self) -> str | None:
        """``out`` with ``.ckpt.h5`` for ``.h5``: where a checkpoint goes by default (None without ``out``).

        A stopped run writes its checkpoint there even when none was asked
        for, and ``--resume`` looks there.
        """
        if not self.out:
            return None
        base = self.out[:-3] if self.out.endswith(".h5") else self.out
        return base + ".ckpt.h5"

    def type_error(self) -> TypeError | None:
        """The first option of another type than its field's, as an error naming it and the type; else ``None``.

        Not collective. Integers for ``int`` fields (not bools, not floats: ``epochs=2.5`` is refused), real
        numbers for ``float`` fields, strings (a file name may be an ``os.PathLike``; None where the field
        allows it), True or False for switches, a tuple or list of integers for ``hidden``.
        """
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), f.type.replace(" | None", "")
            if value is None and (f.type.endswith("| None") or f.name == "out"):
                continue
            if not _of_kind(kind, value, f.name in _PATHS):
                # a switch is named as the Trainer's argument: the command line's own is always a bool, and its
                # flag would read as drop_last=True in the Trainer's words (hpcgpu.Trainer._words)
                flag = f.name if kind == "bool" else "--" + f.name.replace("_", "-")
                return TypeError(f"{flag} must be {_WANTS[kind]}, got {value!r}")
        return None

    def validate(self) -> Exception | None:
        """The first bad option, as an error naming it (:meth:`type_error` first); ``None`` when all are fine."""
        err = self.type_error()
        if err is not None:
            return err
        checks = [
            (self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.grad_accum_steps >= 1 and self.batch_size % self.grad_accum_steps == 0,
             f"--grad-accum-steps must be a positive divisor of --batch-size {self.batch_size}, "
             f"got {self.grad_accum_steps}"),
            (self.lr > 0 and math.isfinite(self.lr), f"--lr must be a positive number, got {self.lr}"),
            (0 <= self.momentum < 1, f"--momentum must be in [0, 1), got {self.momentum}"),
            (self.clip_grad_norm is None or 0 < self.clip_grad_norm < math.inf,
             f"--clip-grad-norm must be a positive number, got {self.clip_grad_norm}"),
            (self.clip_grad_value is None or 0 < self.clip_grad_value < math.inf,
             f"--clip-grad-value must be a positive number, got {self.clip_grad_value}"),
            (self.clip_grad_norm is None or self.clip_grad_value is None,
             "--clip-grad-norm and --clip-grad-value: give one of them"),
            (self.clip_grad_norm is None or self.tensor_parallel == 1,
             "--clip-grad-norm does not combine with --tensor-parallel; --clip-grad-value does"),
            (self.optimizer in ("sgd", "adam", "adamw"),
             f"--optimizer must be sgd, adam or adamw, got {self.optimizer!r}"),
            (self.task in ("", "classification", "regression"),
             f"--task must be classification or regression, got {self.task!r}"),
            (self.loss in ("", "cross-entropy", "mse", "huber"),
             f"--loss must be cross-entropy, mse or huber, got {self.loss!r}"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}"),
            (all(int(h) >= 1 for h in self.hidden), f"--hidden widths must be >= 1, got {self.hidden}"),
            (self.device in ("auto", "cpu", "gpu"), f"--device must be auto, cpu or gpu, got {self.device!r}"),
            (self.collectives in ("auto", "nccl", "mpi"),
             f"--collectives must be auto, nccl or mpi, got {self.collectives!r}"),
            (self.schedule in ("cosine", "step", "constant"), f"--schedule: unknown {self.schedule!r}"),
            (self.warmup_epochs >= 0, f"--warmup-epochs must be >= 0, got {self.warmup_epochs}"),
            (math.isfinite(self.warmup_epochs), f"--warmup-epochs must be finite, got {self.warmup_epochs}"),
            (self.lr_step_epochs >= 1, f"--lr-step-epochs must be >= 1, got {self.lr_step_epochs}"),
            (0 < self.lr_gamma <= 1, f"--lr-gamma must be in (0, 1], got {self.lr_gamma}"),
            (0 <= self.seed < 2**63, f"--seed must be in [0, 2**63), got {self.seed}"),
            (self.dtype in ("float32", "float64"), f"--dtype must be float32 or float64, got {self.dtype!r}"),
            (self.progress in ("auto", "bar", "lines", "none"), f"--progress: unknown {self.progress!r}"),
            (self.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {self.checkpoint_every}"),
            (self.keep_checkpoints >= 1, f"--keep-checkpoints must be >= 1, got {self.keep_checkpoints}"),
            (self.bucket_mb > 0 and math.isfinite(self.bucket_mb), f"--bucket-mb must be > 0, got {self.bucket_mb}"),
            (self.tensor_parallel >= 1, f"--tensor-parallel must be >= 1, got {self.tensor_parallel}"),
            (self.zero_stage in (0, 1), f"--zero-stage must be 0 or 1, got {self.zero_stage}"),
            (not self.resume or bool(self.checkpoint_path),
             "--resume needs --checkpoint (or --out, beside which it looks for OUT.ckpt.h5)"),
            (self.data_placement in ("auto", "sharded", "replicated"),
             f"--data-placement must be auto, sharded or replicated, got {self.data_placement!r}"),
            (self.gemm_threads in ("auto", "all"), f"--gemm-threads must be auto or all, got {self.gemm_threads!r}"),
            (self.cuda_graphs in ("auto", "off"), f"--cuda-graphs must be auto or off, got {self.cuda_graphs!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                return ValueError(msg)
        try:
            self.resolved_precision()
        except ValueError as e:
            return e
        try:
            stall_timeout(self.stall_timeout)
        except ValueError as e:
            return e
        return None

    def resolved_precision(self):
        """``(name, master dtype, compute dtype or None)`` of :func:`hpcgpu.train.precision.resolve`."""
        from .precision import resolve

        return resolve(self.precision, self.dtype)

    def to_json(self) -> str:
        """Every option as JSON (sorted keys), as written to outputs and checkpoints."""
        d = dataclasses.asdict(self)
        d["hidden"] = list(d["hidden"])
        return json.dumps(d, sort_keys=True)
