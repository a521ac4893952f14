"""The trainer's results file: metrics, the model by name, timing and provenance, in one HDF5 file.

Layout: ``/metrics/<name>`` (one value per epoch, attribute ``units``),
``/model/<parameter>`` (the unsplit model: a Dense layer's ``fc{i}.weight``
is ``(in, out)``), ``/timing/<phase>`` (epochs x (min, mean, max) seconds
over the ranks), ``/comm`` (attributes: communication per step), root
attributes: ``config`` (JSON), ``model`` (JSON: the layers and the loss, so
``python -m hpcgpu.train predict`` can rebuild it), ``task``, provenance.
"""

from __future__ import annotations

import math

import numpy as np

from ..io import atomic_path, new_hdf5, write_attrs
from .metrics import UNITS

__all__ = ["write_results", "read_model"]

_ENERGY_SOURCE = {"cpu": "RAPL package and DRAM counters, one reader per node",
                  "gpu": "NVML total-energy counters of the GPUs in use, one reader per node"}


def write_results(path: str, *, metrics: tuple, history: dict, params: dict, attrs: dict, comm_stats: dict,
                  energy_reasons: dict, buffers: dict | None = None, phases: tuple = (),
                  clock: str = "host") -> None:
    """Write a run's results to ``path``, atomically. Not collective: rank 0 calls it.

    Parameters
    ----------
    path : str
        The HDF5 file, replaced whole if it exists.
    metrics : tuple of str
        The per-epoch series to write under ``/metrics``.
    history : dict of list
        Every series by name (the timing series included when ``phases``).
    params : dict of str to numpy.ndarray
        The unsplit model's parameters by name, in their shapes.
    attrs : dict
        Root attributes (``config``, ``model``, provenance).
    comm_stats : dict
        ``/comm``'s attributes.
    buffers : dict of str to numpy.ndarray, optional
        The model's buffers (state that is not trained: BatchNorm's running statistics) by name, into
        ``/buffers``.
    energy_reasons : dict
        Why the CPU's and the GPU's energy are NaN (``""`` when they are not).
    phases : tuple of str
        The timed phases (``/timing``; none without timing).
    clock : {"host", "cuda events"}
        How the phases were timed.

    Raises
    ------
    OSError
        The file cannot be written (nothing is left at ``path`` but what was there).
    """
    with atomic_path(path) as tmp, new_hdf5(tmp) as f:
        m = f.create_group("metrics")
        for k in metrics:
            ds = m.create_dataset(k, data=np.asarray(history[k]))
            ds.attrs["units"] = UNITS.get(k, "1")
            part = {"energy_joules_cpu": "cpu", "energy_joules_gpu": "gpu"}.get(k)
            if part:
                ds.attrs["source"] = _ENERGY_SOURCE[part]
                ds.attrs["why_nan"] = energy_reasons[part]
            if k == "energy_joules":
                ds.attrs["counted"] = "+".join(p for p in ("cpu", "gpu") if not energy_reasons[p]) \
                    or "nothing: no counter could be read"
        if phases:
            g = f.create_group("timing")
            write_attrs(g, {"description": "seconds per phase of each epoch's training steps, over the ranks "
                                           "(columns min, mean, max); on a GPU from CUDA events on the stream",
                            "phases": ",".join(phases), "clock": clock})
            for p in phases:
                rows = [history[f"{p}_seconds_{n}"] for n in ("min", "mean", "max")]
                ds = g.create_dataset(p, data=np.asarray(rows, dtype=np.float64).T.reshape(-1, 3))
                ds.attrs["units"], ds.attrs["columns"] = "s", ["min", "mean", "max"]
        g = f.create_group("model")
        for name, value in params.items():
            g.create_dataset(name, data=value)
        if buffers:  # a module's state that is not trained (BatchNorm's running statistics), rank 0's
            g = f.create_group("buffers")
            for name, value in buffers.items():
                g.create_dataset(name, data=value)
        write_attrs(f.create_group("comm"), comm_stats)
        write_attrs(f, attrs)


def read_model(path: str, what: str = "--model") -> tuple[dict, dict, dict]:
    """A results file's model: its description, its parameters by name, its options. Not collective.

    Parameters
    ----------
    path : str
        A results file (:func:`write_results`).
    what : str
        How messages name the file.

    Returns
    -------
    (dict, dict, dict)
        The ``model`` attribute (JSON: ``net`` and ``loss`` for built-in
        layers), the parameters by name (host arrays), the ``config``.

    Raises
    ------
    FileNotFoundError
        No file.
    ValueError
        Not a results file of hpcgpu's trainer, or of a model of one's own
        (which only the Python code that defined it can rebuild).
    """
    import json


    from ..io import open_hdf5

    f, err = open_hdf5(path, what)  # a FIFO, a dangling link, a directory: refused before any open
    if err is not None:
        raise err
    try:
        with f:
            if "model" not in f or "config" not in f.attrs:
                raise ValueError(f"{what} {path}: not a results file of python -m hpcgpu.train (no /model)")
            params = {k: f["model"][k][()] for k in f["model"]}
            try:
                spec, config = json.loads(f.attrs.get("model", "{}")), json.loads(f.attrs["config"])
            except ValueError:
                spec = config = None
            if not (isinstance(spec, dict) and isinstance(config, dict)):
                raise ValueError(f"{what} {path}: its model description (the model and config attributes) is not "
                                 "a JSON object: not a results file of python -m hpcgpu.train")
    except OSError as e:
        from ..io import one_line

        raise ValueError(f"{what} {path}: not a readable HDF5 file ({one_line(e)})") from None
    if not spec and "hidden" in config:  # written before models were recorded: the command line's MLP
        spec = {"mlp": True}
    if "net" not in spec and not spec.get("mlp"):
        raise ValueError(f"{what} {path}: holds a model of one's own ({spec.get('model', 'unknown')}): "
                         "build it in the Python code that defines it and call Trainer.load_weights on that file")
    return spec, params, config


def nan_to_none(v):
    """``None`` for a NaN float (JSON has no NaN), else ``v``. Not collective."""
    return None if isinstance(v, float) and math.isnan(v) else v
