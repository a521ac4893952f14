"""At every rank count: one reader per node, the nodes' joules summed once, the RAPL wrap undone, GPUs shared by
ranks counted once. Argument: a scratch directory shared by the ranks."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mpi4py import MPI  # noqa: E402

from _fake_energy import install_fake_nvml, powercap_tree, set_counter, set_gpu_counter  # noqa: E402

comm = MPI.COMM_WORLD
scratch = sys.argv[1]
tree, gpus = os.path.join(scratch, "powercap"), os.path.join(scratch, "nvml")
buses = ["0000:03:00.0", "0000:04:00.0"]
if comm.rank == 0:
    powercap_tree(tree, sockets=2, max_range=1_000_000)
    set_counter(tree, "intel-rapl:1", 900_000)  # socket 1 wraps during the run
    for b in buses:
        set_gpu_counter(gpus, b, 5_000)
comm.Barrier()
install_fake_nvml(gpus)

from hpcgpu.energy import EnergyMeter  # noqa: E402

meter = EnergyMeter(comm, gpu_bus_id=buses[comm.rank % 2], powercap_root=tree)
meter.start()
comm.Barrier()
if comm.rank == 0:
    set_counter(tree, "intel-rapl:0", 2_000_000 // 2)     # +1.0 J
    set_counter(tree, "intel-rapl:0:1", 250_000)          # dram +0.25 J
    set_counter(tree, "intel-rapl:0:0", 999_999)          # core: inside the package, not added
    set_counter(tree, "intel-rapl:1", 100_000)            # wrapped: +0.2 J
    set_counter(tree, "intel-rapl:2", 999_999)            # psys: not counted
    set_gpu_counter(gpus, buses[0], 5_000 + 3_000)        # +3 J
    set_gpu_counter(gpus, buses[1], 5_000 + 1_500)        # +1.5 J
comm.Barrier()
meter.stop()
j = meter.total()
readers = comm.allreduce(int(meter.reader))
meter.free()
fails = []
if readers != 1:
    fails.append(f"{readers} readers on one node")
if abs(j.cpu - 1.45) > 1e-9:
    fails.append(f"cpu {j.cpu} J, expected 1.45")
if abs(j.gpu - (4.5 if comm.size > 1 else 3.0)) > 1e-9:
    fails.append(f"gpu {j.gpu} J")
bad = comm.allreduce(len(fails))
if fails:
    print(f"[{comm.rank}] " + "; ".join(fails), flush=True)
if comm.rank == 0 and not bad:
    print("energy checks: ok", flush=True)
sys.exit(1 if bad else 0)
