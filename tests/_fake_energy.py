"""A fake powercap tree and a fake ``pynvml`` whose counters live in files, as Zeus's tests fake them."""

import os
import sys
import types


def powercap_tree(root, sockets=2, max_range=2**32):
    """intel-rapl:N (package-N) with core and dram sub-zones, and a psys zone that must not be counted."""
    zones = {}
    for n in range(sockets):
        zones[f"intel-rapl:{n}"] = f"package-{n}"
        zones[f"intel-rapl:{n}:0"] = "core"
        zones[f"intel-rapl:{n}:1"] = "dram"
    zones[f"intel-rapl:{sockets}"] = "psys"
    for d, name in zones.items():
        os.makedirs(os.path.join(root, d), exist_ok=True)
        with open(os.path.join(root, d, "name"), "w") as f:
            f.write(name + "\n")
        with open(os.path.join(root, d, "max_energy_range_uj"), "w") as f:
            f.write(f"{max_range}\n")
        set_counter(root, d, 0)
    return zones


def set_counter(root, zone, uj):
    with open(os.path.join(root, zone, "energy_uj"), "w") as f:
        f.write(f"{int(uj)}\n")


def install_fake_nvml(counter_dir, supported=True):
    """``import pynvml`` gives a module whose GPU counters (mJ) are the files COUNTER_DIR/<bus id>."""
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    m.NVMLError = NVMLError
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetHandleByPciBusId = lambda bus: bus.decode() if isinstance(bus, bytes) else bus

    def energy(handle):
        if not supported:
            raise NVMLError("Not Supported")
        with open(os.path.join(counter_dir, handle.replace(":", "_"))) as f:
            return int(f.read())

    m.nvmlDeviceGetTotalEnergyConsumption = energy
    sys.modules["pynvml"] = m
    return m


def set_gpu_counter(counter_dir, bus, mj):
    os.makedirs(counter_dir, exist_ok=True)
    with open(os.path.join(counter_dir, bus.replace(":", "_")), "w") as f:
        f.write(str(int(mj)))
