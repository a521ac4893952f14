"""Data-parallel SGD: ``mpiexec -n 8 python -m hpcgpu.train``."""

from .data import GlobalBatchSampler, Split, load_split
from .model import MLP
from .optim import SGD, LRSchedule
from .trainer import TrainConfig, Trainer

__all__ = ["GlobalBatchSampler", "LRSchedule", "MLP", "SGD", "Split", "TrainConfig", "Trainer", "load_split"]
