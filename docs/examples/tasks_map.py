# run: mpiexec -n 3
"""The task farm from Python: hpcgpu.tasks.map over a parameter table, results in one HDF5 file."""
import os
import shutil
import tempfile

import h5py
import numpy as np

import hpcgpu
import hpcgpu.tasks


def decay(rate, steps=4):
    """One task: x(t) = exp(-rate t) at t = 0..steps-1. Columns of the table arrive as keyword arguments."""
    if rate < 0:
        raise ValueError(f"rate must be >= 0, got {rate}")
    xp = hpcgpu.get_runtime().xp  # CuPy on a GPU rank (results are copied back), NumPy here
    x = xp.exp(-rate * xp.arange(steps))
    return {"half_life": float(np.log(2) / rate) if rate else float("inf"), "x": x,
            "attempt": hpcgpu.tasks.current_task().attempt}


rt = hpcgpu.init(device="cpu")
tmp = rt.comm.bcast(tempfile.mkdtemp() if rt.rank == 0 else None, root=0)
params = [{"rate": r} for r in (0.0, 0.5, 1.0, -1.0, 2.0, 4.0)]  # or a .csv, .jsonl or .h5 table
out = os.path.join(tmp, "decay.h5")
r = hpcgpu.tasks.map(decay, params, out=out, retries=1)  # collective: every rank passes its own decay

print_ = print if rt.rank == 0 else (lambda *a: None)
print_(f"{r.tasks} tasks: {r.done} done, {r.failed} failed, {r.pending} pending, on {r.workers} workers")
if rt.rank == 0:  # the tables are on rank 0 (and in the file)
    print("half_life:", np.round(r.results["half_life"], 3).tolist())
    with h5py.File(out) as f:
        status = h5py.check_enum_dtype(f["tasks/status"].dtype)
        names = {v: k for k, v in status.items()}
        print("status:", [names[s] for s in f["tasks/status"][...]])
        print("attempts:", f["tasks/attempts"][...].tolist())
        print("error of task 3:", f["tasks/error"][3].decode())
        print("x of task 2:", np.round(f["results/x"][2], 4).tolist())
        print("groups:", sorted(f), "results:", sorted(f["results"]))
    shutil.rmtree(tmp)
