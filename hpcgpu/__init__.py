"""hpcgpu: SPMD programs on GPU clusters, one MPI rank per GPU.

``rt = hpcgpu.init()`` gives the communicator, the bound device and the array
module ``xp``; :mod:`hpcgpu.comm` the collectives on ``xp`` arrays;
:mod:`hpcgpu.train` the data-parallel SGD trainer.
"""

from ._version import __version__
from .comm import Allgather, Allreduce, Bcast, Ibcast, agree
from .runtime import Runtime, detect_cuda_aware, get_runtime, init
from .train import MLP, SGD, LRSchedule, TrainConfig, Trainer

__all__ = [
    "__version__",
    "Allgather", "Allreduce", "Bcast", "Ibcast", "agree",
    "Runtime", "detect_cuda_aware", "get_runtime", "init",
    "MLP", "SGD", "LRSchedule", "TrainConfig", "Trainer",
]
