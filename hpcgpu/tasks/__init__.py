"""A load-balanced task farm: many independent tasks over the ranks, results into one HDF5 file.

``hpcgpu.tasks.map(fn, params, out="results.h5")`` (collective) calls
``fn(**row)`` for each row of a parameter table on the worker ranks, each
bound to its GPU by the runtime as usual (``hpcgpu.get_runtime().xp`` inside
``fn``). The command line is ``python -m hpcgpu.tasks MODULE:FUNCTION
--params PARAMS -o RESULTS.h5``.

Rank 0 manages (guided self-scheduling, see ``hpcgpu.tasks._farm``) and
writes; ranks 1 .. P-1 run tasks; a single rank does both in turn. Nothing is
spawned. The output holds ``/params/<name>``, ``/results/<name>`` (task id
first), ``/tasks/status`` (pending, done, failed), ``/tasks/error``,
``/tasks/seconds``, ``/tasks/rank`` and ``/tasks/attempts``; a journal beside
it keeps every finished task within ``flush_seconds`` of a kill, and
``resume=True`` runs only the tasks not yet run (``retry_failed=True``: the
failed ones too). Each working rank runs its tasks in a child process of its
own (``hpcgpu.tasks._isolate``), so a task that ends its process (``os._exit``,
a C ``exit()``, a segmentation fault, an out-of-memory kill) is a failed task
naming the cause, not a lost sweep.
"""

# The names load on first use (PEP 562): ``python -m hpcgpu.tasks`` imports this package before its __main__,
# which records stop signals (hpcgpu._early) before anything initializes MPI.
_NAMES = ("map", "run_sweep", "SweepResult", "Params", "read_params", "TaskTimeout", "TaskInfo", "current_task",
          "PENDING", "DONE", "FAILED", "PROGRESS")

# ``map`` is public (hpcgpu.tasks.map) but not in __all__: ``from hpcgpu.tasks import *`` must not shadow the builtin.
__all__ = ["SweepResult", "Params", "read_params", "TaskTimeout", "TaskInfo", "current_task",
           "PENDING", "DONE", "FAILED"]


def __getattr__(name: str):
    """The task farm's names, imported on first use."""
    if name not in _NAMES:
        raise AttributeError(f"module 'hpcgpu.tasks' has no attribute {name!r}")
    from . import _map

    value = getattr(_map, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_NAMES))
