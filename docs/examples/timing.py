# run: mpiexec -n 2
"""Where the time goes in your own loop: PhaseTimer, reduce_phases and a Chrome trace (hpcgpu.timing)."""
import json
import os
import shutil
import tempfile
import time

import numpy as np

import hpcgpu
from mpi4py import MPI
from hpcgpu.timing import PhaseTimer, reduce_phases, write_trace

rt = hpcgpu.init(device="cpu")
tmp = rt.comm.bcast(tempfile.mkdtemp() if rt.rank == 0 else None, root=0)
timer = PhaseTimer(("data", "compute", "comm"), trace=True)  # cupy=the CuPy module on a GPU: CUDA events
a = np.random.default_rng(rt.rank).standard_normal((200, 200))

rt.comm.Barrier()
clock0 = time.perf_counter()                 # the trace's time zero
for step in range(5):
    timer.mark("data", f"step {step}")      # each mark ends the running phase and starts the next
    time.sleep(0.002)                        # stands for reading a batch
    timer.mark("compute", f"step {step}")
    for _ in range(4 + 4 * rt.rank):         # rank 1 does twice the work: a straggler
        a = np.tanh(a @ a / 200)
    time.sleep(0.01 + 0.05 * rt.rank)        # and waits 50 ms more a step (a busy node's scheduling is less)
    timer.mark("comm", f"step {step}")
    hpcgpu.Allreduce(a)                      # rank 0 waits here for rank 1
timer.mark(None)                             # pause: the phases tile the loop
first, last = timer.events[0], timer.events[-1]  # (phase, start, seconds, label), start in perf_counter seconds
wall = last[1] + last[2] - first[1]          # from the first mark to the pause
seconds = timer.collect()                    # this rank's seconds per phase
over_ranks = reduce_phases(seconds, rt.comm)  # {phase: (min, mean, max)}, the same on every rank
write_trace(os.path.join(tmp, "trace.json"), timer.events, rt.comm, clock0)  # collective: one track a rank
tiles = rt.comm.allreduce(abs(sum(seconds.values()) - wall) < 1e-6 * wall, op=MPI.LAND)  # no gap, no overlap
if rt.rank == 0:
    print("phases:", ", ".join(over_ranks))
    print("on every rank the phases sum to the loop's wall time:", tiles)
    lo, mean, hi = over_ranks["comm"]
    print("comm: the fastest rank waits longest for the straggler:", seconds["comm"] == hi > lo)
    with open(os.path.join(tmp, "trace.json")) as f:
        events = json.load(f)["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    print(f"trace: {len(slices)} slices on {len({e['pid'] for e in slices})} tracks "
          "(open it in chrome://tracing or ui.perfetto.dev)")
    shutil.rmtree(tmp)
