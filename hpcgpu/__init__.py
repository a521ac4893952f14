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

from . import _early

_early.catch()  # the trainer's command line only: a stop signal during start-up is kept, not fatal

from . import _yield  # noqa: E402

_yield.when_oversubscribed()  # MPICH reads it at MPI_Init: more ranks than cores wait without spinning

from . import _device  # noqa: E402

_device.bind_early()  # before the first import of mpi4py.MPI, which runs MPI_Init

from ._version import __version__  # noqa: E402
from .comm import Allgather, Allreduce, Bcast, Iallreduce, Ibcast  # noqa: E402
from .distmatrix import DistMatrix  # noqa: E402
from .errors import AgreedError, agree, agreed  # noqa: E402
from ._cli import run as run_guarded  # noqa: E402
from .grid import ProcessGrid, default_grid  # noqa: E402
from .runtime import Runtime, current_runtime, detect_cuda_aware, get_runtime, init  # noqa: E402
from .summa import matmul  # noqa: E402

# The trainer and the task farm load on first use (PEP 562): a code that multiplies matrices does not pay for
# them. hpcgpu.Trainer, hpcgpu.nn, hpcgpu.tasks.map... work as if imported here.
_LAZY = {"MLP": ("hpcgpu.nn", "MLP"), "SGD": ("hpcgpu.optim", "SGD"), "LRSchedule": ("hpcgpu.optim", "LRSchedule"),
         "TrainConfig": ("hpcgpu.train", "TrainConfig"), "Trainer": ("hpcgpu.train", "Trainer"),
         "load_model": ("hpcgpu.train", "load_model"),
         "nn": ("hpcgpu.nn", None), "optim": ("hpcgpu.optim", None), "train": ("hpcgpu.train", None),
         "tasks": ("hpcgpu.tasks", None)}


def __getattr__(name: str):
    """The trainer's and the task farm's names, imported on first use."""
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module 'hpcgpu' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    value = value if attr is None else getattr(value, attr)
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
