"""Data-parallel training: ``mpiexec -n 8 python -m hpcgpu.train``, or :class:`Trainer` from a science code."""

# The names load on first use (PEP 562): ``python -m hpcgpu.train`` imports this package before its __main__,
# which records stop signals (hpcgpu._early) before anything initializes MPI.
_NAMES = {"MLP": "..nn", "SGD": "..optim", "Adam": "..optim", "AdamW": "..optim", "LRSchedule": "..optim",
          "Callback": ".callbacks", "EarlyStopping": ".callbacks", "TrainConfig": ".config",
          "GlobalBatchSampler": ".data", "Split": ".data", "from_arrays": ".data", "load_split": ".data",
          "load_model": ".saved", "Trainer": ".trainer"}

__all__ = ["Adam", "AdamW", "Callback", "EarlyStopping", "GlobalBatchSampler", "LRSchedule", "MLP", "SGD", "Split",
           "TrainConfig", "Trainer", "from_arrays", "load_model", "load_split"]


def __getattr__(name: str):
    """The trainer's names, imported on first use."""
    import importlib

    if name not in _NAMES:
        raise AttributeError(f"module 'hpcgpu.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name], __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_NAMES))
