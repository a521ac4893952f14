"""Rank 1 raises in the middle of a loop of collectives; the guard must end the job."""

import numpy as np

import hpcgpu
from hpcgpu._cli import run


def main(argv):
    rt = hpcgpu.init("cpu")
    a = np.ones(1000)
    for step in range(100000):
        if rt.rank == 1 and step == 50:
            raise RuntimeError("injected failure on rank 1")
        hpcgpu.Allreduce(a)
        a[:] = 1


run(main)
