"""A trainer's state as one part: what a checkpoint, a resume, a broadcast and ``load_weights`` read and write.

:class:`TrainState` keeps no state of its own. Each part of the trainer keeps its own (``state_dict`` and
``load_state_dict``: the model, the optimizer's state, the schedule, the sampler, the precision policy, the epoch
metrics, the run's place); this is the one routine that collects them (:meth:`TrainState.state_dict`), restores
them (:meth:`TrainState.load_state_dict`), makes every rank take one rank's (:meth:`TrainState.sync`, Horovod's
``TorchState.sync``: for a broadcast and for a resume alike), and the one place a checkpoint is written
(:meth:`TrainState.save_checkpoint`, format :data:`hpcgpu.train.checkpoint.FORMAT`) and found
(:meth:`TrainState.resume`). With tensor parallelism or ZeRO the ranks hold slices: the unsplit arrays are
gathered on rank 0 (:meth:`TrainState.gather_global`) and each rank takes its slice (:meth:`TrainState.load_global`).
"""

from __future__ import annotations

import json
import os

import numpy as np
from mpi4py import MPI

from .. import _device
from .._outputs import Output
from .._version import __version__
from ..comm import Bcast
from ..errors import agree, agreed
from ..io import WRITE_ERRORS, on_root, one_line, read_weights
from .checkpoint import PARTS, CheckpointState, Resumer, write_checkpoint
from .data import fingerprint

__all__ = ["TrainState"]


class TrainState:
    """The trainer's parts' state, collected, restored, synchronized and checkpointed.

    Parameters
    ----------
    trainer : hpcgpu.Trainer
        The holder of the parts (bound: its model, optimizer and data set).
    """

    def __init__(self, trainer):
        self.t = trainer
        self._fingerprint: dict | None = None

    def state_dict(self) -> dict:
        """:meth:`hpcgpu.Trainer.state_dict`: every part's state, as host values. Not collective.

        Returns
        -------
        dict
        """
        t = self.t
        return dict(
            model=t.model.state_dict(), optimizer={k: _device.asnumpy(v).copy() for k, v in t.opt_state.items()},
            schedule=t.schedule.state_dict(), sampler=t.sampler.state_dict(),
            precision=t.precision.state_dict(),
            progress=dict(epoch=t.epoch, step=t.step, step_in_epoch=t.step_in_epoch,
                          updates=t._step_fn.updates, phase_seconds=dict(t._phase_carry),
                          **t.metrics.state_dict()),
            gemm_threads=t.gemm_plan.to_json() if t.gemm_plan is not None else "",
            buffers={k: _device.asnumpy(v).copy() for k, v in t.model.buffers().items()})

    def load_state_dict(self, state: dict) -> None:
        """:meth:`hpcgpu.Trainer.load_state_dict`: the parts of ``state`` it has. Not collective.

        Parameters
        ----------
        state : dict
            Some or all of :meth:`state_dict`'s keys.

        Raises
        ------
        ValueError
            A part does not fit this run.
        """
        t = self.t
        if "model" in state:
            t.model.load_state_dict(state["model"])
        if state.get("buffers"):
            self.load_buffers(state["buffers"])
        if "optimizer" in state:
            self.load_opt_state(state["optimizer"])
        if "schedule" in state:
            t.schedule.load_state_dict(state["schedule"])
        if "sampler" in state:
            t.sampler.load_state_dict(state["sampler"])
        if state.get("precision"):
            t.precision.load_state_dict(state["precision"])
        if "progress" in state:
            p = state["progress"]
            t.epoch, t.step, t.step_in_epoch = int(p["epoch"]), int(p["step"]), int(p["step_in_epoch"])
            t._step_fn.updates = int(p.get("updates", t.step))
            t.metrics.load_state_dict(p)
            t._phase_carry = {k: float(p.get("phase_seconds", {}).get(k, 0.0)) for k in t.PHASES}
            t._drained = t.step_in_epoch

    def load_buffers(self, arrays: dict) -> None:
        """Copy the model's buffers in place. Not collective.

        Parameters
        ----------
        arrays : dict of str to array_like
            The model's buffers by name, each of its buffer's shape.

        Raises
        ------
        ValueError
            Other names or shapes than the model's.
        """
        t = self.t
        mine = t.model.buffers()
        if set(arrays) != set(mine):
            raise ValueError(f"buffers {sorted(arrays)} for the model's {sorted(mine)}")
        for k, v in arrays.items():
            v = np.asarray(v)
            if v.shape != mine[k].shape:
                raise ValueError(f"buffer {k} of shape {v.shape} for the model's {mine[k].shape}")
            # through the buffer's own array module: a module's buffers may still be on the host before its first
            # step on a GPU (nn.Torch moves them at its first call)
            v = v.astype(mine[k].dtype, copy=False)
            mine[k][...] = v if isinstance(mine[k], np.ndarray) else t.xp.asarray(v)

    def load_opt_state(self, arrays: dict) -> None:
        """Copy this rank's optimizer state arrays in place. Not collective.

        Parameters
        ----------
        arrays : dict of str to array_like
            The optimizer's state by name, each of this rank's shape (its ZeRO block with ZeRO-1).

        Raises
        ------
        ValueError
            Other names or shapes than this optimizer's.
        """
        t = self.t
        if set(arrays) != set(t.opt_state):
            raise ValueError(f"optimizer state {sorted(arrays)} for {t.optimizer.name}'s {sorted(t.opt_state)}")
        for k, v in arrays.items():
            v = np.asarray(v)
            if v.shape != t.opt_state[k].shape:
                raise ValueError(f"{k} of shape {v.shape} for parameters of shape {t.opt_state[k].shape}")
            t.opt_state[k][...] = t.xp.asarray(v.astype(t.opt_state[k].dtype, copy=False))

    def sync(self, root: int = 0, full: tuple | None = None) -> None:
        """Every rank takes rank ``root``'s state: the one routine for a broadcast and for a resume. Collective.

        The parameters and optimizer state first: ``full``, the unsplit arrays on ``root`` (a checkpoint's;
        None elsewhere), or else ``root``'s own, by ``Bcast`` where every rank holds the whole model and by
        gathering and splitting where ranks hold slices (``root`` 0 then). Then the rest of
        :meth:`state_dict` as one pickled object.

        Parameters
        ----------
        root : int
            The rank whose state every rank takes.
        full : (numpy.ndarray, dict) or None
            The unsplit parameters and optimizer state on ``root`` ((None, None) elsewhere), or None.
        """
        t = self.t
        comm = t.rt.comm
        small = None
        if t.rt.rank == root:
            small = {k: v for k, v in self.state_dict().items() if k not in ("model", "optimizer")}
        if full is None and t.groups.tensor_comm is None and t.reducer.shard is None:
            Bcast(t.model.params, root=root, comm=comm)
            for k in sorted(t.opt_state):
                Bcast(t.opt_state[k], root=root, comm=comm)
        else:
            self.load_global(*self._bcast(*(full if full is not None else self.gather_global())))
        small = comm.bcast(small, root=root)
        if t.rt.rank != root:
            self.load_state_dict(small)

    def _bcast(self, params, states) -> tuple:
        """The unsplit arrays from rank 0, each rank's slice taken (:meth:`ProcessGroups.bcast_global`)."""
        t = self.t
        return t.groups.bcast_global(params, states, sorted(t.opt_state), t.model.dtype, t.model.n_global)

    def gather_global(self) -> tuple:
        """:meth:`hpcgpu.Trainer.gather_global`: the unsplit arrays on rank 0. Collective.

        Returns
        -------
        (numpy.ndarray, dict) or (None, None)
        """
        t = self.t
        return t.groups.gather_global(t.model, t.model.params, t.opt_state, t.reducer.shard is not None)

    def load_weights(self, path, what: str) -> None:
        """:meth:`hpcgpu.Trainer.load_weights`, its messages naming the file as ``what`` does. Collective.

        Parameters
        ----------
        path : str
            A results file (its ``/model`` group).
        what : str
            How messages name the file (``"load_weights"``, a command line's option).

        Raises
        ------
        FileNotFoundError, ValueError
            As :meth:`hpcgpu.Trainer.load_weights` (every rank).
        """
        t = self.t
        m = t.model

        def read():
            flat = np.zeros(m.n_global, dtype=np.dtype(m.dtype))
            buffers = {k: np.zeros_like(_device.asnumpy(v)) for k, v in m.buffers().items()}
            read_weights(os.fspath(path), m.global_views(flat), what, buffers=buffers)
            return flat, buffers

        flat, buffers = on_root(read, comm=t.rt.comm, catch=(ValueError, OSError), bcast=True)
        m.load_state_dict({"params": m.local_of(flat)})
        if buffers:
            self.load_buffers(buffers)

    def load_global(self, params, states: dict) -> None:
        """:meth:`hpcgpu.Trainer.load_global`: this rank's slice of the unsplit arrays. Not collective.

        Parameters
        ----------
        params : numpy.ndarray, shape (n_global,)
        states : dict of str to numpy.ndarray
        """
        t = self.t
        t.model.load_state_dict({"params": t.model.local_of(np.asarray(params))})
        mine = {}
        for k, v in states.items():
            v = t.model.local_of(np.asarray(v))
            if t.reducer.shard is not None:
                lo, hi = t.reducer.shard_range
                v = np.concatenate([v, np.zeros(t.reducer.padded - v.size, v.dtype)])[lo:hi]
            mine[k] = v
        self.load_opt_state(mine)

    def fingerprint(self) -> dict:
        """:meth:`hpcgpu.Trainer.data_fingerprint`, computed once. Collective.

        Returns
        -------
        dict
        """
        t = self.t
        if self._fingerprint is None:
            fp = {"train": fingerprint(t.train_split, t.groups.data_comm)}
            if t._held_out.split is not None:
                fp["test"] = fingerprint(t._held_out.split, t.groups.data_comm)
            self._fingerprint = fp
        return self._fingerprint

    def data_name(self) -> str:
        """How results and checkpoints name the data: the file's absolute path, or "(arrays in memory)"."""
        t = self.t
        return os.path.abspath(t.data_path) if t.data_path and not t.data_path.startswith("(") \
            else (t.data_path or "")

    def _checkpoint_state(self, params, states):
        t = self.t
        mine = self.state_dict()
        parts = {k: mine[k] for k in PARTS}
        if getattr(t.schedule, "stateful", False):  # a PyTorch scheduler's state: not a function of the options
            parts["schedule"] = mine["schedule"]
        return CheckpointState(
            params, states, parts, config=json.loads(t.config.to_json()),
            world_size=t.rt.size, optimizer_name=t.optimizer.name, optimizer_config=t.optimizer.config(),
            data=self.fingerprint(), model=t.model.spec())

    def resume(self) -> tuple | None:
        """Load the newest good checkpoint on rank 0 and broadcast it. Collective.

        Returns its GEMM thread plan ``(json, path, world_size)``, or None
        when there was no checkpoint.
        """
        t = self.t
        path, comm = t.config.checkpoint_path, t.rt.comm
        resumer = Resumer(path, t.config, t.precision.name, t.optimizer.config(), t.model.spec(),
                          self.fingerprint(), self.data_name())
        state = on_root(lambda: resumer.newest(t.model.n_global), comm=comm, catch=(ValueError,),
                        error=t._in_words)
        meta, err = None, None
        if t.rt.rank == 0:
            resumer.warn()
            if state is None:
                print(f"hpcgpu.train: no checkpoint at {path}: starting from scratch", flush=True)
            else:
                meta = dict(path=resumer.found, world_size=state.world_size, gemm_threads=state.gemm_threads,
                            names=sorted(state.optimizer))
                try:  # a readable file with a malformed field must not leave the other ranks waiting below
                    if state.epoch > t.config.epochs:
                        raise ValueError(f"has done {state.epoch} epochs, this run asks for {t.config.epochs} in "
                                         f"all: give at least {state.epoch} to go on from it")
                    self.load_state_dict(state.parts)
                    t.schedule.total = t.config.epochs * t.sampler.steps  # more epochs: the new span
                    if sorted(state.optimizer) != sorted(t.opt_state):
                        raise ValueError(f"holds optimizer state {sorted(state.optimizer)}, {t.optimizer.name} "
                                         f"has {sorted(t.opt_state)}")
                except (ValueError, TypeError, KeyError) as e:
                    err = t._in_words(ValueError(f"--resume: {resumer.found}: {e}"))
        agree(err, comm=comm)
        meta = comm.bcast(meta, root=0)
        if meta is None:
            return None
        self.sync(0, full=(state.params, state.optimizer) if t.rt.rank == 0 else (None, None))
        t.resumed_from = meta["path"]
        if t.rt.rank == 0 and t.config.progress != "none":
            where = (f"epoch {t.epoch + 1}, step {t.step}" if t.epoch < t.config.epochs else
                     f"the run is complete ({t.epoch} epochs, {t.step} steps): nothing to train")
            print(f"hpcgpu.train: resumed from {meta['path']} (written by {meta['world_size']} rank(s)): {where}",
                  flush=True)
        return meta["gemm_threads"], meta["path"], meta["world_size"]

    def save_checkpoint(self, path: str | None) -> str:
        """:meth:`hpcgpu.Trainer.save_checkpoint`. Collective.

        Parameters
        ----------
        path : str or None
            The checkpoint file; the config's when None.

        Returns
        -------
        str
            The path written.

        Raises
        ------
        ValueError, OSError, FloatingPointError
            As :meth:`hpcgpu.Trainer.save_checkpoint` (every rank).
        """
        t = self.t
        path = path or t.config.checkpoint_path
        if path is None:
            raise agreed(ValueError("save_checkpoint: give a path (the trainer was made without checkpoint= or out=)"))
        if not t._prepared:  # a checkpoint holds the run's place in its data: there is none before the first fit
            raise agreed(ValueError("save_checkpoint: no data yet: a checkpoint holds the run's place in its data; "
                                    "call fit first"))
        t._claim([Output(path, "save_checkpoint")] + [Output(f"{path}.{i}", "save_checkpoint")
                                                      for i in range(1, t.config.keep_checkpoints)])
        t._drain()  # the steps' losses: a diverged step raises here, and nothing is written
        finite = bool(_device.asnumpy(t.xp.isfinite(t.model.params).all()))
        if not t.rt.comm.allreduce(finite, op=MPI.LAND):  # tensor slices differ: every rank must know
            # The same parameters on every rank: all raise, and the last good checkpoint stays.
            raise agreed(FloatingPointError(
                f"training diverged: parameters are not finite after step {t.step} "
                f"(epoch {t.epoch + 1}); not writing a checkpoint; start again with a smaller --lr "
                "(a resume keeps the checkpoint's --lr)"))
        self.fingerprint()  # collective, once
        if t.config.timing:
            t._collect_phases()  # the unfinished epoch's phases so far, into the checkpoint
        full = self.gather_global()  # collective: the unsplit parameters and optimizer state on rank 0
        on_root(lambda: write_checkpoint(path, self._checkpoint_state(*full), t.config.keep_checkpoints,
                                         attrs=dict(hpcgpu_version=__version__, data=self.data_name())),
                comm=t.rt.comm, catch=(*WRITE_ERRORS, TypeError),  # TypeError: a part's value JSON cannot hold
                error=lambda e: OSError(f"--checkpoint {path}: cannot write ({one_line(e)})"))
        return path
