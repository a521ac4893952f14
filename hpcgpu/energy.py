"""Energy from the hardware's own counters: RAPL for CPU packages and DRAM, NVML for GPUs; one reader per node.

Counters, never models: where no counter can be read (no powercap tree, a
counter only root may read, no NVML, a GPU older than Volta), the value is
NaN and the reason is kept, never a guess from a TDP figure.

- **RAPL** (``/sys/class/powercap/intel-rapl:N`` for each package,
  ``intel-rapl:N:M`` named ``dram`` for its memory; the same tree on AMD):
  ``energy_uj`` counts microjoules and wraps to 0 after
  ``max_energy_range_uj``; a delta across one wrap is corrected. The
  package's ``core`` and ``uncore`` sub-zones are inside the package's own
  count and are not added again; ``psys`` (the whole platform) is left out.
- **NVML** (``nvidia-ml-py``): ``nvmlDeviceGetTotalEnergyConsumption``,
  millijoules since the driver loaded (Volta and newer), so a delta needs
  no sampling thread.
- **One reader per node**: the ranks of a node (``Split_type(COMM_TYPE_SHARED)``)
  share its packages and GPUs; only the node's first rank reads, for the
  GPUs that the node's ranks use (deduplicated by PCI bus id), and the nodes'
  joules are summed. Four ranks on a node do not count it four times
  (codecarbon's Slurm bug, its PR 1390).
"""

from __future__ import annotations

import glob
import math
import os
import re
from dataclasses import dataclass

from mpi4py import MPI
from . import _options

__all__ = ["RaplReader", "NvmlReader", "EnergyMeter", "Joules", "POWERCAP"]

POWERCAP = "/sys/class/powercap"
"""Where Linux exposes RAPL; ``HPCGPU_POWERCAP_ROOT`` points elsewhere (the tests' fake tree)."""


def _read_int(path: str) -> int:
    with open(path) as f:
        return int(f.read().strip())


class RaplReader:
    """The RAPL package and DRAM counters of this node.

    Not collective.

    Parameters
    ----------
    root : str, optional
        The powercap directory; ``$HPCGPU_POWERCAP_ROOT`` or
        :data:`POWERCAP` when omitted.

    Attributes
    ----------
    zones : list of tuple
        ``(name, energy_uj path, max_energy_range_uj)`` of each counted zone
        (``package-0``, ``package-0/dram``, ...).
    reason : str
        Why nothing can be read (empty when :attr:`zones` is not empty).
    """

    def __init__(self, root: str | None = None):
        root = _options.text("HPCGPU_POWERCAP_ROOT", root, POWERCAP)
        self.zones: list[tuple[str, str, int]] = []
        self.reason = ""
        pkgs = sorted(d for d in glob.glob(os.path.join(root, "intel-rapl:*")) if re.search(r"intel-rapl:\d+$", d))
        if not pkgs:
            self.reason = f"no RAPL zones under {root}"
            return
        for pkg in pkgs:
            for d in [pkg, *sorted(glob.glob(pkg + ":*"))]:
                try:
                    with open(os.path.join(d, "name")) as f:
                        name = f.read().strip()
                except OSError:
                    continue
                if d != pkg and name != "dram":
                    continue  # core, uncore: inside the package's count
                if d == pkg and not name.startswith("package"):
                    continue  # psys: the platform, packages included
                label = name if d == pkg else f"{os.path.basename(pkg)}/{name}"
                try:
                    rng = _read_int(os.path.join(d, "max_energy_range_uj"))
                    _read_int(os.path.join(d, "energy_uj"))
                except PermissionError:
                    self.zones.clear()
                    self.reason = (f"{d}/energy_uj is readable by root only (Linux since 5.10, CVE-2020-8694); "
                                   "ask your site to allow it (e.g. a udev rule) or run as root")
                    return
                except (OSError, ValueError) as e:
                    self.zones.clear()
                    self.reason = f"cannot read {d} ({e})"
                    return
                self.zones.append((label, os.path.join(d, "energy_uj"), rng))
        if not self.zones:
            self.reason = f"no package or DRAM zones under {root}"

    def read(self) -> list[int]:
        """Every zone's counter now (microjoules)."""
        return [_read_int(p) for _, p, _ in self.zones]

    def joules(self, before: list[int], after: list[int]) -> float:
        """Joules between two :meth:`read` results, each zone's wrap at ``max_energy_range_uj`` undone.

        Parameters
        ----------
        before, after : list of int
            Two readings (microjoules), ``before`` first.

        Returns
        -------
        float
            Joules over every zone (NaN without zones).
        """
        if not self.zones:
            return math.nan
        total = 0
        for (_, _, rng), a, b in zip(self.zones, before, after, strict=True):
            total += b - a if b >= a else b + rng - a
        return total / 1e6


NVML_STILL = "NVML's energy counter did not advance in this period (shorter than the counter's update interval)"


class NvmlReader:
    """The total-energy counters of some GPUs of this node (NVML, Volta and newer).

    Not collective.

    Parameters
    ----------
    pci_bus_ids : list of str
        The GPUs to read, by PCI bus id (as ``cupy.cuda.Device(i).pci_bus_id``
        gives it; NVML numbers devices without regard to ``CUDA_VISIBLE_DEVICES``).

    Attributes
    ----------
    reason : str
        Why nothing can be read (empty when every GPU can be).
    """

    def __init__(self, pci_bus_ids: list[str]):
        self.handles: list = []
        self.reason = ""
        self.nvml = None
        if not pci_bus_ids:
            self.reason = "no GPU in use on this node"
            return
        try:
            import pynvml
        except ImportError:
            self.reason = "nvidia-ml-py is not installed (pip install nvidia-ml-py, or the gpu extra)"
            return
        try:
            pynvml.nvmlInit()
            for bus in pci_bus_ids:
                h = pynvml.nvmlDeviceGetHandleByPciBusId(bus.encode() if isinstance(bus, str) else bus)
                pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # NotSupported before Volta
                self.handles.append(h)
            self.nvml = pynvml
        except Exception as e:  # noqa: BLE001 - pynvml.NVMLError and friends: the reason is the point
            self.handles.clear()
            self.reason = f"NVML: {e}"

    def read(self) -> list[int]:
        """Every GPU's counter now (millijoules)."""
        return [int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles]

    def joules(self, before: list[int], after: list[int]) -> float:
        """Joules between two :meth:`read` results (NaN without GPUs).

        Parameters
        ----------
        before, after : list of int
            Two readings (millijoules), ``before`` first.

        Returns
        -------
        float
        """
        if not self.handles:
            return math.nan
        return sum(b - a for a, b in zip(before, after, strict=True)) / 1e3


@dataclass
class Joules:
    """Energy over all nodes between :meth:`EnergyMeter.start` and :meth:`EnergyMeter.stop`.

    Attributes
    ----------
    cpu, gpu : float
        Joules of the CPU packages and DRAM (RAPL) and of the GPUs in use
        (NVML), summed over the nodes; NaN when some node could not read them.
    cpu_reason, gpu_reason : str
        Why a value is NaN (the first node's reason); empty otherwise.
    """

    cpu: float
    gpu: float
    cpu_reason: str = ""
    gpu_reason: str = ""

    @property
    def total(self) -> float:
        """The sum of the parts that could be read; NaN when neither could."""
        parts = [v for v in (self.cpu, self.gpu) if not math.isnan(v)]
        return sum(parts) if parts else math.nan


class EnergyMeter:
    """Joules of the whole job between two instants, read by one rank per node.

    Collective to construct and to :meth:`total`; :meth:`start` and
    :meth:`stop` are not (only each node's first rank reads counters).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        The job's ranks.
    gpu_bus_id : str or None
        The PCI bus id of this rank's GPU (``None`` on the CPU).
    powercap_root : str, optional
        Passed to :class:`RaplReader`.

    Attributes
    ----------
    reader : bool
        Whether this rank reads its node's counters.
    """

    def __init__(self, comm: MPI.Intracomm, gpu_bus_id: str | None = None, powercap_root: str | None = None):
        self.comm = comm
        self.node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        buses = self.node.gather(gpu_bus_id, root=0)
        self.reader = self.node.rank == 0
        self.rapl = self.nvml = None
        if self.reader:
            self.rapl = RaplReader(powercap_root)
            self.nvml = NvmlReader(sorted({b for b in buses if b}))
        self._before = None
        self._sum = [0.0, 0.0]

    def start(self) -> None:
        """Read the node's counters (its first rank only)."""
        if self.reader:
            self._before = (self.rapl.read() if self.rapl.zones else [],
                            self.nvml.read() if self.nvml.handles else [])

    def stop(self) -> None:
        """Add the node's joules since :meth:`start` to this period's (its first rank only)."""
        if self.reader and self._before is not None:
            after = (self.rapl.read() if self.rapl.zones else [], self.nvml.read() if self.nvml.handles else [])
            self._sum[0] += self.rapl.joules(self._before[0], after[0])
            self._sum[1] += self.nvml.joules(self._before[1], after[1])
            self._before = None

    def total(self) -> Joules:
        """The joules of every node since the last :meth:`total`, summed. Collective over ``comm``.

        Returns
        -------
        Joules
            The same on every rank.
        """
        mine = None
        if self.reader:
            sums, why_gpu = list(self._sum), self.nvml.reason
            if self.nvml.handles and sums[1] == 0.0:
                # NVML's counter moves in steps (the GPU kit's H200: a 2-rank run's short epochs all read 0 J);
                # a period shorter than a step is not measured, never a zero
                sums[1], why_gpu = math.nan, NVML_STILL
            mine = (sums, self.rapl.reason, why_gpu)
        self._sum = [0.0, 0.0]
        got = [g for g in self.comm.allgather(mine) if g is not None]
        cpu = sum(g[0][0] for g in got)  # a node's NaN makes the sum NaN: never a partial count
        gpu = sum(g[0][1] for g in got)
        why_cpu = next((g[1] for g in got if g[1]), "")
        why_gpu = next((g[2] for g in got if g[2]), "")
        return Joules(cpu, gpu, why_cpu if math.isnan(cpu) else "", why_gpu if math.isnan(gpu) else "")

    def free(self) -> None:
        """Free the node communicator. Collective over ``comm``."""
        if self.node != MPI.COMM_NULL:
            self.node.Free()
            self.node = MPI.COMM_NULL
