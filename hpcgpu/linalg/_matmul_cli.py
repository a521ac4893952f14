"""``mpiexec -n P python -m hpcgpu matmul A B -o C``: distributed C = alpha op(A) op(B) + beta C (SUMMA).

A, B and C are ``FILE[:DATASET]``: an input's dataset defaults to the file's
only dataset, the output's to ``C``. Each rank reads only its blocks, and C
is written block by block (in parallel with a parallel h5py), atomically.

``--bench N`` multiplies random N x N matrices instead and prints seconds,
GFLOP/s, and the ratio to the local GEMM of one process with the same total
number of BLAS threads, measured in the same run.

(This module is the command line, a subcommand of ``python -m hpcgpu``. The
function is ``hpcgpu.matmul``, defined in :mod:`hpcgpu.linalg.summa`: no submodule
is named ``matmul``, so importing any module never replaces the function.)
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from mpi4py import MPI

from .._cli import add_collectives
from .._gemm import MATH_MODES
from ..errors import agree, agreed
from ..io import split_spec


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``matmul`` subcommand and its options to ``python -m hpcgpu``'s subparsers."""
    p = subparsers.add_parser("matmul", help="distributed C = alpha op(A) op(B) + beta C (SUMMA) of HDF5 matrices, "
                                             "or --bench N",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("A", nargs="?", help="left matrix, FILE[:DATASET] (m x k)")
    p.add_argument("B", nargs="?", help="right matrix, FILE[:DATASET] (k x n)")
    p.add_argument("-o", "--out", help="output FILE[:DATASET] (m x n; dataset C by default): adds or replaces "
                                            "that dataset, atomically, and keeps the file's other objects")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing dataset of -o that hpcgpu did not write (refused otherwise)")
    p.add_argument("--grid", help="process grid ROWSxCOLS, e.g. 2x3 (default: MPI.Compute_dims)")
    p.add_argument("--dtype", choices=("float32", "float64", "complex64", "complex128", "float16", "bfloat16"),
                   help="compute type (default: the inputs'; float64 for integer data). float16 and bfloat16 "
                        "accumulate in float32; a bfloat16 C is written as float32 (HDF5 has no bfloat16)")
    p.add_argument("--panel", type=int, help="SUMMA panel width (default: widest within --panel-memory)")
    p.add_argument("--panel-memory", type=float, default=256, help="MiB per rank for the panels in flight")
    p.add_argument("--math-mode", choices=MATH_MODES, default="default",
                   help="local GEMMs on a GPU: default follows CuPy's mode (TF32 under CUPY_TF32=1), "
                        "tf32 asks for TF32 tensor cores, full for IEEE float32 (the CPU is always full)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="gpu: CuPy, one GPU per rank; cpu: NumPy; auto: gpu when every rank has one")
    add_collectives(p)
    p.add_argument("--stall-timeout", type=float, default=None, metavar="SECONDS",
                   help="abort, naming the ranks that have not arrived, when a panel broadcast waits this long "
                        "(default: $HPCGPU_STALL_TIMEOUT, else 600; 0: off)")
    p.add_argument("--transa", choices=("N", "T", "C"), default="N",
                   help="op(A): A, its transpose, or its conjugate transpose (PDGEMM's TRANSA)")
    p.add_argument("--transb", choices=("N", "T", "C"), default="N", help="op(B), as --transa")
    p.add_argument("--alpha", type=complex, default=1, help="C = alpha op(A) op(B) + beta C")
    p.add_argument("--beta", type=complex, default=0, help="needs --c-in (beta = 0 ignores C, NaN included)")
    p.add_argument("--c-in", metavar="FILE[:DATASET]", help="the C that beta multiplies (m x n)")
    p.add_argument("--algorithm", choices=("summa", "2.5d", "auto"), default="summa",
                   help="2.5d: c layers of q x q ranks (P = c q^2), each 1/c of the inner dimension, C summed over "
                        "the layers; auto: 2.5d where P and --memory-limit allow")
    p.add_argument("--replication", type=int, metavar="C", help="--algorithm 2.5d: the number of layers c")
    p.add_argument("--memory-limit", type=float, metavar="MIB",
                   help="MiB a rank may use for 2.5-D's copies (checked before anything moves)")
    p.add_argument("--bench", type=int, metavar="N", help="multiply random N x N matrices and time it")
    p.add_argument("--repeat", type=int, default=3, help="--bench: timed repetitions (best is reported)")
    p.add_argument("--json", action="store_true", help="--bench: print one JSON line instead of text")
    p.set_defaults(main=main)
    return p


def _grid(text, comm):
    from .grid import ProcessGrid, parse_grid

    err, dims = None, None
    if text is not None:
        try:
            dims = parse_grid(text)
        except ValueError as e:
            err = e
    agree(err, comm=comm)
    return ProcessGrid(dims, comm=comm)


def _options_error(a: argparse.Namespace) -> ValueError | None:
    """The first bad option of ``a`` (the same on every rank), or None."""
    err = None
    if a.bench is None and not (a.A and a.B and a.out):
        err = ValueError("give A, B and -o C, or --bench N")
    elif a.bench is not None and a.bench < 1:
        err = ValueError(f"--bench must be >= 1, got {a.bench}")
    elif a.panel is not None and a.panel < 1:
        err = ValueError(f"--panel must be >= 1, got {a.panel}")
    elif not a.panel_memory > 0:
        err = ValueError(f"--panel-memory must be > 0, got {a.panel_memory}")
    elif a.memory_limit is not None and not a.memory_limit > 0:
        err = ValueError(f"--memory-limit must be > 0, got {a.memory_limit}")
    elif not all(map(np.isfinite, (a.alpha.real, a.alpha.imag, a.beta.real, a.beta.imag))):
        err = ValueError(f"--alpha and --beta must be finite, got {a.alpha} and {a.beta}")
    elif a.beta != 0 and not a.c_in:
        err = ValueError(f"--beta {_scalar(a.beta)} needs --c-in, the C it multiplies")
    return err or out_name_error(a.out, "C")


def out_name_error(out: str | None, default: str) -> ValueError | None:
    """``-o FILE:GROUP/``: a dataset name that ends in '/' names no dataset (``default`` where none is given)."""
    path, name = split_spec(out, default) if out else ("", "")
    if not (name.endswith("/") and name.strip("/")):
        return None
    return ValueError(f"-o {out}: the dataset's name ends in '/' (an empty name in group {name.rstrip('/')}): "
                      f"name the dataset, e.g. -o {path}:{name.rstrip('/')}")


def _bench_memory_error(a, rt, grid) -> MemoryError | None:
    """Whether ``--bench N``'s matrices fit the host memory of each node, before any is made. Collective.

    Every rank holds its blocks of A, B and C; rank 0 also holds the three global matrices of the one-process
    reference GEMM. A GPU run holds them in its rank's device memory, checked against that device's size
    (this rank's own answer: the caller agrees on it).
    """
    N, item = a.bench, np.dtype(a.dtype or "float64").itemsize
    pr, pc = grid.shape
    need = 3 * -(-N // pr) * -(-N // pc) * item + (3 * N * N * item if rt.rank == 0 else 0)
    fix = "give a smaller N (rank 0 also holds the three N x N matrices of the one-process reference)"
    return bench_memory_error(rt, need, f"--bench {N}", fix)


def bench_memory_error(rt, need: int, what: str, fix: str) -> MemoryError | None:
    """Whether this rank can hold ``need`` bytes of a benchmark's matrices (``what`` names the benchmark).

    On the host, its node's share (collective over ``rt.comm``); on a GPU, its device's size (this rank's own
    answer: the caller agrees on it).
    """
    from .._memory import node_memory_error

    if rt.device != "cpu":
        total = int(rt.xp.cuda.Device().mem_info[1])
        if need <= total:
            return None
        gib = 2.0**30
        return MemoryError(f"{what}: rank {rt.rank} needs {need / gib:.1f} GiB of device memory for its "
                           f"matrices, more than its GPU has ({total / gib:.1f} GiB): {fix}")
    return node_memory_error(need, rt.comm, what, fix)


def main(a: argparse.Namespace) -> int:
    """Run ``python -m hpcgpu matmul`` with the parsed options ``a``. Collective.

    Returns
    -------
    int
        The exit status: 0, or 3 when a stop signal (SIGINT, SIGTERM,
        SIGUSR1) came before the multiply began (nothing is written). One
        that comes during the multiply lets it finish and write C; a second
        Ctrl-C ends the job at once.

    Raises
    ------
    AgreedError
        Bad input, the same on every rank (the guard exits 2 with one line).
    """
    from .._stop import StopRequest

    stop = StopRequest(prog="hpcgpu matmul").install()  # before any communication
    try:
        return _main(a, stop)
    finally:
        stop.uninstall()


def _main(a: argparse.Namespace, stop) -> int:
    """:func:`main` under its stop request."""
    from .._outputs import Output, claim
    from .._stop import EXIT_STOPPED
    from ..runtime import init
    from .summa import DEFAULT_PANEL_MEMORY, matmul
    from ..watchdog import Watchdog, stall_timeout

    err = _options_error(a)
    if err:
        raise agreed(err)  # the same arguments on every rank
    timeout = stall_timeout(a.stall_timeout)
    rt = init(a.device, collectives=a.collectives)
    grid = _grid(a.grid, rt.comm)
    if rt.rank == 0 and not a.json:
        print(f"hpcgpu matmul: {rt.size} rank(s) on {rt.summary()}, grid {grid.shape[0]}x{grid.shape[1]}", flush=True)
    mem = int(a.panel_memory * 2**20) if a.panel_memory else DEFAULT_PANEL_MEMORY
    if a.bench is not None:
        return _bench(a, rt, grid, mem)

    out_path, out_name = split_spec(a.out, "C")
    specs = [("A", a.A), ("B", a.B), ("--c-in", a.c_in)]
    claim([Output(out_path, "-o", dataset=out_name)], input_datasets(specs, rt.rank), comm=rt.comm,
          overwrite=a.overwrite, prog="hpcgpu matmul")
    A, B, C, (m, k, n), alpha, beta = _inputs(a, grid)
    if stopped_before(stop, rt.comm, "hpcgpu matmul", "the multiply", a.out):
        return EXIT_STOPPED
    wd = Watchdog(rt.comm, timeout)
    t0 = MPI.Wtime()
    C = matmul(A, B, C, alpha=alpha, beta=beta, transa=a.transa, transb=a.transb, panel=a.panel,
               panel_memory=mem, math_mode=a.math_mode, watchdog=wd, **_algorithm(a))
    _sync(rt)
    seconds = rt.comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    wd.close()
    attrs = provenance("matmul", specs, transa=a.transa, transb=a.transb, alpha=alpha, beta=beta,
                       algorithm=a.algorithm, seconds=seconds, device=rt.device)
    C.to_hdf5(out_path, out_name, attrs=attrs, overwrite=a.overwrite, what="-o")
    if rt.rank == 0:
        what = "C = A @ B" if (a.transa, a.transb, alpha, beta) == ("N", "N", 1, 0) else \
            f"C = {alpha} op{a.transa}(A) op{a.transb}(B) + {beta} C"
        print(f"{what}: {m} x {k} @ {k} x {n} {A.dtype} on grid {grid.shape[0]}x{grid.shape[1]}, "
              f"{seconds:.3f} s, {_flops(m, n, k, A.dtype) / seconds / 1e9:.1f} GFLOP/s; wrote {out_path}:{out_name}")
    return 0


def _inputs(a, grid):
    """A, B (and C) from their files in the compute dtype, the shapes after op, alpha, beta. Collective."""
    from .distmatrix import DistMatrix

    (pa, na), (pb, nb) = split_spec(a.A, None), split_spec(a.B, None)
    A = DistMatrix.from_hdf5(pa, na, grid, dtype=a.dtype)
    B = DistMatrix.from_hdf5(pb, nb, grid, dtype=a.dtype)
    if A.dtype != B.dtype:  # e.g. float32 A and float64 B: compute in the wider type
        wide = np.promote_types(A.dtype, B.dtype)
        A = DistMatrix.from_hdf5(pa, na, grid, dtype=wide) if A.dtype != wide else A
        B = DistMatrix.from_hdf5(pb, nb, grid, dtype=wide) if B.dtype != wide else B
    m, k = A.gshape if a.transa == "N" else A.gshape[::-1]
    k2, n = B.gshape if a.transb == "N" else B.gshape[::-1]
    if k != k2:
        raise agreed(ValueError(f"inner dimensions differ: op({a.A}) is {m} x {k}, op({a.B}) is {k2} x {n}"))
    alpha, beta = _scalar(a.alpha), _scalar(a.beta)
    if A.dtype.kind != "c" and (isinstance(alpha, complex) or isinstance(beta, complex)):
        raise agreed(ValueError(f"--alpha/--beta: complex values for {A.dtype} matrices"))
    C = None
    if a.c_in:
        pc, nc = split_spec(a.c_in, None)
        C = DistMatrix.from_hdf5(pc, nc, grid, dtype=A.dtype)
        if C.gshape != (m, n):
            raise agreed(ValueError(f"--c-in {a.c_in} is {C.gshape[0]} x {C.gshape[1]}, op(A) op(B) is {m} x {n}"))
    return A, B, C, (m, k, n), alpha, beta


def input_datasets(specs, rank: int) -> list:
    """The ``hpcgpu._outputs.Input`` of every input, on rank 0 (who checks the output); none elsewhere.

    ``specs`` is ``[(what, "FILE[:DATASET]" or None)]``, ``what`` how messages name the input (``A``,
    ``--c-in``); a None spec is an input not given. An input without ``:DATASET`` names its file's only dataset
    (left out when it has several: reading it says so); one that is no file (a dangling symbolic link) is the
    whole of it, for the policy to name.
    """
    from .._outputs import Input

    if rank != 0:
        return []
    found = [(what, p, n or _only_dataset(p)) for what, (p, n) in
             ((w, split_spec(s, None)) for w, s in specs if s)]
    return [Input(p, what, n) for what, p, n in found if n or not os.path.exists(p)]


def provenance(operation: str, specs, **options) -> dict:
    """The attributes that say how an output dataset was made: the operation, its inputs, its options.

    Not collective; call it after the inputs were read (every rank then resolves them alike). ``operation``
    (``"solve"``) goes in attribute ``operation``; each input of ``specs`` (``[(what, "FILE[:DATASET]" or None)]``)
    in ``WHAT`` as given, ``WHAT_file`` (its absolute path) and ``WHAT_dataset`` (the dataset read: the file's
    only one where none was named), ``what``'s dashes dropped (``--c-in`` gives ``c_in``), an empty string for
    an input not given; each of ``options`` as itself (None as an empty string: HDF5 has no null attribute).
    :meth:`DistMatrix.to_hdf5` adds the grid, the number of ranks and hpcgpu's version.
    """
    attrs = {"operation": operation}
    for what, spec in specs:
        key = what.lstrip("-").replace("-", "_")
        path, name = split_spec(spec, None) if spec else ("", "")
        attrs[key] = spec or ""
        attrs[f"{key}_file"] = os.path.abspath(path) if path else ""
        attrs[f"{key}_dataset"] = (name or _only_dataset(path) or "") if path else ""
    attrs.update({k: "" if v is None else v for k, v in options.items()})
    return attrs


def stopped_before(stop, comm, prog: str, work: str, out: str) -> bool:
    """Whether a stop came before ``work`` began (every rank's answer; rank 0 says so). Collective.

    The safe point of a command that reads its inputs and then computes: a stop request (signal or
    stop file) on any rank before it means the command writes nothing and exits 3.
    """
    reasons = comm.allgather(stop.reason if stop.requested() else None)
    if any(reasons) and comm.rank == 0:  # the lowest rank's reason, the same words whichever rank was signalled
        print(f"{prog}: stopped ({next(r for r in reasons if r)}) before {work}; nothing written to {out}",
              flush=True)
    return any(reasons)


def _only_dataset(path: str) -> str | None:
    """The dataset an input ``FILE`` without ``:DATASET`` names: the file's only one (None when unknown)."""
    import h5py

    names = []
    if not os.path.isfile(path):  # a FIFO would block the open: reading it says what is wrong
        return None
    try:
        with h5py.File(path, "r") as f:
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    except OSError:
        return None  # the reading itself says what is wrong with it
    return names[0] if len(names) == 1 else None


def _algorithm(a) -> dict:
    """The matmul keywords of --algorithm, --replication and --memory-limit."""
    limit = None if a.memory_limit is None else int(a.memory_limit * 2**20)
    return dict(algorithm=a.algorithm, replication=a.replication, memory_limit=limit)


def _scalar(z: complex):
    """``--alpha``/``--beta`` as given: an int or float when real, else complex."""
    if z.imag:
        return z
    return int(z.real) if z.real == int(z.real) else z.real


def _flops(m, n, k, dtype) -> float:
    return (8.0 if np.dtype(dtype).kind == "c" else 2.0) * m * n * k


def _sync(rt) -> None:
    if rt.device == "gpu":
        from .. import _device

        _device.synchronize()


def _idle_wait(comm) -> None:
    """Wait for the others without spinning (MPICH's Barrier busy-polls a core)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.002)


def _bench(a, rt, grid, mem) -> int:
    from .distmatrix import DistMatrix
    from .summa import PHASES, matmul, panel_width, plan_panels

    N, dtype = a.bench, np.dtype(a.dtype or "float64")
    agree(_bench_memory_error(a, rt, grid), comm=rt.comm)
    A = DistMatrix.random((N, N), grid, dtype, seed=1)
    B = DistMatrix.random((N, N), grid, dtype, seed=2)
    algo = _algorithm(a)
    matmul(A, B, panel=a.panel, panel_memory=mem, math_mode=a.math_mode, **algo)  # warm-up: first touches
    best = float("inf")
    for _ in range(max(1, a.repeat)):
        rt.comm.Barrier()
        t0 = MPI.Wtime()
        matmul(A, B, panel=a.panel, panel_memory=mem, math_mode=a.math_mode, **algo)
        _sync(rt)
        best = min(best, rt.comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    # Where the time goes, per rank: one more run with the phases timed (CUDA events on a GPU).
    split, stats = {}, {}
    rt.comm.Barrier()
    matmul(A, B, panel=a.panel, panel_memory=mem, math_mode=a.math_mode, timings=split, stats=stats, **algo)
    splits = rt.comm.gather(split, root=0)
    comm_max = rt.comm.allreduce(stats["comm_bytes"], op=MPI.MAX)
    # The reference: one process (rank 0) multiplies the same global matrices
    # with all the threads the ranks had together; the others sleep.
    ref, threads = None, None
    rt.comm.Barrier()
    if rt.rank == 0:
        ref, threads = _local_gemm(rt, A, B, N, dtype, a.repeat)
    else:
        _idle_wait(rt.comm)
    if rt.rank == 0:
        _idle_wait(rt.comm)
    gflops = _flops(N, N, N, dtype) / best / 1e9
    if rt.rank == 0:
        w = a.panel or panel_width(N, N, N, grid.shape, dtype.itemsize, mem)
        widest = N if grid.size == 1 else max(p.width for p in plan_panels(N, grid, min(w, N)))
        res = dict(N=N, dtype=str(dtype), ranks=rt.size, grid=list(grid.shape), device=rt.device,
                   device_summary=rt.summary(), math_mode=a.math_mode, panel=widest,
                   seconds=best, gflops=gflops, local_gemm_seconds=ref,
                   local_gemm_gflops=_flops(N, N, N, dtype) / ref / 1e9, local_gemm_threads=threads,
                   ratio=ref / best, path=_path(rt), split=splits, comm_bytes_per_rank_max=comm_max,
                   phases={ph: [min(sp.get(ph, 0.0) for sp in splits), sum(sp.get(ph, 0.0) for sp in splits)
                                / len(splits), max(sp.get(ph, 0.0) for sp in splits)] for ph in PHASES},
                   algorithm=a.algorithm, replication=stats.get("replication", 1),
                   comm_bytes_rank0={k[11:]: v for k, v in stats.items() if k.startswith("comm_bytes_")})
        if a.json:
            print(json.dumps(res), flush=True)
        else:
            name = "SUMMA" if res["replication"] == 1 else f"2.5-D (c={res['replication']})"
            print(f"{name} N={N} {dtype} on {rt.size} rank(s), grid {grid.shape[0]}x{grid.shape[1]}, "
                  f"panel {res['panel']}: "
                  f"{best:.3f} s, {gflops:.1f} GFLOP/s\n"
                  f"local GEMM, 1 process, {threads} thread(s): {ref:.3f} s, {res['local_gemm_gflops']:.1f} GFLOP/s\n"
                  f"ratio (local GEMM time / SUMMA time): {res['ratio']:.3f}", flush=True)
            how = "; device phases by CUDA events" if rt.device == "gpu" else ""
            print(f"time split per rank ({res['path']} path; seconds of one run{how}):\n"
                  f"{'rank':>4} " + " ".join(f"{p:>8}" for p in PHASES), flush=True)
            for r, sp in enumerate(splits):
                print(f"{r:>4} " + " ".join(f"{sp.get(p, 0.0):>8.4f}" for p in PHASES), flush=True)
            for i, stat in enumerate(("min", "mean", "max")):
                print(f"{stat:>4} " + " ".join(f"{res['phases'][p][i]:>8.4f}" for p in PHASES), flush=True)
            print(f"comm_bytes_per_rank_max={comm_max}", flush=True)
    return 0


def _path(rt) -> str:
    """How SUMMA's panels travel: ``host``, ``nccl``, ``staged`` (pinned host copies) or ``cuda-aware``."""
    if rt.device == "cpu":
        return "host"
    if rt.collectives == "nccl":
        return "nccl"
    return "cuda-aware" if rt.cuda_aware and rt.nonblocking_device else "staged"


def _local_gemm(rt, A, B, N, dtype, repeat):
    """Time ``A @ B`` of the global matrices on rank 0 alone (GPU: its device)."""
    from .._gemm import is_half
    from .distmatrix import DistMatrix
    from .grid import ProcessGrid

    g1 = ProcessGrid((1, 1), comm=MPI.COMM_SELF)
    xp = rt.xp
    a = DistMatrix.random((N, N), g1, dtype, seed=1, xp=xp).local
    b = DistMatrix.random((N, N), g1, dtype, seed=2, xp=xp).local
    c = xp.empty_like(a)
    if rt.device == "cpu" and is_half(dtype):
        # NumPy has no half-precision GEMM (a loop, 100x slower): the host's best is float32 BLAS on the
        # widened inputs, rounded once, which is what SUMMA does there.
        def product():
            np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(dtype, copy=False)
    else:
        def product():
            xp.matmul(a, b, out=c)
    try:
        return time_alone(rt, product, repeat)
    finally:
        g1.free()


def time_alone(rt, call, repeat: int):
    """``(seconds, threads)``: the best time of ``call()`` on this rank alone, one warm-up then ``repeat`` runs.

    A one-process reference (rank 0's, while the others wait) runs with the ranks' BLAS threads together, at
    most the node's cores: not rank 0's own affinity, which a launcher that pins each rank (Intel MPI) narrows
    to one rank's share. ``threads`` is that number, or ``"gpu"`` on a device. Not collective.
    """
    threads, limits = "gpu", None
    if rt.device == "cpu":
        from threadpoolctl import threadpool_info, threadpool_limits

        per_rank = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=1)
        threads = min(per_rank * rt.size, os.cpu_count() or 1)
        limits = threadpool_limits(limits=threads, user_api="blas")
    try:
        call()
        _sync(rt)
        best = float("inf")
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            call()
            _sync(rt)
            best = min(best, time.perf_counter() - t0)
    finally:
        if limits is not None:
            limits.restore_original_limits()
    return best, threads
