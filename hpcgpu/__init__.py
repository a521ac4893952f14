"""hpcgpu: SPMD programs on GPU clusters, one MPI rank per GPU.

``rt = hpcgpu.init()`` gives the communicator, the bound device and the array
module ``xp``; :mod:`hpcgpu.comm` the collectives on ``xp`` arrays;
:class:`DistMatrix` and :func:`matmul` (SUMMA) the distributed matrix
multiply; :class:`Trainer` (:mod:`hpcgpu.train`) data-parallel training of a
model of :mod:`hpcgpu.nn` or one's own, with an optimizer of :mod:`hpcgpu.optim`; :mod:`hpcgpu.tasks`
the task farm (``hpcgpu.tasks.map``).

``hpcgpu.matmul`` is always the function (no submodule has that name); the
command lines are ``python -m hpcgpu {info,matmul}``, ``python -m hpcgpu.train`` and
``python -m hpcgpu.tasks``.

Importing hpcgpu chooses a GPU from the launcher's node-local rank before
``mpi4py`` initializes MPI (see ``hpcgpu._device.bind_early``): import
it before ``mpi4py.MPI`` on a CUDA-aware MPI. ``HPCGPU_DEVICE=cpu`` skips that.
"""

from . import _yield

_yield.when_oversubscribed()  # MPICH reads it at MPI_Init: more ranks than cores wait without spinning
_yield.mpi_start()  # MPI_Init's signal handlers undone; a singleton loads MPI without UCX's memory hooks

_blas_var = _yield.blas_at_start()  # OpenBLAS starts the rank's share of threads at NumPy's import, not all cores

from . import _device  # noqa: E402

_yield.blas_started(_blas_var)
del _blas_var

_device.bind_early()  # before the first import of mpi4py.MPI, which runs MPI_Init

from ._version import __version__  # noqa: E402

# Every name loads on first use (PEP 562): importing hpcgpu initializes no MPI (a program's __main__ records stop
# signals first: hpcgpu._early), and a code that multiplies matrices does not pay for the trainer or the task farm.
# hpcgpu.Trainer, hpcgpu.nn, hpcgpu.tasks.map... work as if imported here.
_LAZY = {"Allgather": ("hpcgpu.comm", "Allgather"), "Allreduce": ("hpcgpu.comm", "Allreduce"),
         "Bcast": ("hpcgpu.comm", "Bcast"), "Iallreduce": ("hpcgpu.comm", "Iallreduce"),
         "Ibcast": ("hpcgpu.comm", "Ibcast"), "DistMatrix": ("hpcgpu.linalg.distmatrix", "DistMatrix"),
         "AgreedError": ("hpcgpu.errors", "AgreedError"), "agree": ("hpcgpu.errors", "agree"),
         "agreed": ("hpcgpu.errors", "agreed"), "run_guarded": ("hpcgpu._cli", "run"),
         "ProcessGrid": ("hpcgpu.linalg.grid", "ProcessGrid"), "default_grid": ("hpcgpu.linalg.grid", "default_grid"),
         "Runtime": ("hpcgpu.runtime", "Runtime"), "current_runtime": ("hpcgpu.runtime", "current_runtime"),
         "detect_cuda_aware": ("hpcgpu.runtime", "detect_cuda_aware"), "get_runtime": ("hpcgpu.runtime", "get_runtime"),
         "init": ("hpcgpu.runtime", "init"), "matmul": ("hpcgpu.linalg.summa", "matmul"),
         "MLP": ("hpcgpu.nn", "MLP"), "SGD": ("hpcgpu.optim", "SGD"), "LRSchedule": ("hpcgpu.optim", "LRSchedule"),
         "TrainConfig": ("hpcgpu.train", "TrainConfig"), "Trainer": ("hpcgpu.train", "Trainer"),
         "load_model": ("hpcgpu.train", "load_model"),
         "comm": ("hpcgpu.comm", None), "errors": ("hpcgpu.errors", None), "io": ("hpcgpu.io", None),
         "runtime": ("hpcgpu.runtime", None), "nn": ("hpcgpu.nn", None), "optim": ("hpcgpu.optim", None),
         "train": ("hpcgpu.train", None), "tasks": ("hpcgpu.tasks", None),
         "linalg": ("hpcgpu.linalg", None)}


def __getattr__(name: str):
    """The package's names and submodules, imported on first use."""
    import importlib
    import importlib.util

    if name in _LAZY:
        module, attr = _LAZY[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
    elif not name.startswith("__") and importlib.util.find_spec(f"hpcgpu.{name}") is not None:
        value = importlib.import_module(f"hpcgpu.{name}")  # hpcgpu.grid, hpcgpu.summa... as an import left them
    else:
        raise AttributeError(f"module 'hpcgpu' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "__version__",
    "Allgather", "Allreduce", "Bcast", "Iallreduce", "Ibcast", "agree",
    "AgreedError", "agreed", "run_guarded",
    "Runtime", "current_runtime", "detect_cuda_aware", "get_runtime", "init",
    "DistMatrix", "ProcessGrid", "default_grid", "matmul",
    "MLP", "SGD", "LRSchedule", "TrainConfig", "Trainer", "load_model",
]
