"""Host BLAS threads per GEMM: a rank's threads where they pay, one thread where they do not.

A rank on the CPU runs its BLAS on its share of the cores (``hpcgpu.init``).
Most of the trainer's GEMMs gain from those threads, but not all: with a
small local batch (many ranks, or a small global batch) a layer's GEMM is a
few rows by a wide matrix, and waking and joining a second thread costs more
than it saves (measured here, OpenBLAS 0.3.31, 2 cores: 4 x 1024 by
1024 x 1024 ran at 0.72 of one thread's speed on two; 256 x 10 by 10 x 256
at 0.70). OpenBLAS's own rule runs only GEMMs below ``m n k = 262144`` on
one thread, whatever the machine.

So the trainer times each GEMM of its step, at its own shapes, on the
machine it runs on, at one thread and at the rank's ``t``, every rank at
once (the contention of a real step), sums the times over the ranks and
picks ``t`` threads for a GEMM where they are at least ``1 / MARGIN`` times
faster. A GEMM timed alone does not see its neighbours (OpenBLAS's workers
spin for a while after a call, and a shared machine is noisy), so whole
forward and backward passes are then timed with that choice, with every
GEMM on one thread and with every GEMM on ``t``, and the fastest wins: the
step is never slower than on one thread by more than the timing's noise.
The decision is the same on every rank.

The choice changes results: OpenBLAS's single-precision GEMM gives other
bits on one thread than on two (measured; double precision agreed). A
checkpoint therefore stores the plan and a resumed run reuses it, so
resuming stays bitwise exact; ``--gemm-threads all`` skips the timing and
runs every GEMM on ``t`` threads, for fresh runs that must agree bit for
bit with each other (and a checkpoint without a plan is resumed that way).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
from mpi4py import MPI

from .. import _blas
from ..errors import agree

__all__ = ["MARGIN", "GemmPlan", "plan_gemm_threads", "time_gemms", "time_steps"]

MARGIN = 0.9
"""A GEMM keeps t threads when its time on t is at most MARGIN times its time on one."""


@dataclasses.dataclass
class GemmPlan:
    """Which of a model's GEMMs run on the rank's BLAS threads.

    Attributes
    ----------
    blas_threads : int
        Rank 0's host BLAS threads ``t`` when the plan was made.
    threaded : dict of str to bool
        Per GEMM key of :meth:`hpcgpu.nn.Network.gemm_shapes`: True
        runs it on the rank's ``t`` threads, False on one.
    speedup : dict of str to float
        Time on one thread over time on ``t``, summed over the ranks, as
        timed (empty when not timed).
    step_seconds : dict of str to float
        Seconds of a forward and backward pass (mean over the ranks) with
        every GEMM on one thread (``"one"``), with the choice per GEMM
        (``"per GEMM"``), with every GEMM on ``t`` (``"all"``); the fastest
        made :attr:`threaded`. Empty when not timed.
    source : str
        ``"timed"``, or ``"checkpoint PATH"`` when a resumed run reuses it.
    """

    blas_threads: int
    threaded: dict
    speedup: dict = dataclasses.field(default_factory=dict)
    step_seconds: dict = dataclasses.field(default_factory=dict)
    source: str = "timed"

    def counts(self, threads: int) -> dict:
        """Threads per GEMM key, for the model's ``gemm_threads``. Not collective.

        Parameters
        ----------
        threads : int
            This rank's BLAS threads: a threaded GEMM gets them, the others one.

        Returns
        -------
        dict of str to int
        """
        return {k: threads if on else 1 for k, on in self.threaded.items()}

    def summary(self) -> str:
        """One phrase for the trainer's first line, e.g. ``7/8 GEMMs on 2 threads (timed)``."""
        on = sum(self.threaded.values())
        how = self.source
        if self.step_seconds:
            won = next(n for n, v in self.step_seconds.items() if v == min(self.step_seconds.values()))
            one = self.step_seconds.get("one")
            how += f": step {1e3 * self.step_seconds[won]:.2f} ms" + (
                f" against {1e3 * one:.2f} ms on one thread" if one is not None and won != "one" else "")
        return f"{on}/{len(self.threaded)} GEMMs on {self.blas_threads} threads ({how})"

    def describe(self) -> str:
        """Every GEMM's choice and speed-up, and the step times, one per line (``info``)."""
        rows = []
        for k, on in self.threaded.items():
            s = self.speedup.get(k)
            gain = f"  alone {s:.2f}x faster on {self.blas_threads}" if s is not None else ""
            rows.append(f"  {k:<16} {self.blas_threads if on else 1} thread(s){gain}")
        if self.step_seconds:
            rows.append("  step (forward + backward): " + ", ".join(
                f"{n} {1e3 * v:.3f} ms" for n, v in self.step_seconds.items()))
        return "\n".join(rows)

    def to_json(self) -> str:
        """The plan as JSON: stored in checkpoints and outputs (attribute ``gemm_threads``)."""
        return json.dumps(dict(blas_threads=self.blas_threads, threaded=self.threaded,
                               speedup={k: round(v, 4) for k, v in self.speedup.items()},
                               step_seconds={k: round(v, 7) for k, v in self.step_seconds.items()},
                               source=self.source))

    @classmethod
    def from_json(cls, text: str) -> "GemmPlan":
        """The plan written by :meth:`to_json`.

        Parameters
        ----------
        text : str
            JSON, as stored in a checkpoint's or output's ``gemm_threads`` attribute.

        Returns
        -------
        GemmPlan

        Raises
        ------
        ValueError
            ``text`` is not such a plan.
        """
        try:
            d = json.loads(text)
            return cls(int(d["blas_threads"]), {str(k): bool(v) for k, v in d["threaded"].items()},
                       {str(k): float(v) for k, v in d.get("speedup", {}).items()},
                       {str(k): float(v) for k, v in d.get("step_seconds", {}).items()},
                       str(d.get("source", "timed")))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a GEMM thread plan ({e})") from None


def _operands(shape, trans_a, trans_b, dtype, rng):
    m, k, n = shape
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    return (a.T if trans_a else a), (b.T if trans_b else b), np.empty((m, n), dtype)


def _interleaved(fn, setups, comm: MPI.Intracomm, seconds: float, timer) -> list[float]:
    """Seconds per call of ``fn`` after each of ``setups``: alternating rounds, the fastest kept. Collective."""
    for setup in setups:  # warm: pools started, pages touched
        setup()
        fn()
    t0 = timer()
    fn()
    once = max(timer() - t0, 1e-7)
    reps = comm.allreduce(max(1, min(1000, math.ceil(seconds / once))), op=MPI.MIN)
    rounds = comm.allreduce(7 if once < 0.01 else 2, op=MPI.MIN)
    best = [math.inf] * len(setups)
    for _ in range(rounds):
        for i, setup in enumerate(setups):
            setup()
            comm.Barrier()  # every rank measures the same setting at the same time
            t0 = timer()
            for _ in range(reps):
                fn()
            best[i] = min(best[i], (timer() - t0) / reps)
    return best


def time_gemms(gemms, dtype, threads: int, comm: MPI.Intracomm, seconds: float = 0.002,
               timer=time.perf_counter) -> np.ndarray:
    """Seconds per call of each GEMM on this rank, on one thread and on ``threads``. Collective.

    Every rank times its own GEMMs at the same moment (a Barrier before each
    measurement), so the times include the contention of a real step.
    Operands are random, of ``dtype``, laid out as ``gemms`` says; the two
    settings are measured in alternating rounds (7, or 2 for GEMMs of 10 ms
    and more) and the fastest round of each is kept (a shared machine loses
    CPU time in bursts). The BLAS is left on ``threads`` threads.

    Parameters
    ----------
    gemms : list of (key, (m, k, n), trans_a, trans_b)
        As :meth:`hpcgpu.nn.Network.gemm_shapes` returns; the same
        number of GEMMs on every rank (shapes may differ).
    dtype : numpy.dtype
    threads : int
        This rank's BLAS threads (at most its limit).
    comm : MPI.Intracomm
    seconds : float
        Shortest time of one measurement (s): fast GEMMs are repeated.
    timer : callable
        Clock in seconds (tests replace it).

    Returns
    -------
    numpy.ndarray, shape (len(gemms), 2), float64
        Seconds per call: column 0 on one thread, column 1 on ``threads``.

    Raises
    ------
    MemoryError
        A GEMM's operands cannot be allocated on some rank (every rank
        raises, naming the GEMM).
    """
    rng = np.random.default_rng(0)
    out = np.zeros((len(gemms), 2))
    try:
        for j, (key, shape, ta, tb) in enumerate(gemms):
            err = None
            try:
                a, b, c = _operands(shape, ta, tb, dtype, rng)
            except (MemoryError, ValueError) as e:
                err = MemoryError(f"timing the GEMM {key} {shape}: {e}")
            agree(err, comm=comm)  # before any rank waits in a Barrier
            out[j] = _interleaved(lambda a=a, b=b, c=c: np.matmul(a, b, out=c),
                                  [lambda: _blas.set_threads(1), lambda: _blas.set_threads(threads)],
                                  comm, seconds, timer)
    finally:
        _blas.set_threads(threads)
    return out


def time_steps(model, local_batch: int, candidates, comm: MPI.Intracomm, seconds: float = 0.01,
               timer=time.perf_counter) -> np.ndarray:
    """Seconds per forward and backward pass of ``model`` under each GEMM thread choice. Collective.

    Times :meth:`~hpcgpu.nn.Network.loss_and_grad` on a random local
    batch (no communication, no update), the candidates in alternating
    rounds, every rank at once; the fastest round of each is kept.
    ``model.grad`` and ``model.stats`` are left overwritten, ``model.params`` untouched.

    Parameters
    ----------
    model : hpcgpu.nn.Network
        On NumPy.
    local_batch : int
        Rows of the batch on this rank.
    candidates : list of dict
        Values for ``model.gemm_threads`` (threads per GEMM key), the same
        number on every rank.
    comm : MPI.Intracomm
    seconds, timer
        As for :func:`time_gemms`.

    Returns
    -------
    numpy.ndarray, shape (len(candidates),), float64
        Seconds per step on this rank.

    Raises
    ------
    MemoryError
        The batch cannot be allocated on some rank (every rank raises).
    """
    rng = np.random.default_rng(1)
    err = None
    try:
        X = rng.standard_normal((local_batch, model.sizes[0])).astype(model.dtype)
        if model.task == "classification":
            y = rng.integers(0, model.sizes[-1], local_batch)
        else:
            y = rng.standard_normal((local_batch, model.sizes[-1])).astype(model.dtype)
    except (MemoryError, ValueError) as e:
        err = MemoryError(f"timing the step at local batch {local_batch}: {e}")
    agree(err, comm=comm)
    before = model.gemm_threads
    try:
        with np.errstate(all="ignore"):
            best = _interleaved(lambda: model.loss_and_grad(X, y),
                                [lambda c=c: setattr(model, "gemm_threads", c) for c in candidates],
                                comm, seconds, timer)
    finally:
        model.gemm_threads = before
    return np.asarray(best)


def plan_gemm_threads(model, local_batch: int, comm: MPI.Intracomm, margin: float = MARGIN) -> GemmPlan | None:
    """Choose, for each GEMM of ``model``'s step, one thread or the rank's ``t``, by timing. Collective.

    First each GEMM alone (:func:`time_gemms`, times summed over the
    ranks): ``t`` threads where they are at least ``1 / margin`` times
    faster than one. Then whole steps (:func:`time_steps`) with that choice,
    with every GEMM on one thread and with every GEMM on ``t``: the fastest
    of the three wins (ties go to fewer threads), so the step is never
    slower than on one thread by more than the timing's noise. Timing
    adds about 0.3 s (small models) to a few seconds (GEMMs of 0.1 s).

    Parameters
    ----------
    model : hpcgpu.nn.Network
        On NumPy (a model on a GPU gets ``None``).
    local_batch : int
        This rank's samples per step.
    comm : MPI.Intracomm
    margin : float
        See above.

    Returns
    -------
    GemmPlan or None
        ``None`` when no rank has more than one BLAS thread (nothing to
        decide), or the model is not on the host; else the same plan on
        every rank, ``source="timed"``.

    Raises
    ------
    MemoryError
        Operands cannot be allocated on some rank (every rank raises).
    """
    mine = (_blas.threads() or 1) if model.xp is np else 0
    if comm.allreduce(mine, op=MPI.MAX) <= 1 or comm.allreduce(mine, op=MPI.MIN) == 0:
        return None
    gemms = model.gemm_shapes(local_batch)
    keys = [g[0] for g in gemms]
    times = time_gemms(gemms, model.dtype, mine, comm)
    comm.Allreduce(MPI.IN_PLACE, times, op=MPI.SUM)
    speedup = {k: float(times[j, 0] / times[j, 1]) if times[j, 1] > 0 else 1.0 for j, k in enumerate(keys)}
    per_gemm = {k: bool(times[j, 1] <= margin * times[j, 0]) for j, k in enumerate(keys)}
    choices = {"one": dict.fromkeys(keys, False), "per GEMM": per_gemm, "all": dict.fromkeys(keys, True)}
    names = [n for i, n in enumerate(choices) if choices[n] not in list(choices.values())[:i]]  # distinct, in order
    steps = time_steps(model, local_batch, [{k: mine if on else 1 for k, on in choices[n].items()} for n in names],
                       comm)
    comm.Allreduce(MPI.IN_PLACE, steps, op=MPI.SUM)
    steps /= comm.size
    winner = names[int(np.argmin(steps))]  # the first of equal minima: the fewest threads
    return GemmPlan(comm.bcast(mine, root=0), choices[winner], speedup,
                    {n: float(steps[i]) for i, n in enumerate(names)}, "timed")
