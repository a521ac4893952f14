"""Data-parallel training: ``mpiexec -n 8 python -m hpcgpu.train``, or :class:`Trainer` from a science code."""

from ..nn import MLP
from ..optim import SGD, Adam, AdamW, LRSchedule
from .callbacks import Callback, EarlyStopping
from .config import TrainConfig
from .data import GlobalBatchSampler, Split, from_arrays, load_split
from .saved import load_model
from .trainer import Trainer

__all__ = ["Adam", "AdamW", "Callback", "EarlyStopping", "GlobalBatchSampler", "LRSchedule", "MLP", "SGD", "Split",
           "TrainConfig", "Trainer", "from_arrays", "load_model", "load_split"]
