"""hpcgpu: SPMD programs on GPU clusters, one MPI rank per GPU.

``rt = hpcgpu.init()`` gives the communicator, the bound device and the array
module ``xp``; :mod:`hpcgpu.comm` the collectives on ``xp`` arrays;
:class:`DistMatrix` and :func:`matmul` (SUMMA) the distributed matrix
multiply; :mod:`hpcgpu.train` the data-parallel SGD trainer.

``hpcgpu.matmul`` is the function; ``python -m hpcgpu.matmul`` runs the
command line of the same name (module ``hpcgpu/matmul.py``, not imported
here, so the function keeps the name).
"""

from ._version import __version__
from .comm import Allgather, Allreduce, Bcast, Ibcast, agree
from .distmatrix import DistMatrix, default_grid
from .grid import ProcessGrid
from .runtime import Runtime, detect_cuda_aware, get_runtime, init
from .summa import matmul
from .train import MLP, SGD, LRSchedule, TrainConfig, Trainer

__all__ = [
    "__version__",
    "Allgather", "Allreduce", "Bcast", "Ibcast", "agree",
    "Runtime", "detect_cuda_aware", "get_runtime", "init",
    "DistMatrix", "ProcessGrid", "default_grid", "matmul",
    "MLP", "SGD", "LRSchedule", "TrainConfig", "Trainer",
]
