"""The energy readers' arithmetic on fake counters: two sockets, a wraparound, DRAM counted and core not,
NVML deltas, the reasons when nothing can be read, one reader per node at 1 and 4 ranks."""

import math

import pytest
from _fake_energy import install_fake_nvml, powercap_tree, set_counter, set_gpu_counter
from mpi4py import MPI

import _mpi
from hpcgpu.energy import NVML_STILL, EnergyMeter, Joules, NvmlReader, RaplReader


def test_rapl_two_sockets_and_a_wrap(tmp_path):
    powercap_tree(str(tmp_path), sockets=2, max_range=10_000_000)
    r = RaplReader(str(tmp_path))
    assert [z[0] for z in r.zones] == ["package-0", "intel-rapl:0/dram", "package-1", "intel-rapl:1/dram"]
    set_counter(str(tmp_path), "intel-rapl:1", 9_000_000)
    before = r.read()
    set_counter(str(tmp_path), "intel-rapl:0", 3_000_000)      # +3 J
    set_counter(str(tmp_path), "intel-rapl:0:1", 500_000)      # +0.5 J
    set_counter(str(tmp_path), "intel-rapl:1", 1_000_000)      # wrapped: +2 J
    set_counter(str(tmp_path), "intel-rapl:0:0", 7_000_000)    # core: not added
    assert r.joules(before, r.read()) == pytest.approx(5.5, abs=1e-12)


def test_rapl_reasons(tmp_path):
    r = RaplReader(str(tmp_path / "none"))
    assert not r.zones and "no RAPL zones" in r.reason and math.isnan(r.joules([], []))
    powercap_tree(str(tmp_path), sockets=1)
    (tmp_path / "intel-rapl:0" / "energy_uj").unlink()
    r = RaplReader(str(tmp_path))
    assert not r.zones and "cannot read" in r.reason


@pytest.fixture
def no_pynvml_after(monkeypatch):
    """The fake pynvml leaves sys.modules with the test."""
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_nvml_delta_and_unsupported(tmp_path, no_pynvml_after):
    install_fake_nvml(str(tmp_path))
    set_gpu_counter(str(tmp_path), "0000:03:00.0", 1000)
    n = NvmlReader(["0000:03:00.0"])
    before = n.read()
    set_gpu_counter(str(tmp_path), "0000:03:00.0", 3500)
    assert n.joules(before, n.read()) == 2.5
    install_fake_nvml(str(tmp_path), supported=False)
    n = NvmlReader(["0000:03:00.0"])
    assert not n.handles and "Not Supported" in n.reason
    assert "no GPU" in NvmlReader([]).reason


def test_meter_at_one_rank_nan_with_a_reason(tmp_path):
    m = EnergyMeter(MPI.COMM_SELF, None, powercap_root=str(tmp_path / "none"))
    m.start()
    m.stop()
    j = m.total()
    m.free()
    assert math.isnan(j.cpu) and math.isnan(j.gpu) and math.isnan(j.total)
    assert "no RAPL zones" in j.cpu_reason and "no GPU" in j.gpu_reason
    assert Joules(2.0, math.nan).total == 2.0


def test_a_period_the_gpu_counter_did_not_advance_is_not_measured(tmp_path, no_pynvml_after):
    # NVML's counter moves in steps: on the GPU kit's H200 the short epochs of a 2-rank run read 0 J each, and the
    # report said 0.000 J/GFLOP; such a period is NaN with the reason, the next one that advanced its joules
    install_fake_nvml(str(tmp_path))
    set_gpu_counter(str(tmp_path), "0000:03:00.0", 1000)
    m = EnergyMeter(MPI.COMM_SELF, "0000:03:00.0", powercap_root=str(tmp_path / "none"))
    m.start()
    m.stop()
    still = m.total()
    m.start()
    set_gpu_counter(str(tmp_path), "0000:03:00.0", 1250)
    m.stop()
    moved = m.total()
    m.free()
    assert math.isnan(still.gpu) and still.gpu_reason == NVML_STILL
    assert moved.gpu == 0.25 and moved.gpu_reason == ""


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 4])
def test_one_reader_per_node(nprocs, tmp_path):
    p = _mpi.script(nprocs, "energy_checks.py", tmp_path)
    assert "energy checks: ok" in p.stdout
