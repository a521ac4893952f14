"""Phase timers: phases tile the loop (their sum is its time), on the host clock and on the device's events;
the trace is valid Chrome JSON with one track per rank; the trainer's /timing adds up to its epoch seconds."""

import json
import time

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import _mpi
from hpcgpu.timing import PhaseTimer, SpanTimer, reduce_phases, write_trace


def test_phases_tile_the_loop_on_the_host():
    t = PhaseTimer(("a", "b"), trace=True)
    for _ in range(3):
        t.mark("a", "x")
        time.sleep(0.01)
        t.mark("b", "y")
        time.sleep(0.005)
    t.mark(None)
    got = t.collect()
    # each phase holds at least its sleeps (a sleep never ends early; under load it may end much later: two
    # suites at once once measured 82 ms for a's 30), and together they tile the loop from the first mark to the
    # last (the wall time around them held 2 ms more once, under load: the process waited before its first mark)
    assert got["a"] >= 0.0299 and got["b"] >= 0.0149, got
    first, last = t.events[0], t.events[-1]
    assert sum(got.values()) == pytest.approx(last[1] + last[2] - first[1], abs=1e-9)
    assert all(abs(e[1] + e[2] - f[1]) < 1e-9 for e, f in zip(t.events, t.events[1:], strict=False))  # no gaps
    assert [e[0] for e in t.events] == ["a", "b"] * 3 and t.collect() == {"a": 0.0, "b": 0.0}


def test_off_is_a_no_op():
    t = PhaseTimer(("a",), on=False)
    t.mark("a")
    t.mark(None)
    assert t.collect() == {"a": 0.0}


def test_spans_may_overlap():
    """A span inside another counts in both phases (an overlapped schedule); a timer that is off counts nothing."""
    t = SpanTimer(("outer", "inner"))
    t0 = time.perf_counter()
    with t.host("outer"):
        with t.device("inner", stream=None):  # no cupy: a host span
            time.sleep(0.01)
    wall = time.perf_counter() - t0
    got = t.collect()
    assert wall >= got["outer"] >= got["inner"] >= 0.01, got
    off = SpanTimer(("outer",), on=False)
    with off.host("outer"):
        time.sleep(0.001)
    assert off.collect() == {"outer": 0.0}


def test_reduce_and_trace_at_one_rank(tmp_path):
    assert reduce_phases({"a": 1.5, "b": 0.0}, MPI.COMM_SELF) == {"a": (1.5, 1.5, 1.5), "b": (0.0, 0.0, 0.0)}
    t = PhaseTimer(("a",), trace=True)
    c0 = time.perf_counter()
    t.mark("a", "step 1")
    t.mark(None)
    write_trace(str(tmp_path / "t.json"), t.events, MPI.COMM_SELF, c0)
    ev = json.load(open(tmp_path / "t.json"))["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    assert len(x) == 1 and x[0]["name"] == "a" and x[0]["args"] == {"at": "step 1"} and x[0]["ts"] >= 0
    with pytest.raises(OSError, match="--trace"):
        write_trace(str(tmp_path / "no" / "such" / "dir" / "t.json"), [], MPI.COMM_SELF, c0)


@pytest.mark.device
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_trainer_timing_adds_up_and_the_trace_has_a_track_per_rank(nprocs, tmp_path, small_h5):
    out, trace = tmp_path / "o.h5", tmp_path / "t.json"
    p = _mpi.run(nprocs, ["-m", "hpcgpu.train", "--data", small_h5, "--out", str(out), "--epochs", "3",
                          "--batch-size", "32", "--checkpoint-every", "5", "--trace", str(trace),
                          "--progress", "none"], env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as f:
        seconds = f["metrics/seconds"][()]
        phases = {k: f["timing"][k][()] for k in f["timing"]}
        assert set(phases) == {"data", "compute", "comm", "io"} and f["timing/compute"].shape == (3, 3)
        for k, v in phases.items():
            assert (v[:, 0] <= v[:, 1]).all() and (v[:, 1] <= v[:, 2]).all(), k  # min <= mean <= max
        assert (phases["io"][:, 1] > 0).all() and (phases["compute"][:, 1] > 0).all()
        if nprocs > 1:
            assert (phases["comm"][:, 1] > 0).all()
        # The phases tile each rank's epoch: at one rank the sum is the epoch; at several, each rank's own sum lies
        # between the sums of the phases' minima and maxima over ranks (the means drifted 8% from rank 0's epoch
        # of 53 ms when the ranks ran a few ms apart, with two test workers on two cores)
        lo, hi = (sum(v[:, i] for v in phases.values()) for i in (0, 2))
        # The phases never add up to more than the epoch (they lie inside it); what lies between two phases is
        # untimed, and a rank descheduled there (a garbage collection took 5.5 ms of an 81 ms epoch in CI's stand-in
        # pass once; three pytest workers on two cores took more) makes the sum short of the epoch by that much:
        # they must still cover most of it
        assert (lo <= seconds * 1.05 + 0.01).all() and (hi >= seconds * 0.5).all(), (lo, hi, seconds)
        if nprocs == 1:
            assert (hi <= seconds * 1.05 + 0.01).all(), (hi, seconds)
        # each epoch measured (> 0) or not (NaN: no counter, or NVML's did not advance in an epoch this short)
        joules = f["metrics/energy_joules"][()]
        assert (np.isnan(joules) | (joules > 0)).all(), joules
        assert f["metrics/energy_joules_cpu"].attrs["why_nan"] or not np.isnan(f["metrics/energy_joules_cpu"][0])
        assert (f["metrics/gflop"][()] > 0).all()
    ev = json.load(open(trace))["traceEvents"]
    tracks = {e["pid"] for e in ev if e["ph"] == "X"}
    names = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
    assert tracks == set(range(nprocs)) and len(names) == nprocs
    for r in range(nprocs):
        steps = {e["args"]["at"] for e in ev if e["pid"] == r and e["ph"] == "X" and e["name"] == "compute"}
        assert len(steps) >= 3 * 2  # every step of 3 epochs
