"""The last rank sleeps before a watched Allreduce; the watchdog must end the job.

Usage: stall.py TIMEOUT
"""

import sys
import time

import numpy as np

import hpcgpu
from hpcgpu._cli import run
from hpcgpu.watchdog import Watchdog


def main(argv):
    rt = hpcgpu.init("cpu")
    wd = Watchdog(rt.comm, float(sys.argv[1]))
    a = np.ones(4)
    for step in range(5):
        if rt.rank == rt.size - 1 and step == 2:
            time.sleep(120)
        with wd.watch("test Allreduce", f"step {step}"):
            hpcgpu.Allreduce(a)
    wd.close()
    print("done", rt.rank)


run(main)
