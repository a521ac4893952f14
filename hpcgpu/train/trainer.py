"""The data-parallel SGD trainer.

One step (Goyal et al., "Accurate, Large Minibatch SGD", 2017, section 2):
every rank runs forward and backward on its local batch, which gives the SUM
of its per-sample gradients in the model's flat gradient buffer; one
``Allreduce(SUM)`` of that buffer (with the loss sum and correct count riding
in its last two slots) gives the global sum; dividing by the global batch
size gives the mean gradient, and every rank applies the same SGD update, so
the parameters stay identical without ever being broadcast again.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .. import _blas, _device
from .._version import __version__
from ..comm import Allreduce, Bcast, agree
from ..errors import agreed
from ..watchdog import Watchdog, stall_timeout
from ..io import atomic_path, on_root, writable_error, write_attrs
from ..runtime import Runtime, init
from .data import GlobalBatchSampler, check_labels, load_split
from .model import MLP
from .optim import SGD, LRSchedule
from .threads import GemmPlan, plan_gemm_threads

__all__ = ["TrainConfig", "Trainer", "StopRequest"]


class StopRequest:
    """A request to stop at the next step: SIGUSR1, SIGTERM, or a stop file.

    Not collective: each rank records its own requests; the trainer agrees
    on them in the step's Allreduce, so all ranks stop after the same step.
    A second signal of the same kind takes its default action (the process
    ends), for a user who really means it.

    Parameters
    ----------
    stop_file : str, optional
        A file whose appearance asks for a stop. Job scripts prefer it to
        forwarding a signal: it cannot kill a process that has not yet
        installed its handlers, and it needs no launcher to pass it on.
    check_file : bool
        Whether this rank looks for the file (rank 0 only, so a parallel
        file system sees one metadata request per second, not one per rank
        and step).
    interval : float
        Seconds between looks at the file.

    Attributes
    ----------
    reason : str or None
        ``"SIGUSR1"``, ``"SIGTERM"`` or ``"stop file PATH"`` once requested.
    """

    SIGNALS = ("SIGUSR1", "SIGTERM")

    def __init__(self, stop_file: str | None = None, check_file: bool = True, interval: float = 1.0):
        self.reason: str | None = None
        self.stop_file, self.check_file, self.interval = stop_file, check_file, interval
        self._next_look = 0.0
        self._old: dict = {}

    def _handler(self, signum, frame):
        import signal

        name = signal.Signals(signum).name
        if self.reason == name:
            signal.signal(signum, self._old.get(name, signal.SIG_DFL))
            signal.raise_signal(signum)
            return
        self.reason = self.reason or name

    def requested(self) -> bool:
        """Whether a stop was asked for on this rank (looks at the file now and then)."""
        if self.reason is None and self.stop_file and self.check_file:
            now = time.monotonic()
            if now >= self._next_look:
                self._next_look = now + self.interval
                if os.path.exists(self.stop_file):
                    self.reason = f"stop file {self.stop_file}"
        return self.reason is not None

    def install(self) -> "StopRequest":
        """Install the signal handlers (main thread only; elsewhere a no-op)."""
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                self._old[name] = signal.signal(getattr(signal, name), self._handler)
        return self

    def uninstall(self) -> None:
        """Put the previous handlers back."""
        import signal

        for name, h in self._old.items():
            signal.signal(getattr(signal, name), h)
        self._old.clear()


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
    lr : float
        Peak learning rate (per mean-loss gradient).
    momentum, weight_decay : float
        SGD momentum and L2 coefficient.
    hidden : tuple of int
        Hidden layer widths; empty for softmax regression.
    seed : int
        Seeds initial weights and every epoch's sample order.
    device : {"auto", "cpu", "gpu"}
    schedule : {"cosine", "step", "constant"}
    warmup_epochs : float
        Linear warm-up length, in epochs.
    lr_step_epochs : int
        Epochs between decays (``schedule="step"``).
    lr_gamma : float
        Decay factor (``schedule="step"``).
    dtype : {"float32", "float64"}
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
        (see :class:`StopRequest`).
    stall_timeout : float or None
        Seconds a collective may wait before the job is aborted with a
        report of the ranks that have not arrived (0: off; ``None``:
        ``$HPCGPU_STALL_TIMEOUT``, else off; see
        :class:`hpcgpu.watchdog.Watchdog`).
    gemm_threads : {"auto", "all"}
        On the CPU with more than one BLAS thread per rank: ``auto`` times
        each GEMM of the step at one thread and at the rank's threads at
        start and keeps the threads only where they pay (a resumed run
        reuses the checkpoint's choice); ``all`` runs every GEMM on the
        rank's threads (see :mod:`hpcgpu.train.threads`).
    """

    data: str | None = None
    out: str = os.path.join("results", "train.h5")
    epochs: int = 20
    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-4
    hidden: tuple = (256, 256)
    seed: int = 0
    device: str = "auto"
    schedule: str = "cosine"
    warmup_epochs: float = 1.0
    lr_step_epochs: int = 10
    lr_gamma: float = 0.1
    dtype: str = "float32"
    progress: str = "auto"
    checkpoint: str | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    stop_file: str | None = None
    stall_timeout: float | None = None
    gemm_threads: str = "auto"

    @property
    def checkpoint_path(self) -> str | None:
        """The checkpoint file, from ``checkpoint`` or ``out``; ``None`` when none is asked for."""
        if self.checkpoint:
            return self.checkpoint
        if self.checkpoint_every or self.resume:
            base = self.out[:-3] if self.out.endswith(".h5") else self.out
            return base + ".ckpt.h5"
        return None

    def validate(self) -> ValueError | None:
        """The first bad option, as an error naming it; ``None`` when all are fine."""
        checks = [
            (self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.lr > 0 and math.isfinite(self.lr), f"--lr must be a positive number, got {self.lr}"),
            (0 <= self.momentum < 1, f"--momentum must be in [0, 1), got {self.momentum}"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}"),
            (all(int(h) >= 1 for h in self.hidden), f"--hidden widths must be >= 1, got {self.hidden}"),
            (self.device in ("auto", "cpu", "gpu"), f"--device must be auto, cpu or gpu, got {self.device!r}"),
            (self.schedule in ("cosine", "step", "constant"), f"--schedule: unknown {self.schedule!r}"),
            (self.warmup_epochs >= 0, f"--warmup-epochs must be >= 0, got {self.warmup_epochs}"),
            (self.lr_step_epochs >= 1, f"--lr-step-epochs must be >= 1, got {self.lr_step_epochs}"),
            (self.dtype in ("float32", "float64"), f"--dtype must be float32 or float64, got {self.dtype!r}"),
            (self.progress in ("auto", "bar", "lines", "none"), f"--progress: unknown {self.progress!r}"),
            (self.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {self.checkpoint_every}"),
            (self.keep_checkpoints >= 1, f"--keep-checkpoints must be >= 1, got {self.keep_checkpoints}"),
            (self.gemm_threads in ("auto", "all"), f"--gemm-threads must be auto or all, got {self.gemm_threads!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                return ValueError(msg)
        try:
            stall_timeout(self.stall_timeout)
        except ValueError as e:
            return e
        return None

    def to_json(self) -> str:
        """Every option as JSON (sorted keys), as written to outputs and checkpoints."""
        d = dataclasses.asdict(self)
        d["hidden"] = list(d["hidden"])
        return json.dumps(d, sort_keys=True)


class Trainer:
    """Data-parallel SGD of an MLP on an HDF5 data set.

    Collective: every rank of the runtime's communicator constructs it with
    the same config and calls :meth:`fit` and :meth:`save` together.

    Parameters
    ----------
    config : TrainConfig
    runtime : Runtime, optional
        Made with ``init(config.device)`` when omitted.

    Raises
    ------
    ValueError, FileNotFoundError, OSError
        Bad options or data, on every rank with the same message (attribute
        ``collective``): see :func:`hpcgpu.train.data.load_split` and
        :meth:`TrainConfig.validate`; the global batch larger than the
        training set or smaller than the number of ranks; ``out`` not
        writable; ``resume`` with checkpoints that are all unreadable or
        were written with other values of the options in
        :data:`hpcgpu.train.checkpoint.MUST_MATCH`.

    Attributes
    ----------
    model : MLP
    history : dict of list
        Per epoch: ``epoch``, ``train_loss``, ``train_accuracy``,
        ``test_loss``, ``test_accuracy``, ``lr``, ``seconds`` (training time
        of the epoch, wall clock, s), ``samples_per_second``.
    epoch, step, step_in_epoch : int
        Finished epochs, global steps done, steps done in the current epoch.
    stopped_by : str or None
        What stopped :meth:`fit` early, after a checkpoint (``"SIGUSR1"``,
        ``"SIGTERM"``, ``"stop file PATH"``); ``None`` when it ran to the end.
    resumed_from : str or None
        The checkpoint file this run continued from.
    gemm_plan : GemmPlan or None
        Which GEMMs of the step run on the rank's BLAS threads (CPU, more
        than one thread per rank, ``gemm_threads="auto"``); ``None``: all
        on the rank's threads.
    """

    METRICS = ("epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy",
               "lr", "seconds", "samples_per_second")
    UNITS = {"seconds": "s", "samples_per_second": "1/s", "lr": "1", "epoch": "1"}

    def __init__(self, config: TrainConfig, runtime: Runtime | None = None):
        self.config = c = config
        err = c.validate()
        if err is not None:
            raise agreed(err)  # the same config on every rank: all raise it
        self.rt = rt = runtime if runtime is not None else init(c.device)
        comm, self.xp = rt.comm, rt.xp

        err = None
        if rt.rank == 0:
            err = writable_error(c.out, "--out")
            if err is None and c.checkpoint_path:
                err = writable_error(c.checkpoint_path, "--checkpoint")
        agree(err, comm=comm)
        self.data_path = self._data_path(c.data, comm)

        train, nc = load_split(self.data_path, "train", comm, dtype=c.dtype, min_rows=rt.size)
        test, _ = load_split(self.data_path, "test", comm, required=False, dtype=c.dtype, min_rows=0)
        err = None
        if test is not None and test.dim != train.dim:
            err = ValueError(f"--data {self.data_path}: /test/X has {test.dim} features, /train/X has {train.dim}")
        elif c.batch_size > train.n_global:
            err = ValueError(f"--batch-size {c.batch_size} is larger than the training set ({train.n_global} samples)")
        elif c.batch_size < rt.size:
            err = ValueError(f"--batch-size {c.batch_size} is smaller than the number of ranks ({rt.size})")
        agree(err, comm=comm)
        self.num_classes = check_labels(self.data_path, [train, test], nc, comm)
        self.train_split, self.test_split = train, test

        self.model = MLP([train.dim, *c.hidden, self.num_classes], self.xp, c.dtype, c.seed)
        # Same seed gives the same weights everywhere; the Bcast makes sure even
        # with different NumPy builds on different nodes.
        Bcast(self.model.params, root=0, comm=comm)
        self.optimizer = SGD(self.model.params, c.momentum, c.weight_decay)
        self.sampler = GlobalBatchSampler(train, c.batch_size, c.seed, comm, self.xp)
        steps = self.sampler.steps
        self.schedule = LRSchedule(
            c.lr, c.epochs * steps, round(c.warmup_epochs * steps), c.schedule,
            c.lr_step_epochs * steps, c.lr_gamma,
        )
        if test is not None:
            self._Xt, self._yt = self.xp.asarray(test.X), self.xp.asarray(test.y)
        # One rank on a GPU: nothing to reduce, and each step's loss sum and correct count stay on
        # the device (a row of _stats) until the epoch ends, a checkpoint or a stop needs them, so no
        # step waits for the GPU. Otherwise the reduced slots are read every step: free on the host,
        # and with several ranks the reduction has synchronized the stream already.
        self._deferred = rt.size == 1 and self.xp is not np
        self._stats = self.xp.zeros((self.sampler.steps, 2), dtype=self.model.dtype) if self._deferred else None
        self.epoch = self.step = self.step_in_epoch = 0
        self._epoch_totals = np.zeros(2)  # loss sum, correct count of the current epoch
        self._epoch_seconds = 0.0
        self.history: dict[str, list] = {k: [] for k in self.METRICS}
        self.stopped_by: str | None = None
        self.resumed_from: str | None = None
        self.stop_request: StopRequest | None = None
        self.gemm_plan: GemmPlan | None = None
        plan = self._resume() if c.resume else None
        self._drained = self.step_in_epoch  # steps of the epoch whose loss is in _epoch_totals
        self._plan_gemm_threads(plan)
        self.watchdog = Watchdog(comm, c.stall_timeout)

    def _plan_gemm_threads(self, stored: tuple | None) -> None:
        """Choose each GEMM's threads: the checkpoint's plan when it fits, else timed. Collective.

        A checkpoint without a plan (a GPU run, ``--gemm-threads all``, one
        thread per rank, or hpcgpu before plans) means every GEMM on the
        rank's threads, and nothing is timed: the resume stays exact where
        the thread count is the same.
        """
        if self.config.gemm_threads == "all" or self.xp is not np:
            return
        mine = _blas.threads() or 1
        root_threads = self.rt.comm.bcast(mine, root=0)
        plan = None
        if stored is not None:
            text, path, world_size = stored
            if not text:  # the run that wrote it ran every GEMM on its threads: so does this one
                return
            try:
                plan = GemmPlan.from_json(text)
            except ValueError:
                plan = None
            # the same bits need the same threads on the same shapes
            if plan is not None and (world_size != self.rt.size or plan.blas_threads != root_threads):
                plan = None
            if plan is not None:
                plan.source = f"checkpoint {path}"
        if plan is None:
            plan = plan_gemm_threads(self.model, self.sampler.local_batch, self.rt.comm)
        self.gemm_plan = plan
        self.model.gemm_threads = plan.counts(mine) if plan is not None else None

    def close(self) -> None:
        """Stop the stall watchdog. Collective."""
        self.watchdog.close()

    @staticmethod
    def _data_path(data: str | None, comm: MPI.Intracomm) -> str:
        if data is not None:
            return data
        from ..datasets import ensure_bundled

        return ensure_bundled("digits", comm)

    # -- the step ---------------------------------------------------------
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
        model, comm = self.model, self.rt.comm
        B, n = self.sampler.B, model.n_params
        t0 = MPI.Wtime()
        with self.watchdog.watch("epoch data Alltoallv", f"epoch {self.epoch + 1}"):
            self.sampler.start_epoch(self.epoch)
        every = self.config.checkpoint_every
        deferred = self._deferred  # see __init__
        self._drained = self.step_in_epoch
        for s in range(self.step_in_epoch, self.sampler.steps):
            model.loss_and_grad(*self.sampler.batch(s))
            stop = self.stop_request is not None and self.stop_request.requested()
            if deferred:
                self._stats[s] = model.grad[n : n + 2]
            else:
                model.grad[n + 2] = 1.0 if stop else 0.0
                with self.watchdog.watch("gradient Allreduce", f"step {self.step + 1}"):
                    Allreduce(model.grad, comm=comm)
                loss_sum, correct, flag = (float(v) for v in _device.asnumpy(model.grad[n:]))
                stop = bool(flag)  # any rank's request: every rank stops after this step
                self._add_step(loss_sum, correct, self.step)
                self._drained = s + 1
            self.optimizer.step(model.param_grad, self.schedule(self.step), scale=1.0 / B)
            self.step += 1
            self.step_in_epoch = s + 1
            if bar is not None:
                bar.update(1)
            if stop:
                self._drain()
                self._epoch_seconds += MPI.Wtime() - t0
                return False
            if every and self.step % every == 0:
                self.save_checkpoint()
        self._drain()
        self._epoch_seconds += MPI.Wtime() - t0
        return True

    def _add_step(self, loss_sum: float, correct: float, step: int) -> None:
        """Add a finished step's reduced loss sum and correct count to the epoch's (0-based ``step``)."""
        if not math.isfinite(loss_sum):
            # the reduced loss is the same on every rank
            raise agreed(FloatingPointError(
                f"training diverged: the loss of step {step + 1} (epoch {self.epoch + 1}) is "
                f"{loss_sum / self.sampler.B}; the last checkpoint is kept; try a smaller --lr"))
        self._epoch_totals += (loss_sum, correct)

    def _drain(self) -> None:
        """Add the steps whose loss is still on the device (one copy to the host), in step order.

        Raises FloatingPointError naming the first step whose loss was not finite.
        """
        lo, hi = self._drained, self.step_in_epoch
        if hi > lo:
            first = self.step - (hi - lo)
            for i, (loss_sum, correct) in enumerate(_device.asnumpy(self._stats[lo:hi]).tolist()):
                self._add_step(loss_sum, correct, first + i)
        self._drained = hi

    def evaluate(self) -> tuple[float, float]:
        """Mean loss and accuracy on the test split (NaN without one, or an empty one). Collective."""
        if self.test_split is None or self.test_split.n_global == 0:
            return math.nan, math.nan
        tot = self.model.evaluate(self._Xt, self._yt)
        with self.watchdog.watch("evaluation Allreduce", f"after epoch {self.epoch + 1}"):
            Allreduce(tot, comm=self.rt.comm)
        loss_sum, correct = (float(v) for v in _device.asnumpy(tot))
        n = self.test_split.n_global
        return loss_sum / n, correct / n

    def _finish_epoch(self, lr: float) -> dict:
        n = self.sampler.steps * self.sampler.B
        test_loss, test_acc = self.evaluate()
        self.epoch += 1
        row = dict(epoch=self.epoch, train_loss=self._epoch_totals[0] / n, train_accuracy=self._epoch_totals[1] / n,
                   test_loss=test_loss, test_accuracy=test_acc, lr=lr, seconds=self._epoch_seconds,
                   samples_per_second=n / self._epoch_seconds if self._epoch_seconds > 0 else math.nan)
        for k in self.METRICS:
            self.history[k].append(row[k])
        self.step_in_epoch, self._epoch_totals[:], self._epoch_seconds = 0, 0.0, 0.0
        return row

    def fit(self) -> dict[str, list]:
        """Train until the configured number of epochs, evaluating after each. Collective.

        SIGUSR1 or SIGTERM (Slurm's warning signal, preemption), or the
        config's stop file, make every rank stop after the same step and
        write a checkpoint; then :attr:`stopped_by` says why. The handlers are those of
        :attr:`stop_request` when set (the command line installs one before
        anything else, so that a signal during start-up is not lost),
        otherwise installed for the duration of ``fit``. With a checkpoint
        path, a checkpoint is also written at the end.

        Returns
        -------
        dict of list
            :attr:`history`.
        """
        c, rt = self.config, self.rt
        bar = self._progress_bar()
        self._log_header()
        own = self.stop_request is None
        if own:
            self.stop_request = StopRequest(c.stop_file, check_file=rt.rank == 0).install()
        # Overflow becomes inf/NaN, which the step detects and reports once with
        # its epoch and step; NumPy's per-operation warnings would only add noise.
        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                while self.epoch < c.epochs:
                    lr = self.schedule(self.epoch * self.sampler.steps)
                    if not self.train_epoch(bar):
                        self.stopped_by = self.stop_request.reason or "a stop request on another rank"
                        break
                    row = self._finish_epoch(lr)
                    if rt.rank == 0:
                        self._log_epoch(row, bar)
        finally:
            if own:
                self.stop_request.uninstall()
            if bar is not None:
                bar.close()
        just_written = c.checkpoint_every and self.step % c.checkpoint_every == 0 and not self.stopped_by
        if c.checkpoint_path and not just_written:
            self.save_checkpoint()
        return self.history

    # -- checkpoints ----------------------------------------------------------
    def _state(self):
        from .checkpoint import CheckpointState

        return CheckpointState(
            params=_device.asnumpy(self.model.params), velocity=_device.asnumpy(self.optimizer.velocity),
            epoch=self.epoch, step=self.step, step_in_epoch=self.step_in_epoch,
            epoch_totals=self._epoch_totals.copy(), epoch_seconds=self._epoch_seconds,
            history={k: list(v) for k, v in self.history.items()},
            config=json.loads(self.config.to_json()), world_size=self.rt.size,
            gemm_threads=self.gemm_plan.to_json() if self.gemm_plan is not None else "")

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
        OSError
            The checkpoint cannot be written (every rank); the older ones are
            untouched.
        FloatingPointError
            The parameters are not finite (every rank); nothing is written.
        """
        from .checkpoint import write_checkpoint

        path = path or self.config.checkpoint_path
        self._drain()  # the steps' losses: a diverged step raises here, and nothing is written
        if not bool(_device.asnumpy(self.xp.isfinite(self.model.params).all())):
            # The same parameters on every rank: all raise, and the last good checkpoint stays.
            raise agreed(FloatingPointError(
                f"training diverged: parameters are not finite after step {self.step} "
                f"(epoch {self.epoch + 1}); not writing a checkpoint; try a smaller --lr"))
        on_root(lambda: write_checkpoint(path, self._state(), self.config.keep_checkpoints,
                                         attrs=dict(hpcgpu_version=__version__, data=os.path.abspath(self.data_path))),
                comm=self.rt.comm, error=lambda e: OSError(f"--checkpoint {path}: cannot write ({e})"))
        return path

    def _newest_checkpoint(self, path: str, notes: list):
        """The newest readable checkpoint's state (``None`` when there is none); rank 0 only.

        Unreadable files are skipped, with a note in ``notes``.

        Raises
        ------
        ValueError
            Every checkpoint is unreadable, or the newest readable one was
            written with options that must not change.
        """
        from .checkpoint import MUST_MATCH, candidates, read_checkpoint

        found = candidates(path)
        for p in found:
            try:
                state = read_checkpoint(p, self.model.n_params)
                break
            except ValueError as e:
                notes.append(str(e))
        else:
            if found:
                raise ValueError(f"--resume: no readable checkpoint: {'; '.join(notes)}")
            return None
        mine = json.loads(self.config.to_json())
        for k in MUST_MATCH:
            if state.config.get(k) != mine[k]:
                raise ValueError(f"--resume: {p} was written with --{k.replace('_', '-')} "
                                 f"{state.config.get(k)}, this run has {mine[k]}")
        self.resumed_from = p
        return state

    def _resume(self) -> tuple | None:
        """Load the newest readable checkpoint on rank 0 and broadcast it. Collective.

        Returns its GEMM thread plan ``(json, path, world_size)``, or None
        when there was no checkpoint.
        """
        path, comm = self.config.checkpoint_path, self.rt.comm
        notes: list[str] = []
        state = on_root(lambda: self._newest_checkpoint(path, notes), comm=comm, catch=(ValueError,))
        meta = None
        if self.rt.rank == 0:
            for note in notes:
                print(f"hpcgpu.train: warning: {note}; falling back to an older checkpoint", file=sys.stderr,
                      flush=True)
            if state is None:
                print(f"hpcgpu.train: no checkpoint at {path}: starting from scratch", flush=True)
            else:
                meta = dict(epoch=state.epoch, step=state.step, step_in_epoch=state.step_in_epoch,
                            epoch_totals=state.epoch_totals.tolist(), epoch_seconds=state.epoch_seconds,
                            history=state.history, path=self.resumed_from, world_size=state.world_size,
                            gemm_threads=state.gemm_threads)
        meta = comm.bcast(meta, root=0)
        if meta is None:
            return None
        if self.rt.rank == 0:
            self.model.params[...] = self.xp.asarray(state.params)
            self.optimizer.velocity[...] = self.xp.asarray(state.velocity)
        Bcast(self.model.params, root=0, comm=comm)
        Bcast(self.optimizer.velocity, root=0, comm=comm)
        self.epoch, self.step, self.step_in_epoch = meta["epoch"], meta["step"], meta["step_in_epoch"]
        self._epoch_totals[:] = meta["epoch_totals"]
        self._epoch_seconds = meta["epoch_seconds"]
        self.history = {k: list(meta["history"].get(k, [])) for k in self.METRICS}
        self.resumed_from = meta["path"]
        if self.rt.rank == 0 and self.config.progress != "none":
            print(f"hpcgpu.train: resumed from {meta['path']} (written by {meta['world_size']} rank(s)): "
                  f"epoch {self.epoch + 1}, step {self.step}", flush=True)
        return meta["gemm_threads"], meta["path"], meta["world_size"]

    # -- output -----------------------------------------------------------
    def save(self, path: str | None = None) -> str:
        """Write metrics, model and provenance to HDF5, atomically, from rank 0.

        Collective (the outcome is agreed, so a failed write raises on every
        rank). Layout: ``/metrics/<name>`` (one value per epoch, attribute
        ``units``), ``/model/<fc{i}.weight|fc{i}.bias>`` (weights are
        ``(in, out)``), root attributes ``config`` (JSON), ``world_size``,
        ``device``, ``mpi_library``, ``hpcgpu_version``, ``data``,
        ``num_classes``, ``epochs_done``, ``steps_done``, ``resumed_from``,
        ``blas_threads`` and ``gemm_threads`` (the :class:`GemmPlan` as
        JSON; empty when every GEMM ran on the rank's threads).

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
        OSError
            The file cannot be written (every rank).
        """
        import h5py

        path = self.config.out if path is None else path
        rt = self.rt

        def write():
            with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
                m = f.create_group("metrics")
                for k in self.METRICS:
                    ds = m.create_dataset(k, data=np.asarray(self.history[k]))
                    ds.attrs["units"] = self.UNITS.get(k, "1")
                g = f.create_group("model")
                for name, view in self.model.named_parameters():
                    g.create_dataset(name, data=_device.asnumpy(view))
                write_attrs(f, dict(config=self.config.to_json(), world_size=rt.size, device=rt.device,
                                    mpi_library=rt.mpi_library, hpcgpu_version=__version__,
                                    data=os.path.abspath(self.data_path), num_classes=self.num_classes,
                                    epochs_done=self.epoch, steps_done=self.step, resumed_from=self.resumed_from,
                                    blas_threads=rt.blas_threads,
                                    gemm_threads=self.gemm_plan.to_json() if self.gemm_plan is not None else ""))

        on_root(write, comm=rt.comm, error=lambda e: OSError(f"--out {path}: cannot write ({e})"))
        return path

    # -- rank 0's voice -----------------------------------------------------
    def _progress_bar(self):
        mode = self.config.progress
        if self.rt.rank != 0 or mode in ("lines", "none"):
            return None
        if mode == "auto" and not sys.stdout.isatty():
            return None
        from tqdm import tqdm

        return tqdm(total=self.config.epochs * self.sampler.steps, unit="step", dynamic_ncols=True,
                    initial=self.step)

    def _log_header(self) -> None:
        if self.rt.rank != 0 or self.config.progress == "none":
            return
        s = self.sampler
        print(
            f"hpcgpu.train: {self.rt.size} rank(s) on {self.rt.summary()}, data {self.data_path}: "
            f"N={s.N} D={self.train_split.dim} C={self.num_classes}, model {self.model.sizes} "
            f"({self.model.n_params} parameters), global batch {s.B} "
            f"(local {s.local_batch} on rank 0), {s.steps} steps/epoch"
            + (f", {self.gemm_plan.summary()}" if self.gemm_plan is not None else ""),
            flush=True,
        )

    def _log_epoch(self, row, bar) -> None:
        if self.config.progress == "none":
            return
        line = (
            f"epoch {row['epoch']:>3}/{self.config.epochs}  train_loss {row['train_loss']:.4f}  "
            f"test_loss {row['test_loss']:.4f}  test_accuracy {row['test_accuracy']:.4f}  "
            f"{row['seconds']:.2f} s  {row['samples_per_second']:.0f} samples/s"
        )
        if bar is not None:
            bar.write(line)
        else:
            print(line, flush=True)
