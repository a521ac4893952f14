"""The data-parallel SGD trainer.

One step (Goyal et al., "Accurate, Large Minibatch SGD", 2017, section 2):
every rank runs forward and backward on its local batch (as K micro-batches
with gradient accumulation), which gives the SUM of its per-sample gradients
in the gradient reducer's flat buffer (:mod:`hpcgpu.train.reducer`); one
``Allreduce(SUM)`` of that buffer (with the loss sum, correct count and stop
request riding in named slots after the gradient) gives the global sum;
dividing by the global batch size gives the mean gradient, and every rank
applies the same SGD update, so the parameters stay identical without ever
being broadcast again.

Each part keeps its own state (``state_dict`` / ``load_state_dict``: the
model, the optimizer, the schedule, the sampler); a checkpoint is written
from them and :meth:`Trainer.broadcast_state` makes every rank agree
(Horovod's ``TorchState.sync``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from .. import _blas, _device
from .._version import __version__
from ..comm import Allreduce, Bcast, agree
from ..errors import AgreedError, agreed
from ..watchdog import Watchdog
from ..grid import ProcessGrid
from ..energy import EnergyMeter
from ..timing import PhaseTimer, reduce_phases, write_trace
from ..io import atomic_path, check_output, on_root, write_attrs
from ..runtime import Runtime, init, placement
from .data import GlobalBatchSampler, check_labels, fingerprint, load_split
from .graphs import StepGraph, graphs_plan
from .model import MLP, local_layout
from .optim import SGD, LRSchedule
from .precision import LossScaler
from .reducer import GradientReducer
from .report import Report
from .config import TrainConfig
from .stop import StopRequest
from .threads import GemmPlan, plan_gemm_threads

__all__ = ["TrainConfig", "Trainer", "StopRequest"]  # TrainConfig is config.py's, StopRequest stop.py's


def _host_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit (Slurm, containers) if lower."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            memory = min(memory, int(text))
    return memory


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
        Bad options or data, on every rank with the same message (an
        :class:`hpcgpu.AgreedError`): see :func:`hpcgpu.train.data.load_split` and
        :meth:`TrainConfig.validate`; the global batch larger than the
        training set or smaller than the number of ranks; ``out`` not
        writable; ``resume`` with checkpoints that are all unreadable or
        were written with other values of the options in
        ``hpcgpu.train.checkpoint.MUST_MATCH``.

    Attributes
    ----------
    model : MLP
    history : dict of list
        Per epoch: ``epoch``, ``train_loss``, ``train_accuracy``,
        ``test_loss``, ``test_accuracy``, ``lr``, ``seconds`` (training time
        of the epoch, wall clock, s), ``samples_per_second``, and per phase
        of :data:`PHASES` ``<phase>_seconds_{min,mean,max}`` over the ranks
        (with ``timing``).
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
    MIXED_METRICS = ("loss_scale", "skipped_steps")  # bf16-mixed and 16-mixed only
    ENERGY_METRICS = ("energy_joules", "energy_joules_cpu", "energy_joules_gpu", "gflop", "joules_per_gflop")
    """Per epoch's training steps, over all nodes (:mod:`hpcgpu.energy`): joules in all (the parts that
    could be read), of the CPU packages and DRAM (RAPL), of the GPUs (NVML); the step's floating-point
    operations counted analytically (GFLOP); joules per GFLOP. NaN where no counter could be read."""
    UNITS = {"seconds": "s", "samples_per_second": "1/s", "lr": "1", "epoch": "1", "energy_joules": "J",
             "energy_joules_cpu": "J", "energy_joules_gpu": "J", "gflop": "GFLOP", "joules_per_gflop": "J/GFLOP"}
    PHASES = ("data", "compute", "comm", "io")
    """The phases of a step (:mod:`hpcgpu.timing`): ``data`` the epoch's row exchange and each batch's
    gather; ``compute`` forward, backward and update; ``comm`` the wait for the gradient reduction (and
    ZeRO's Allgather); ``io`` checkpoints written during the epoch."""

    def __init__(self, config: TrainConfig, runtime: Runtime | None = None):
        self.config = c = config
        err = c.validate()
        if err is not None:
            raise agreed(err)  # the same config on every rank: all raise it
        self.rt = rt = runtime if runtime is not None else init(c.device)
        comm, self.xp = rt.comm, rt.xp

        # Checked now: an output that cannot be written, or that would replace the input, must not cost the run.
        inputs = [(c.data, None)] if c.data else []
        for path, what in ((c.out, "--out"), (c.checkpoint_path, "--checkpoint"), (c.trace, "--trace")):
            if path:
                check_output(path, comm, what, inputs=inputs)
        self.data_path = self._data_path(c.data, comm)
        where = placement(comm)
        self._placement = f" ({where})" if ";" in where else ""  # named in the first line when several hosts

        self.precision, master, compute = c.resolved_precision()
        c.dtype = master.name  # --precision 64-true with --dtype's default: float64 in outputs and checkpoints
        agree(self._compute_dtype_error(compute), comm=comm)
        T = c.tensor_parallel
        agree(self._layout_error(T), comm=comm)
        self._setup_grid(T)
        dcomm, D = self.data_comm, self.data_comm.size
        # A tensor group's ranks see the same samples: the data is split among the D replicas. Their
        # errors are agreed within a data group; a second agreement over every rank makes sure no data
        # group goes on while another has failed (an error may be one rank's: a read that failed).
        err = None
        try:
            train, nc = load_split(self.data_path, "train", dcomm, dtype=master.name, min_rows=D)
            test, _ = load_split(self.data_path, "test", dcomm, required=False, dtype=master.name, min_rows=0)
            err = self._batch_error(train, test, D, T)
            if err is None:
                self.num_classes = check_labels(self.data_path, [train, test], nc, dcomm)
        except AgreedError as e:
            err = e
        agree(err, comm=comm)
        self.train_split, self.test_split = train, test

        sizes = [train.dim, *c.hidden, self.num_classes]
        n_local = local_layout(sizes, T, self.tensor_rank)[1]
        self.watchdog = Watchdog(comm, c.stall_timeout)
        self.reducer = GradientReducer(n_local, self.xp, master, dcomm, watchdog=self.watchdog,
                                       layers=MLP.ranges_of(sizes, T, self.tensor_rank),
                                       bucket_bytes=c.bucket_mb * 1e6, shards=D if c.zero_stage == 1 else 1)
        self.tensor_bytes = 0  # bytes this rank passed to tensor-group Allreduces in training steps
        self._steps_run = 0  # steps this process ran (not those of a checkpoint it resumed from)
        # With ZeRO the parameters live in a buffer padded to D equal blocks, for the Allgather.
        self._params_pad = self.xp.zeros(self.reducer.padded, dtype=master) if c.zero_stage == 1 else None
        self.model = MLP(sizes, self.xp, master, c.seed, grad=self.reducer.grad,
                         stats=self.reducer.view("loss_sum", 2), compute_dtype=compute,
                         tensor=(T, self.tensor_rank), tensor_allreduce=self._tensor_allreduce if T > 1 else None,
                         params=None if self._params_pad is None else self._params_pad[:n_local])
        self.scaler = LossScaler() if self.precision == "16-mixed" else None
        self.metrics = self.METRICS + (self.MIXED_METRICS if compute is not None else ()) + self.ENERGY_METRICS
        self._skipped = 0  # steps of the current epoch skipped for an overflow (16-mixed)
        # Same seed gives the same weights everywhere; the Bcast makes sure even
        # with different NumPy builds on different nodes (a tensor slice: over the replicas).
        Bcast(self.model.params, root=0, comm=dcomm)
        if self._params_pad is None:
            self.optimizer = SGD(self.model.params, c.momentum, c.weight_decay)
        else:  # ZeRO-1: this rank's momentum covers its block only
            lo, hi = self.reducer.shard_range
            self.optimizer = SGD(self._params_pad[lo:hi], c.momentum, c.weight_decay)
        self.sampler = GlobalBatchSampler(train, c.batch_size, c.seed, dcomm, self.xp, c.grad_accum_steps,
                                          replicate=self._replicate(train, comm))
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
        self._deferred = rt.size == 1 and self.xp is not np and self.scaler is None
        self._stats = self.xp.zeros((self.sampler.steps, 2), dtype=self.model.dtype) if self._deferred else None
        # the buckets' Iallreduces are posted from inside the backward pass
        self._overlap = not self._deferred and len(self.reducer.buckets) > 1 and rt.size > 1
        graphs, self._graphs_why = graphs_plan(c, self.xp, compute, self._overlap)
        self._graph = StepGraph(self.model, warn=self._warn) if graphs else None
        self.report = Report(rt.rank, c.progress, c.epochs, steps)
        self.epoch = self.step = self.step_in_epoch = 0
        self._epoch_totals = np.zeros(2)  # loss sum, correct count of the current epoch
        self._epoch_seconds = 0.0
        self.energy = EnergyMeter(comm, _device.pci_bus_id(rt.device_id) if rt.device == "gpu" else None)
        self._energy_reasons = {"cpu": "", "gpu": ""}
        self.timer = PhaseTimer(self.PHASES, cupy=None if self.xp is np else self.xp, trace=bool(c.trace),
                                on=c.timing)
        self._phase_carry = dict.fromkeys(self.PHASES, 0.0)  # the unfinished epoch's phases before a resume
        self.series = self.metrics + (self.timing_keys() if c.timing else ())
        self.history: dict[str, list] = {k: [] for k in self.series}
        self.stopped_by: str | None = None
        self.resumed_from: str | None = None
        self.stop_request: StopRequest | None = None
        self.gemm_plan: GemmPlan | None = None
        self._fingerprint: dict | None = None
        plan = self._resume() if c.resume else None
        self._drained = self.step_in_epoch  # steps of the epoch whose loss is in _epoch_totals
        self._plan_gemm_threads(plan)
        self.tensor_bytes = 0  # the plan's timed steps are not training steps
        self._clock0 = 0.0
        if c.trace:  # time 0 of every rank's track: an instant the ranks shared
            comm.Barrier()
            self._clock0 = time.perf_counter()

    def _warn(self, message: str) -> None:
        """A warning line about this rank alone on its stderr, naming it when there are several."""
        if self.rt.size > 1:
            message = message.replace("warning: ", f"warning: rank {self.rt.rank}: ", 1)
        print(message, file=sys.stderr, flush=True)

    def _layout_error(self, T: int) -> ValueError | None:
        """What is wrong with ``--tensor-parallel T`` at this number of ranks (None: nothing)."""
        c, P = self.config, self.rt.size
        if P % T:
            return ValueError(f"--tensor-parallel {T} does not divide the {P} ranks")
        if T > 1 and not c.hidden:
            return ValueError(f"--tensor-parallel {T} needs hidden layers to split")
        split = [h for i, h in enumerate(c.hidden) if i % 2 == 0]  # the column-parallel layers' (layer_plan)
        if T > 1 and T > min(split):
            return ValueError(f"--tensor-parallel {T} is larger than the smallest hidden width it splits "
                              f"({min(split)})")
        return None

    def _batch_error(self, train, test, D: int, T: int) -> ValueError | None:
        """What is wrong with the data and the batch at D data-parallel ranks (None: nothing)."""
        c = self.config
        ranks = f"number of ranks ({D})" if T == 1 else f"number of data-parallel ranks ({D})"
        if test is not None and test.dim != train.dim:
            return ValueError(f"--data {self.data_path}: /test/X has {test.dim} features, /train/X has {train.dim}")
        if c.batch_size > train.n_global:
            return ValueError(f"--batch-size {c.batch_size} is larger than the training set ({train.n_global} samples)")
        if c.batch_size < D:
            return ValueError(f"--batch-size {c.batch_size} is smaller than the {ranks}")
        if c.batch_size // c.grad_accum_steps < D:
            return ValueError(f"--grad-accum-steps {c.grad_accum_steps}: a micro-batch of "
                              f"{c.batch_size // c.grad_accum_steps} samples is smaller than the {ranks}")
        return None

    def _setup_grid(self, T: int) -> None:
        """The data x tensor grid (collective): tensor groups of T consecutive ranks, data groups across them."""
        comm = self.rt.comm
        self.grid = None
        if T == 1:
            self.data_comm, self.tensor_comm, self.tensor_rank = comm, None, 0
            return
        # Row-major: rank = d * T + t, so under the usual block placement a tensor group shares a node.
        self.grid = ProcessGrid((comm.size // T, T), comm=comm)
        self.tensor_comm, self.data_comm = self.grid.row_comm, self.grid.col_comm
        self.tensor_rank = self.grid.col

    def _tensor_allreduce(self, buf) -> None:
        """Sum ``buf`` over the tensor group (the row-parallel output, the column-parallel input gradient)."""
        Allreduce(buf, comm=self.tensor_comm)
        self.tensor_bytes += buf.nbytes

    def _any(self, flag: bool, comm) -> bool:
        """Whether ``flag`` holds on any rank of ``comm`` (one small Allreduce; none without ``comm``)."""
        if comm is None or comm.size == 1:
            return flag
        return bool(comm.allreduce(bool(flag), op=MPI.LOR))

    def _compute_dtype_error(self, compute) -> ValueError | None:
        """Why this array module cannot hold the 16-bit type of mixed precision (None when it can)."""
        if compute is None:
            return None
        try:
            a = self.xp.zeros(2, dtype=compute)
            (a > 0).astype(np.float32)  # what the mixed step does with it: compare (ReLU masks), widen
        except Exception as e:  # noqa: BLE001 - CuPy < 14 (no bfloat16), NumPy too old for ml_dtypes, ...
            where = "CuPy (>= 14 has bfloat16)" if self.xp is not np else "NumPy"
            return ValueError(f"--precision {self.precision}: {where} cannot compute in {compute.name} here "
                              f"({type(e).__name__}: {e})")
        return None

    def _replicate(self, train, comm) -> bool:
        """Whether every rank holds the whole training set (``data_placement``; ``auto``: when small). Collective."""
        mode = self.config.data_placement
        if mode != "auto":
            return mode == "replicated"
        nbytes = train.n_global * (train.dim * train.X.dtype.itemsize + 8)
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        ranks_here = node.size
        node.Free()
        ok = nbytes <= 2**31 and nbytes * ranks_here <= _host_memory() // 8
        if ok and self.xp is not np:  # the pool is on the GPU too
            try:
                ok = nbytes <= self.xp.cuda.Device().mem_info[0] // 8
            except Exception:  # noqa: BLE001 - unknown free memory: do not bet the run on it
                ok = False
        return bool(comm.allreduce(ok, op=MPI.LAND))  # every rank the same way

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
            plan = plan_gemm_threads(self.model, self.sampler.local_micro_batch, self.rt.comm)
        self.gemm_plan = plan
        self.model.gemm_threads = plan.counts(mine) if plan is not None else None

    def close(self) -> None:
        """Stop the stall watchdog, free the energy meter's node communicator. Collective."""
        self.watchdog.close()
        self.energy.free()

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
        model, red, sampler = self.model, self.reducer, self.sampler
        K, lm = sampler.K, sampler.local_micro_batch
        t0 = MPI.Wtime()
        tm = self.timer
        tm.mark("data", f"epoch {self.epoch + 1} start")
        self.energy.start()
        with self.watchdog.watch("epoch data Alltoallv", f"epoch {self.epoch + 1}"):
            sampler.start_epoch(self.epoch)
        every = self.config.checkpoint_every
        deferred, overlap = self._deferred, self._overlap  # see __init__
        self._drained = self.step_in_epoch
        for s in range(self.step_in_epoch, sampler.steps):
            at = f"step {self.step + 1}"
            tm.mark("data", at)
            X, y = sampler.batch(s)
            tm.mark("compute", at)
            scale = self.scaler.scale if self.scaler is not None else 1.0
            stop = self.stop_request is not None and self.stop_request.requested()
            if not deferred:
                red.set("stop", 1.0 if stop else 0.0)  # before the backward pass posts the bucket that holds it
            hook = red.ready if overlap else None
            if self._graph is not None:  # K == 1, no hook: see graphs_plan
                self._graph.step(X, y, scale)
            elif K == 1:
                model.loss_and_grad(X, y, loss_scale=scale, on_layer=hook)
            else:  # gradient accumulation: one reduction per step, not per micro-batch
                for k in range(K):
                    model.loss_and_grad(X[k * lm : (k + 1) * lm], y[k * lm : (k + 1) * lm], accumulate=k > 0,
                                        loss_scale=scale, on_layer=hook if k == K - 1 else None)
            if deferred:
                self._stats[s] = model.stats
            else:
                tm.mark("comm", at)
                red.finish(f"step {self.step + 1}")
                slots = red.read()
                # any rank's request: every rank stops after this step (a data group's sum, then the tensor group's)
                stop = self._any(bool(slots["stop"]), self.tensor_comm)
                self._add_step(slots["loss_sum"], slots["correct"], self.step)
                self._drained = s + 1
                tm.mark("compute", at)
            self._update(scale)
            self._steps_run += 1
            self.step += 1
            self.step_in_epoch = s + 1
            if bar is not None:
                bar.update(1)
            if stop:
                tm.mark(None)
                self.energy.stop()
                self._drain()
                self._epoch_seconds += MPI.Wtime() - t0
                return False
            if every and self.step % every == 0:
                tm.mark("io", at)
                self.save_checkpoint()
        tm.mark(None)
        self.energy.stop()
        self._drain()
        self._epoch_seconds += MPI.Wtime() - t0
        return True

    def _update(self, scale: float) -> None:
        """The optimizer's step on this rank's parameters (its ZeRO block), and the Allgather of ZeRO."""
        red, B = self.reducer, self.sampler.B
        grad = red.grad if red.shard is None else red.shard
        if self.scaler is None:
            self.optimizer.step(grad, self.schedule(self.step), scale=1.0 / B)
        else:
            overflow = not bool(_device.asnumpy(self.xp.isfinite(grad).all()))
            if self.tensor_comm is not None or red.shard is not None:  # slices differ: agree on the verdict
                overflow = self._any(overflow, self.rt.comm)
            if overflow:
                self._skipped += 1  # no update of weights or momentum
            else:
                self.optimizer.step(grad, self.schedule(self.step), scale=1.0 / (B * scale))
            self.scaler.update(overflow)
            if overflow:
                return
        if red.shard is not None:
            self.timer.mark("comm", f"step {self.step + 1}")
            red.allgather(self._params_pad)

    def _add_step(self, loss_sum: float, correct: float, step: int) -> None:
        """Add a finished step's reduced loss sum and correct count to the epoch's (0-based ``step``)."""
        if not math.isfinite(loss_sum):
            # the reduced loss is the same on every rank
            raise agreed(FloatingPointError(
                f"training diverged: the loss of step {step + 1} (epoch {self.epoch + 1}) is "
                f"{loss_sum / self.sampler.B}; the last checkpoint is kept; start again with a smaller --lr "
                f"(a resume keeps the checkpoint's --lr)"))
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
        counted = self.tensor_bytes
        tot = self.model.evaluate(self._Xt, self._yt)
        self.tensor_bytes = counted  # training steps' bytes only
        with self.watchdog.watch("evaluation Allreduce", f"after epoch {self.epoch + 1}"):
            Allreduce(tot, comm=self.data_comm)  # a tensor group's ranks hold the same totals
        loss_sum, correct = (float(v) for v in _device.asnumpy(tot))
        n = self.test_split.n_global
        return loss_sum / n, correct / n

    def _finish_epoch(self, lr: float) -> dict:
        n = self.sampler.steps * self.sampler.B
        test_loss, test_acc = self.evaluate()
        self.epoch += 1
        row = dict(epoch=self.epoch, train_loss=self._epoch_totals[0] / n, train_accuracy=self._epoch_totals[1] / n,
                   test_loss=test_loss, test_accuracy=test_acc, lr=lr, seconds=self._epoch_seconds,
                   samples_per_second=n / self._epoch_seconds if self._epoch_seconds > 0 else math.nan,
                   loss_scale=self.scaler.scale if self.scaler is not None else 1.0, skipped_steps=self._skipped)
        j = self.energy.total()  # collective: the nodes' joules of this epoch's steps
        gflop = self.flops_per_sample() * n / 1e9
        row.update(energy_joules=j.total, energy_joules_cpu=j.cpu, energy_joules_gpu=j.gpu, gflop=gflop,
                   joules_per_gflop=j.total / gflop)
        self._energy_reasons = {"cpu": j.cpu_reason, "gpu": j.gpu_reason}
        if self.config.timing:
            seconds = self._phase_partial()
            self._phase_carry = dict.fromkeys(self.PHASES, 0.0)
            for phase, stats in reduce_phases(seconds, self.rt.comm).items():
                row.update({f"{phase}_seconds_{n}": v for n, v in zip(("min", "mean", "max"), stats, strict=True)})
        for k in self.series:
            self.history[k].append(row[k])
        self.step_in_epoch, self._epoch_totals[:], self._epoch_seconds, self._skipped = 0, 0.0, 0.0, 0
        return row

    def flops_per_sample(self) -> float:
        """Floating-point operations of one sample's forward and backward pass (analytic).

        A layer of ``a`` inputs and ``b`` outputs costs ``2ab`` forward,
        ``2ab`` for its weight gradient and, past the first layer, ``2ab``
        for its input gradient: ``6 sum(ab) - 2 a_0 b_0`` in all (bias,
        activation and loss terms left out: O(sum b)).

        Returns
        -------
        float
        """
        pairs = list(itertools.pairwise(self.model.sizes))
        return float(6 * sum(a * b for a, b in pairs) - 2 * pairs[0][0] * pairs[0][1])

    @classmethod
    def timing_keys(cls) -> tuple:
        """The history's timing series: ``<phase>_seconds_{min,mean,max}`` for each of :data:`PHASES`.

        Returns
        -------
        tuple of str
        """
        return tuple(f"{p}_seconds_{n}" for p in cls.PHASES for n in ("min", "mean", "max"))

    def _phase_partial(self) -> dict:
        """This rank's seconds per phase of the unfinished epoch (those before a resume included)."""
        got = self.timer.collect()
        self._phase_carry = {k: self._phase_carry[k] + got[k] for k in self.PHASES}
        return dict(self._phase_carry)

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
        report = self.report
        report.say(self._header())
        bar = report.open_bar(self.step)
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
                    report.epoch(self._finish_epoch(lr))
        finally:
            if own:
                self.stop_request.uninstall()
            report.close_bar()
        just_written = c.checkpoint_every and self.step % c.checkpoint_every == 0 and not self.stopped_by
        unchanged = self.resumed_from is not None and self._steps_run == 0  # what it resumed from is the state
        if c.checkpoint_path and not just_written and not unchanged:
            self.save_checkpoint()
        return self.history

    # -- checkpoints ----------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything a run needs to continue exactly, as host values. Not collective.

        Returns
        -------
        dict
            ``model``, ``optimizer``, ``schedule``, ``sampler`` (each part's
            own ``state_dict()``), ``progress`` (``epoch``, ``step``,
            ``step_in_epoch``, ``epoch_totals`` (loss sum, correct count of
            the unfinished epoch), ``epoch_seconds``, ``history``) and
            ``gemm_threads`` (the :class:`GemmPlan` as JSON, or "").
        """
        return dict(
            model=self.model.state_dict(), optimizer=self.optimizer.state_dict(),
            schedule=self.schedule.state_dict(), sampler=self.sampler.state_dict(),
            progress=dict(epoch=self.epoch, step=self.step, step_in_epoch=self.step_in_epoch,
                          epoch_totals=self._epoch_totals.tolist(), epoch_seconds=self._epoch_seconds,
                          skipped_steps=self._skipped, history={k: list(v) for k, v in self.history.items()},
                          phase_seconds=self._phase_partial()),
            scaler=self.scaler.state_dict() if self.scaler is not None else None,
            gemm_threads=self.gemm_plan.to_json() if self.gemm_plan is not None else "")

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
            sample order).
        """
        if "model" in state:
            self.model.load_state_dict(state["model"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        if "schedule" in state:
            self.schedule.load_state_dict(state["schedule"])
        if "sampler" in state:
            self.sampler.load_state_dict(state["sampler"])
        if state.get("scaler") is not None and self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])
        if "progress" in state:
            p = state["progress"]
            self.epoch, self.step, self.step_in_epoch = int(p["epoch"]), int(p["step"]), int(p["step_in_epoch"])
            self._epoch_totals[:] = p["epoch_totals"]
            self._epoch_seconds = float(p["epoch_seconds"])
            self._skipped = int(p.get("skipped_steps", 0))
            self.history = {k: list(p["history"].get(k, [])) for k in self.series}
            n = len(self.history["epoch"])
            for k in self.series:  # a checkpoint of a run without timing: NaN for its epochs
                self.history[k] = self.history[k] or [math.nan] * n
            self._phase_carry = {k: float(p.get("phase_seconds", {}).get(k, 0.0)) for k in self.PHASES}
            self._drained = self.step_in_epoch

    def broadcast_state(self, root: int = 0) -> None:
        """Make every rank's state rank ``root``'s. Collective.

        The parameters and the momentum go by ``Bcast`` (device to device
        where MPI can), the rest as one pickled object (Horovod's
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
        comm = self.rt.comm
        small = None
        if self.rt.rank == root:
            small = {k: v for k, v in self.state_dict().items() if k not in ("model", "optimizer")}
        if self.tensor_comm is None and self.reducer.shard is None:
            Bcast(self.model.params, root=root, comm=comm)
            Bcast(self.optimizer.velocity, root=root, comm=comm)
        else:
            if root != 0:
                raise agreed(ValueError("broadcast_state: the root must be rank 0 with tensor parallelism or ZeRO"))
            params, velocity = self.gather_global()
            self._bcast_global(params, velocity)
        small = comm.bcast(small, root=root)
        if self.rt.rank != root:
            self.load_state_dict(small)

    def _bcast_global(self, params, velocity) -> None:
        """Rank 0's unsplit ``params`` and ``velocity`` to every rank, each taking its slice. Collective."""
        n, dt = self.model.n_global, self.model.dtype
        bufs = [np.asarray(params, dt) if self.rt.rank == 0 else np.empty(n, dt),
                np.asarray(velocity, dt) if self.rt.rank == 0 else np.empty(n, dt)]
        for b in bufs:
            Bcast(b, root=0, comm=self.rt.comm)
        self.load_global(*bufs)

    def gather_global(self) -> tuple:
        """The unsplit model's parameters and momentum, on rank 0. Collective.

        With tensor parallelism each rank holds slices and with ZeRO a block
        of the momentum: the blocks come together over the data group, the
        slices over the tensor group of replica 0, in the global layout
        (:attr:`MLP.params` of the unsplit model).

        Returns
        -------
        (numpy.ndarray, numpy.ndarray) or (None, None)
            ``params`` and ``velocity``, shape (n_global,), on rank 0; None
            elsewhere.
        """
        params = _device.asnumpy(self.model.params)
        velocity = _device.asnumpy(self.optimizer.velocity)
        n = self.model.n_params
        if self.reducer.shard is not None:  # ZeRO: the momentum's blocks, over the data group
            blocks = self.data_comm.gather(velocity, root=0)
            velocity = np.concatenate(blocks)[:n] if blocks is not None else None
        if self.tensor_comm is None:
            return (params, velocity) if self.rt.rank == 0 else (None, None)
        if self.grid.row != 0:  # replicas hold the same slices: replica 0's are gathered
            return None, None
        pieces = self.tensor_comm.gather((params, velocity), root=0)
        if pieces is None:
            return None, None
        return self.model.global_of([p for p, _ in pieces]), self.model.global_of([v for _, v in pieces])

    def load_global(self, params, velocity) -> None:
        """Take this rank's slice (and ZeRO block) of the unsplit ``params`` and ``velocity``. Not collective.

        Parameters
        ----------
        params, velocity : numpy.ndarray, shape (n_global,)
            In the layout of :meth:`gather_global`.
        """
        self.model.load_state_dict({"params": self.model.local_of(np.asarray(params))})
        v = self.model.local_of(np.asarray(velocity))
        if self.reducer.shard is not None:
            lo, hi = self.reducer.shard_range
            v = np.concatenate([v, np.zeros(self.reducer.padded - v.size, v.dtype)])[lo:hi]
        self.optimizer.load_state_dict({"velocity": v})

    def _checkpoint_state(self, params, velocity):
        from .checkpoint import CheckpointState

        st = self.state_dict()
        p = st["progress"]
        return CheckpointState(
            params=params, optimizer={"velocity": velocity}, optimizer_name="sgd", data=self.data_fingerprint(),
            epoch=p["epoch"], step=p["step"], step_in_epoch=p["step_in_epoch"],
            epoch_totals=np.asarray(p["epoch_totals"]), epoch_seconds=p["epoch_seconds"], history=p["history"],
            config=json.loads(self.config.to_json()), world_size=self.rt.size, gemm_threads=st["gemm_threads"],
            skipped_steps=p["skipped_steps"], loss_scale=(st["scaler"] or {}).get("scale", 1.0),
            clean_steps=(st["scaler"] or {}).get("clean_steps", 0), phase_seconds=p["phase_seconds"])

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
        finite = bool(_device.asnumpy(self.xp.isfinite(self.model.params).all()))
        if not self.rt.comm.allreduce(finite, op=MPI.LAND):  # tensor slices differ: every rank must know
            # The same parameters on every rank: all raise, and the last good checkpoint stays.
            raise agreed(FloatingPointError(
                f"training diverged: parameters are not finite after step {self.step} "
                f"(epoch {self.epoch + 1}); not writing a checkpoint; start again with a smaller --lr "
                "(a resume keeps the checkpoint's --lr)"))
        self.data_fingerprint()  # collective, once
        full = self.gather_global()  # collective: the unsplit parameters and momentum on rank 0
        on_root(lambda: write_checkpoint(path, self._checkpoint_state(*full), self.config.keep_checkpoints,
                                         attrs=dict(hpcgpu_version=__version__, data=os.path.abspath(self.data_path))),
                comm=self.rt.comm, error=lambda e: OSError(f"--checkpoint {path}: cannot write ({e})"))
        return path

    def data_fingerprint(self) -> dict:
        """The training (and test) data's fingerprints (:func:`hpcgpu.train.data.fingerprint`). Collective.

        Computed on the first call (one pass over each rank's shard), then
        kept; written into checkpoints and checked on resume.

        Returns
        -------
        dict
            ``{"train": {...}, "test": {...}}`` (``test`` absent without a test split).
        """
        if self._fingerprint is None:
            fp = {"train": fingerprint(self.train_split, self.data_comm)}
            if self.test_split is not None:
                fp["test"] = fingerprint(self.test_split, self.data_comm)
            self._fingerprint = fp
        return self._fingerprint

    def _data_changed(self, path: str, theirs: dict) -> ValueError | None:
        """How the checkpoint's data fingerprint ``theirs`` differs from this run's data (None: it does not)."""
        mine = self.data_fingerprint()
        for split in ("train", "test"):
            a, b = theirs.get(split), mine.get(split)
            if a is None or a == b:
                continue
            where = f"--resume: {path} was trained on"
            if b is None:
                return ValueError(f"{where} data with a /test split, --data {self.data_path} has none")
            for key, what in (("dim", "features"), ("n", f"/{split} samples")):
                if a.get(key) != b.get(key):
                    return ValueError(f"{where} data with {a.get(key)} {what}, --data {self.data_path} has "
                                      f"{b.get(key)}: resume with the data it was trained on, or start afresh")
            return ValueError(f"{where} other data (/{split} fingerprint {a.get('digest')}, --data "
                              f"{self.data_path} has {b.get('digest')}: the same shape, other values): resume with "
                              "the data it was trained on, or start afresh without --resume")
        return None

    def _newest_checkpoint(self, path: str, notes: list):
        """The newest readable checkpoint's state (``None`` when there is none); rank 0 only.

        A file that is damaged (truncated, not HDF5, failing a checksum) is
        skipped, with a note in ``notes``; one written for other options or
        other data is an error, not skipped: an older one would be the same.

        Raises
        ------
        ValueError
            Every checkpoint is unreadable, or the newest readable one was
            written with options that must not change, or for other data.
        """
        from .checkpoint import MUST_MATCH, candidates, read_checkpoint, read_header

        found = candidates(path)
        mine = json.loads(self.config.to_json())

        def changed(p: str, config: dict) -> ValueError | None:
            """The first option that must not change and did, as the error to raise."""
            theirs = TrainConfig(**{k: v for k, v in config.items() if k in mine})
            if theirs.resolved_precision()[0] != self.precision:
                return ValueError(f"--resume: {p} was written with --precision {theirs.resolved_precision()[0]}, "
                                  f"this run has {self.precision}")
            for k in MUST_MATCH:
                if config.get(k) != mine[k]:
                    return ValueError(f"--resume: {p} was written with --{k.replace('_', '-')} {config.get(k)}, "
                                      f"this run has {mine[k]}")
            return None

        for p in found:
            header = read_header(p)
            if header is not None:  # what it was written for, before its size is compared with the model's
                why = changed(p, header["config"]) or self._data_changed(p, header["data"])
                if why:
                    raise why
            try:
                state = read_checkpoint(p, self.model.n_global)
                break
            except ValueError as e:
                notes.append(str(e))
        else:
            if found:
                raise ValueError(f"--resume: no readable checkpoint: {'; '.join(notes)}")
            return None
        self.resumed_from = p
        return state

    def _resume(self) -> tuple | None:
        """Load the newest readable checkpoint on rank 0 and broadcast it. Collective.

        Returns its GEMM thread plan ``(json, path, world_size)``, or None
        when there was no checkpoint.
        """
        path, comm = self.config.checkpoint_path, self.rt.comm
        notes: list[str] = []
        self.data_fingerprint()  # collective: rank 0 compares it with the checkpoint's
        state = on_root(lambda: self._newest_checkpoint(path, notes), comm=comm, catch=(ValueError,))
        meta, err = None, None
        if self.rt.rank == 0:
            for note in notes:
                print(f"hpcgpu.train: warning: {note}; falling back to an older checkpoint", file=sys.stderr,
                      flush=True)
            if state is not None and not state.verified:
                print(f"hpcgpu.train: warning: checkpoint {self.resumed_from} has no checksums (an older hpcgpu "
                      "wrote it): resumed without verifying it", file=sys.stderr, flush=True)
            if state is None:
                print(f"hpcgpu.train: no checkpoint at {path}: starting from scratch", flush=True)
            else:
                meta = dict(path=self.resumed_from, world_size=state.world_size, gemm_threads=state.gemm_threads)
                try:  # a readable file with a malformed field must not leave the other ranks waiting below
                    self.load_state_dict(dict(
                        progress=dict(epoch=state.epoch, step=state.step, step_in_epoch=state.step_in_epoch,
                                      epoch_totals=state.epoch_totals.tolist(), epoch_seconds=state.epoch_seconds,
                                      skipped_steps=state.skipped_steps, history=state.history,
                                      phase_seconds=state.phase_seconds),
                        scaler=dict(scale=state.loss_scale, clean_steps=state.clean_steps)))
                except (ValueError, TypeError, KeyError) as e:
                    err = ValueError(f"--resume: {self.resumed_from}: {e}")
        agree(err, comm=comm)
        meta = comm.bcast(meta, root=0)
        if meta is None:
            return None
        self._bcast_global(state.params if self.rt.rank == 0 else None,
                           state.optimizer["velocity"] if self.rt.rank == 0 else None)
        small = {k: v for k, v in self.state_dict().items() if k not in ("model", "optimizer")}
        small = comm.bcast(small if self.rt.rank == 0 else None, root=0)
        if self.rt.rank != 0:
            self.load_state_dict(small)
        self.resumed_from = meta["path"]
        if self.rt.rank == 0 and self.config.progress != "none":
            where = (f"epoch {self.epoch + 1}, step {self.step}" if self.epoch < self.config.epochs else
                     f"the run is complete ({self.epoch} epochs, {self.step} steps): nothing to train")
            print(f"hpcgpu.train: resumed from {meta['path']} (written by {meta['world_size']} rank(s)): {where}",
                  flush=True)
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
        params, _ = self.gather_global()  # collective: the unsplit model on rank 0
        comm_stats = self.comm_stats()

        def write():
            with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
                m = f.create_group("metrics")
                for k in self.metrics:
                    ds = m.create_dataset(k, data=np.asarray(self.history[k]))
                    ds.attrs["units"] = self.UNITS.get(k, "1")
                    part = {"energy_joules_cpu": "cpu", "energy_joules_gpu": "gpu"}.get(k)
                    if part:
                        ds.attrs["source"] = ("RAPL package and DRAM counters, one reader per node" if part == "cpu"
                                              else "NVML total-energy counters of the GPUs in use, one reader per node")
                        ds.attrs["why_nan"] = self._energy_reasons[part]
                    if k == "energy_joules":
                        ds.attrs["counted"] = "+".join(p for p in ("cpu", "gpu") if not self._energy_reasons[p]) \
                            or "nothing: no counter could be read"
                if self.config.timing:
                    self._write_timing(f.create_group("timing"))
                g = f.create_group("model")
                for lay, (i, (a, b)) in zip(self.model.plan, enumerate(itertools.pairwise(self.model.sizes)),
                                            strict=True):
                    g.create_dataset(f"fc{i}.weight", data=params[lay["start"] : lay["start"] + a * b].reshape(a, b))
                    g.create_dataset(f"fc{i}.bias", data=params[lay["start"] + a * b : lay["start"] + a * b + b])
                write_attrs(f.create_group("comm"), comm_stats)
                write_attrs(f, dict(config=self.config.to_json(), world_size=rt.size, device=rt.device,
                                    mpi_library=rt.mpi_library, hpcgpu_version=__version__,
                                    data=os.path.abspath(self.data_path), num_classes=self.num_classes,
                                    epochs_done=self.epoch, steps_done=self.step, resumed_from=self.resumed_from,
                                    blas_threads=rt.blas_threads,
                                    gemm_threads=self.gemm_plan.to_json() if self.gemm_plan is not None else ""))

        on_root(write, comm=rt.comm, error=lambda e: OSError(f"--out {path}: cannot write ({e})"))
        return path

    def _write_timing(self, g) -> None:
        """``/timing/<phase>``: epochs x (min, mean, max) seconds over the ranks."""
        write_attrs(g, {"description": "seconds per phase of each epoch's training steps, over the ranks "
                                       "(columns min, mean, max); on a GPU from CUDA events on the stream",
                        "phases": ",".join(self.PHASES), "clock": "cuda events" if self.xp is not np else "host"})
        for p in self.PHASES:
            rows = [self.history[f"{p}_seconds_{n}"] for n in ("min", "mean", "max")]
            ds = g.create_dataset(p, data=np.asarray(rows, dtype=np.float64).T.reshape(-1, 3))
            ds.attrs["units"], ds.attrs["columns"] = "s", ["min", "mean", "max"]

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
        path = path or self.config.trace
        if not path or not self.config.timing:
            return None
        self._phase_partial()  # read the device's events (GPU) into the trace
        write_trace(path, self.timer.events, self.rt.comm, self._clock0)
        return path

    def comm_stats(self) -> dict:
        """This rank's communication per training step, and its optimizer state. Not collective.

        Returns
        -------
        dict
            ``data_parallel`` (D), ``tensor_parallel`` (T), ``zero_stage``;
            ``tensor_bytes_per_step`` and ``data_bytes_per_step``: the bytes
            this rank passed to tensor-group and data-group collectives, per
            step of this run (message sizes: evaluation excluded);
            ``optimizer_state_bytes``: the momentum this rank holds.
        """
        steps = max(1, self._steps_run)
        return dict(data_parallel=self.data_comm.size, tensor_parallel=self.config.tensor_parallel,
                    zero_stage=self.config.zero_stage, tensor_bytes_per_step=self.tensor_bytes / steps,
                    data_bytes_per_step=self.reducer.bytes_sent / steps,
                    optimizer_state_bytes=int(self.optimizer.velocity.nbytes))

    # -- rank 0's voice -----------------------------------------------------
    def _header(self) -> str:
        s = self.sampler
        accum = f", {s.K} micro-batches of {s.B // s.K}" if s.K > 1 else ""
        return (
            f"hpcgpu.train: {self.rt.size} rank(s){self._placement} on {self.rt.summary()}, data {self.data_path}: "
            f"N={s.N} D={self.train_split.dim} C={self.num_classes}, model {self.model.sizes} "
            f"({self.model.n_global} parameters"
            + (f", {self.model.n_params} on rank 0" if self.model.n_params != self.model.n_global else "")
            + f"), global batch {s.B} "
            f"(local {s.local_batch} on rank 0{accum}), {s.steps} steps/epoch, precision {self.precision}, "
            + ("CUDA graphs on, " if self._graph is not None
               else f"CUDA graphs off ({self._graphs_why}), " if self._graphs_why else "")
            + f"data {'replicated' if s.replicated else 'sharded'}"
            + (f", {self.data_comm.size} data x {self.config.tensor_parallel} tensor parallel"
               if self.config.tensor_parallel > 1 else "")
            + (", ZeRO-1 (momentum sharded)" if self.config.zero_stage == 1 else "")
            + (f", {self.gemm_plan.summary()}" if self.gemm_plan is not None else "")
        )
