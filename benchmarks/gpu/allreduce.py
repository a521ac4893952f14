"""Allreduce of float32 device buffers over each of hpcgpu's paths: time, algorithm and bus bandwidth per size.

    [mpiexec -n P] python benchmarks/gpu/allreduce.py [--min-bytes 1M] [--max-bytes 1G] [--factor 2]
                                                      [--warmup 5] [--iters 20] [--batch 5]
                                                      [--paths nccl,staged,aware] [--json FILE]

What it measures
----------------
One in-place ``MPI.SUM`` Allreduce of a float32 CuPy array of S bytes, for
S from ``--min-bytes`` to ``--max-bytes``, each size ``--factor`` times the
last (nccl-tests' ``-b``, ``-e``, ``-f``; ``1M`` is 2**20 bytes), over each
path of ``--paths``:

nccl
    At P > 1, ``hpcgpu.comm.Allreduce`` under ``hpcgpu.init("gpu",
    collectives="nccl")``: NCCL on the communicator's own stream, no host
    round trip. At one rank hpcgpu's collectives make no call at all, so the
    path is the call they make at P > 1, ``hpcgpu._nccl.issue(comm,
    "allReduce", a, a, op=MPI.SUM)``, on a NCCL communicator of one rank
    (the runtime made with ``collectives="nccl"`` too).
staged
    At P > 1, ``hpcgpu.comm.Allreduce(a, cuda_aware=False)`` under
    ``collectives="mpi"``: the array copied into pinned host memory, MPI on
    the host copy, copied back. At one rank the same round trip, as
    hpcgpu's staged path does it per call: ``hpcgpu._device.to_host``,
    ``MPI.Allreduce`` in place on the host copy over the one-rank
    communicator, ``hpcgpu._device.from_host``.
aware
    Only where the runtime says MPI is CUDA-aware (skipped otherwise, with
    the runtime's reason): ``hpcgpu.comm.Allreduce(a, cuda_aware=True)``
    under ``collectives="mpi"``; at one rank the stream synchronization and
    MPI's in-place Allreduce on the device pointer.

A path that cannot run here (no NCCL library, ranks sharing a GPU, MPI not
CUDA-aware) is recorded as skipped, with the reason. Each path runs under a
runtime of its own: :func:`hpcgpu.init` makes a new one when
``collectives`` differs from the current runtime's.

Timing: per path and size, one call on every rank's ``rank + 1`` checks the
sum (``wrong``: the elements that differ from it, as nccl-tests' ``#wrong``;
a nonzero count makes the exit status 1); then, on zeros, ``--warmup``
calls, and ``--iters`` timed batches of ``--batch`` calls each. A batch
starts after a barrier and ends when the current CUDA stream is
synchronized (host clock, ``time.perf_counter``); its time per call is the
batch's time over ``--batch``, taken on the slowest rank. Reported: the
median over the batches (and the fastest and slowest batch in the JSON).

Figures, as nccl-tests reports them (``doc/PERFORMANCE.md`` of
https://github.com/NVIDIA/nccl-tests, "Performance reported by NCCL
tests"): ``algbw = S / t``; ``busbw = algbw * 2 (P - 1) / P`` for an
Allreduce, the rate of each rank's busiest link whatever the algorithm
(ring or tree), comparable with the hardware's peak whatever P. At P = 1
busbw is 0 (no byte crosses a link): read algbw there. GB/s are 1e9 bytes a
second. The staged rows also give ``host_copy = 2 S / t``: the bytes of
the two copies over the time of the whole round trip, a lower bound of the
pinned-copy bandwidth.

Output: one table on rank 0; ``--json FILE`` writes the figures
(``benchmarks/gpu/collect.py`` reads them). Without a usable GPU on some
rank: one line and exit status 2, as ``--device gpu`` everywhere in
hpcgpu.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time

import numpy as np

import hpcgpu  # before mpi4py.MPI: a rank's GPU is chosen before MPI_Init
from hpcgpu import _device, _nccl
from hpcgpu import comm as hcomm
from hpcgpu._cli import ArgumentParser, run
from hpcgpu.errors import AgreedError, agree
from hpcgpu.io import atomic_path, on_root, one_line, writable_error
from mpi4py import MPI

PATHS = ("nccl", "staged", "aware")
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
ITEM = 4  # float32
HOW = {  # (P > 1, P = 1): the call each path times
    "nccl": ("hpcgpu.comm.Allreduce(a) under collectives='nccl'",
             "hpcgpu._nccl.issue(comm, 'allReduce', a, a, op=MPI.SUM) on a NCCL communicator of one rank"),
    "staged": ("hpcgpu.comm.Allreduce(a, cuda_aware=False) under collectives='mpi': pinned host copies, MPI on "
               "the host",
               "hpcgpu._device.to_host, MPI Allreduce in place on the pinned host copy, hpcgpu._device.from_host"),
    "aware": ("hpcgpu.comm.Allreduce(a, cuda_aware=True) under collectives='mpi': device pointers to MPI",
              "stream synchronize, MPI Allreduce in place on the device pointer"),
}


def byte_size(text: str) -> int:
    """``--min-bytes``/``--max-bytes``: ``65536``, ``64K``, ``1M``, ``1G`` (binary units), a multiple of 4."""
    t = text.strip().upper()
    scale = UNITS.get(t[-1:], 1)
    try:
        n = int(t[:-1] if t[-1:] in UNITS else t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected bytes like 65536, 64K, 1M or 1G, got {text!r}") from None
    if n < ITEM or n % ITEM:
        raise argparse.ArgumentTypeError(f"must be a positive multiple of {ITEM} bytes (float32), got {text!r}")
    return n


def path_list(text: str) -> tuple:
    """``--paths``: some of nccl, staged, aware, comma-separated, in the order given."""
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in names if s not in PATHS]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected some of {','.join(PATHS)}, each once, got {text!r}")
    return names


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="benchmarks/gpu/allreduce.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("gpu",), default="gpu",
                   help="the device path is what is measured: a GPU on every rank, else one line and exit 2")
    p.add_argument("--min-bytes", type=byte_size, default=1 << 20, help="smallest buffer (1M = 2**20 bytes)")
    p.add_argument("--max-bytes", type=byte_size, default=1 << 30, help="largest buffer")
    p.add_argument("--factor", type=int, default=2, help="each size is this many times the last (>= 2)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per path and size")
    p.add_argument("--iters", type=int, default=20, help="timed batches per path and size (the median is reported)")
    p.add_argument("--batch", type=int, default=5, help="calls per timed batch")
    p.add_argument("--paths", type=path_list, default=PATHS,
                   help="which paths, in order: nccl, staged, aware (aware only where MPI is CUDA-aware)")
    p.add_argument("--json", default=None, help="write the figures to this file (rank 0)")
    return p


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def human(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def runtime_for(path: str):
    """``(runtime, "")`` for ``path``, or ``(None, why)`` when it cannot run here. Collective."""
    try:
        rt = hpcgpu.init("gpu", collectives="nccl" if path == "nccl" else "mpi")
    except AgreedError as e:  # every rank: NCCL cannot serve (no library, ranks sharing a GPU)
        return None, one_line(e)
    if path == "aware" and not rt.cuda_aware:
        return None, f"MPI is not CUDA-aware ({rt.cuda_aware_reason})"
    return rt, ""


def the_call(path: str, rt, a):
    """The work of one Allreduce of ``a`` on ``path``, as hpcgpu does it (see the module's docstring)."""
    comm = rt.comm
    if rt.size > 1:
        aware = {"nccl": None, "staged": False, "aware": True}[path]
        return lambda: hcomm.Allreduce(a, comm=comm, cuda_aware=aware)
    if path == "nccl":
        return lambda: _nccl.issue(comm, "allReduce", a, a, op=MPI.SUM, what="Allreduce")
    if path == "staged":
        def staged():
            h = _device.to_host(a, "blocking0")  # the slot hpcgpu.comm's blocking collectives stage through
            comm.Allreduce(MPI.IN_PLACE, h, op=MPI.SUM)
            _device.from_host(h, a)
        return staged

    def aware():
        _device.synchronize()  # MPI reads memory, not the stream
        comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
    return aware


def wrong_elements(call, a, rt) -> int:
    """Run ``call`` once on every rank's ``rank + 1``; the elements (on any rank) that miss the sum. Collective."""
    a.fill(rt.rank + 1)
    call()
    want = rt.size * (rt.size + 1) // 2
    wrong = int((a != want).sum().get())  # get() waits for the current stream, which waited for the collective
    return rt.comm.allreduce(wrong, op=MPI.SUM)


def timed(call, comm, warmup: int, iters: int, batch: int) -> np.ndarray:
    """Seconds per call of each timed batch, the slowest rank's. Collective."""
    for _ in range(warmup):
        call()
    _device.synchronize()
    t = np.empty(iters)
    for i in range(iters):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(batch):
            call()
        _device.synchronize()  # NCCL: the current stream waits for the NCCL stream's event
        t[i] = (time.perf_counter() - t0) / batch
    comm.Allreduce(MPI.IN_PLACE, t, op=MPI.MAX)  # a batch of a collective lasts as long as its slowest rank
    return t


def measure_path(path: str, opts, nbytes: list[int]) -> dict:
    """One path over every size: its runtime, how it ran, a row per size. Collective."""
    _device.free_staging()  # so that the staging bytes held afterwards are this path's
    rt, why = runtime_for(path)
    if rt is None:
        return {"status": "skipped", "why": why, "rows": []}
    xp, P = rt.xp, rt.size
    factor = 2 * (P - 1) / P
    rows = []
    for s in nbytes:
        a = xp.empty(s // ITEM, dtype=xp.float32)
        call = the_call(path, rt, a)
        wrong = wrong_elements(call, a, rt)
        a.fill(0)  # sums of zeros stay zeros however many calls: no overflow, no denormals
        t = timed(call, rt.comm, opts.warmup, opts.iters, opts.batch)
        med = statistics.median(t.tolist())
        algbw = s / med / 1e9
        row = {"bytes": s, "count": s // ITEM, "time_us": med * 1e6, "min_us": float(t.min()) * 1e6,
               "max_us": float(t.max()) * 1e6, "algbw_gbps": algbw, "busbw_gbps": algbw * factor, "wrong": wrong}
        if path == "staged":
            row["host_copy_gbps"] = 2 * algbw
        rows.append(row)
        del a, call
    held = rt.comm.Get_attr(_nccl._keyval())  # the NCCL communicator hpcgpu cached on the runtime's communicator
    cuda_aware = {"nccl": None, "staged": False, "aware": True}[path]
    return {"status": "ok", "how": HOW[path][P == 1],
            "runtime": {"collectives": rt.collectives, "collectives_reason": rt.collectives_reason,
                        "cuda_aware": rt.cuda_aware, "cuda_aware_reason": rt.cuda_aware_reason,
                        "device_path": hcomm.device_path(cuda_aware=cuda_aware)},
            "evidence": {"nccl_communicator_ranks": None if held is None else int(held.size),
                         "staging_bytes": _device.staging_stats()[1]},
            "rows": rows}


def table(res: dict) -> str:
    P, paths = res["ranks"], res["paths"]
    ran = [p for p in paths if paths[p]["status"] == "ok"]
    dev = res["device"]
    lines = [f"hpcgpu Allreduce: float32, in place, MPI.SUM, {P} rank(s); rank 0 on gpu:{dev['id']} ({dev['name']})"
             f"{' [CuPy stand-in]' if res['standin'] else ''}",
             f"MPI: {res['mpi_library']} (CUDA-aware: {'yes' if res['cuda_aware'] else 'no'}, "
             f"{res['cuda_aware_reason']}); {res['nccl']}; CuPy {res['cupy']}",
             f"time per call: median of {res['iters']} batches of {res['batch']} calls after {res['warmup']} warm-up "
             "calls, the slowest rank's; algbw = S/t, busbw = algbw * 2(P-1)/P (nccl-tests); GB/s = 1e9 B/s"]
    if P == 1:
        lines.append("one rank: busbw is 0 by definition (no byte crosses a link); compare algbw")
    for p, e in paths.items():
        said = (f"{e['how']}; runtime collectives={e['runtime']['collectives']}" if e["status"] == "ok"
                else f"skipped: {e['why']}")
        lines.append(f"{p + ':':8}{said}")
    if not ran:
        return "\n".join(lines)
    head = f"{'size':>10} " + "".join(f"| {p + ' us':>12} {'algbw':>7} {'busbw':>7} " for p in ran) + "| wrong"
    lines += ["", head]
    for i, s in enumerate(res["sizes"]):
        cells, wrong = [], 0
        for p in ran:
            r = paths[p]["rows"][i]
            cells.append(f"| {r['time_us']:>12.1f} {r['algbw_gbps']:>7.2f} {r['busbw_gbps']:>7.2f} ")
            wrong += r["wrong"]
        lines.append(f"{human(s):>10} " + "".join(cells) + f"| {wrong}")
    if "staged" in ran:
        best = max(r["host_copy_gbps"] for r in paths["staged"]["rows"])
        lines.append(f"staged: best host_copy = 2 S/t = {best:.2f} GB/s (both copies over the whole round trip)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser()
    a = p.parse_args(argv)
    if a.min_bytes > a.max_bytes:
        p.error(f"--min-bytes {a.min_bytes} is above --max-bytes {a.max_bytes}")
    if a.factor < 2 or a.warmup < 0 or a.iters < 1 or a.batch < 1:
        p.error("--factor must be >= 2, --warmup >= 0, --iters and --batch >= 1")
    rt = hpcgpu.init(a.device)  # no usable GPU on some rank: an agreed error, one line and exit 2
    if a.json:
        agree(writable_error(a.json, "--json") if rt.rank == 0 else None, comm=rt.comm)
    import cupy

    nbytes = sizes(a.min_bytes, a.max_bytes, a.factor)
    res = {"benchmark": "allreduce", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": socket.gethostname(),
           "ranks": rt.size, "dtype": "float32", "op": "sum", "in_place": True, "sizes": nbytes,
           "warmup": a.warmup, "iters": a.iters, "batch": a.batch, "busbw_factor": 2 * (rt.size - 1) / rt.size,
           "device": {"id": rt.device_id, "name": _device.device_name(rt.device_id), "binding": rt.binding},
           "mpi_library": rt.mpi_library, "cuda_aware": rt.cuda_aware, "cuda_aware_reason": rt.cuda_aware_reason,
           "nccl": _nccl.available()[1], "cupy": cupy.__version__, "hpcgpu": hpcgpu.__version__,
           "standin": cupy.__version__.endswith("+standin"),
           "units": {"time_us": "microseconds per call", "algbw_gbps": "S/t, 1e9 B/s",
                     "busbw_gbps": "algbw * 2(P-1)/P, 1e9 B/s (0 at one rank)",
                     "host_copy_gbps": "2 S/t, staged only, 1e9 B/s"},
           "paths": {}}
    for path in a.paths:
        res["paths"][path] = measure_path(path, a, nbytes)
    if rt.rank == 0:
        print(table(res), flush=True)
    if a.json:
        def write():
            with atomic_path(a.json) as tmp, open(tmp, "w") as f:
                json.dump(res, f, indent=1)

        on_root(write, comm=hpcgpu.current_runtime().comm, error=lambda e: OSError(f"--json {a.json}: {one_line(e)}"))
    wrong = sum(r["wrong"] for e in res["paths"].values() for r in e["rows"])
    return 1 if wrong else 0


if __name__ == "__main__":
    run(main, prog="allreduce.py")
