"""What a run writes and says: its results file, its trace, its communication figures, the console's first line.

Each function reads a trained :class:`hpcgpu.Trainer`'s parts (the holder of them); the results file's layout is
:mod:`hpcgpu.train.output`'s, the trace's :mod:`hpcgpu.timing`'s.
"""

from __future__ import annotations

import json

import numpy as np

from .. import _device
from .._outputs import Input, Output
from .._version import __version__
from ..errors import agreed
from ..io import WRITE_ERRORS, on_root, one_line
from ..timing import write_trace as _write_trace

__all__ = ["save_results", "write_trace", "comm_stats", "header"]


def _named(t, params) -> dict:
    """The unsplit flat ``params`` as ``{name: array of its shape}`` (rank 0)."""
    return {} if params is None else t.model.global_views(params)


def save_results(t, path: str | None) -> str:
    """:meth:`hpcgpu.Trainer.save_results`. Collective.

    Parameters
    ----------
    t : hpcgpu.Trainer
    path : str or None
        The HDF5 file; the config's ``out`` when None.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ValueError, OSError
        As :meth:`hpcgpu.Trainer.save_results` (every rank).
    """
    from .output import write_results

    rt, c = t.rt, t.config
    path = c.out if path is None else path
    if path is None:
        raise agreed(ValueError("save_results: give a path (the trainer was made without out=)"))
    t._claim([Output(path, "save_results" if path != c.out else "--out")],
             [Input(t.data_path, "data")] if t.data_path and not t.data_path.startswith("(") else [])
    params, _ = t.gather_global()  # collective: the unsplit model on rank 0
    fp = json.dumps(t.data_fingerprint(), sort_keys=True)
    stats = comm_stats(t)
    m = t.model
    attrs = dict(config=c.to_json(), model=json.dumps(m.spec(), sort_keys=True), task=m.task,
                 world_size=rt.size, device=rt.device, mpi_library=rt.mpi_library, hpcgpu_version=__version__,
                 data=t._state.data_name(), data_fingerprint=fp, epochs_done=t.epoch, steps_done=t.step,
                 resumed_from=t.resumed_from, blas_threads=rt.blas_threads,
                 gemm_threads=t.gemm_plan.to_json() if t.gemm_plan is not None else "")
    if m.num_classes is not None:
        attrs["num_classes"] = m.num_classes
    buffers = {k: _device.asnumpy(v) for k, v in m.buffers().items()}  # rank 0's, as a step would share them

    def write():
        write_results(path, metrics=t.metrics.metrics, history=t.history, params=_named(t, params),
                      attrs=attrs, comm_stats=stats, energy_reasons=t._energy_reasons, buffers=buffers,
                      phases=t.PHASES if c.timing else (),
                      clock="cuda events" if t.xp is not np else "host")

    on_root(write, comm=rt.comm, catch=WRITE_ERRORS,
            error=lambda e: OSError(f"--out {path}: cannot write ({one_line(e)})"))
    return path


def write_trace(t, path: str | None) -> str | None:
    """:meth:`hpcgpu.Trainer.write_trace`. Collective.

    Parameters
    ----------
    t : hpcgpu.Trainer
    path : str or None
        The JSON file; the config's ``trace`` when None.

    Returns
    -------
    str or None
        The path written; None when no trace was asked for.
    """
    path = path or t.config.trace
    if not path or not t.config.timing:
        return None
    t._collect_phases()  # read the device's events (GPU) into the trace
    _write_trace(path, t.timer.events, t.rt.comm, t._clock0)
    return path


def comm_stats(t) -> dict:
    """:meth:`hpcgpu.Trainer.comm_stats`. Not collective.

    Parameters
    ----------
    t : hpcgpu.Trainer

    Returns
    -------
    dict
    """
    steps = max(1, t._steps_run)
    return dict(data_parallel=t.groups.data_parallel_size, tensor_parallel=t.config.tensor_parallel,
                zero_stage=t.config.zero_stage, tensor_bytes_per_step=t.tensor_bytes / steps,
                data_bytes_per_step=t.reducer.bytes_sent / steps,
                optimizer_state_bytes=int(sum(v.nbytes for v in t.opt_state.values())))


def header(t) -> str:
    """The console's first line of a run: ranks, device, data, model, optimizer, batches, precision, layout.

    Not collective (rank 0 prints it).

    Parameters
    ----------
    t : hpcgpu.Trainer

    Returns
    -------
    str
    """
    s, m = t.sampler, t.model
    k = s.micro_batches
    accum = f", {k} micro-batches of {s.global_batch // k}" if k > 1 else ""
    what = m.describe()
    task = f"C={m.num_classes}" if m.num_classes is not None else m.task
    return (
        f"hpcgpu.train: {t.rt.size} rank(s){t._placement} on {t.rt.summary()}, data {t.data_path}: "
        f"N={s.n_global} D={t.train_split.dim} {task}, {what}, optimizer {t.optimizer.name}, "
        f"global batch {s.global_batch} "
        f"(local {s.local_batch} on rank 0{accum}), {s.steps} steps/epoch"
        + (f" (the last of {s.last_batch})" if s.last_batch != s.global_batch else "")
        + f", precision {t.precision.name}, "
        + ("CUDA graphs on, " if t._step_fn.graph is not None
           else f"CUDA graphs off ({t._graphs_why}), " if t._graphs_why else "")
        + f"data {'replicated' if s.replicated else 'sharded'}"
        + (f", {t.groups.data_parallel_size} data x {t.config.tensor_parallel} tensor parallel"
           if t.config.tensor_parallel > 1 else "")
        + (", ZeRO-1 (optimizer state sharded)" if t.config.zero_stage == 1 else "")
        + (f", {t.gemm_plan.summary()}" if t.gemm_plan is not None else "")
    )
