"""Agreed inputs: a collective's arguments that differ across the ranks are one agreed line on every rank.

A table of rows (case, expected line), run by ``tests/mpi/agreed_inputs.py``: all rows of one table in one launch
(a launch is slow here), each case catching its error and writing its line, checked on EVERY rank's file. The last
rank is the one given another value; ``{others}`` and ``{last}`` are the ranks' words at the launch's size. No
stall timeout is set for these: the agreement ends what used to hang (a matmul of matrices of other shapes, a
Trainer with other epochs). The watchdog's own rows set ``HPCGPU_STALL_TIMEOUT`` small.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import _mpi
from hpcgpu.errors import AgreedError, _digest, _normal, _refusal, agree_inputs

TRAINER = {
    "sgd_lr": "ValueError agreed: Trainer: optimizer.lr differs across ranks: 0.1 on {others}, 0.5 on {last}",
    "sgd_or_adam": "ValueError agreed: Trainer: optimizer differs across ranks: {{lr: 0.1, momentum: 0.0, "
                   "name: 'sgd', nesterov: False, weight_decay: 0.0}} on {others}, {{betas: [0.9, 0.999], "
                   "eps: 1e-08, lr: 0.001, name: 'adam', weight_decay: 0.0}} on {last}",
    "batch_size": "ValueError agreed: Trainer: batch_size differs across ranks: 12 on {others}, 13 on {last}",
    "epochs": "ValueError agreed: Trainer: epochs differs across ranks: 2 on {others}, 3 on {last}",
    "negative_lr": "ValueError agreed: Trainer: lr differs across ranks: 0.1 on {others}, -0.1 on {last}",
    "dense_width": "ValueError agreed: Trainer: model differs across ranks: Sequential(Dense(4, 8, "
                   "activation='relu'), Dense(8, 2)) on {others}, Sequential(Dense(4, 9, activation='relu'), "
                   "Dense(9, 2)) on {last}",
    "loss": "ValueError agreed: Trainer: loss differs across ranks: SoftmaxCrossEntropy() on {others}, "
            "Huber(delta=1.0) on {last}",
    "own_model_width": "ValueError agreed: Trainer: model OpaqueLinear's parameter count differs across ranks: 4 "
                       "on {others}, 8 on {last}",
    "own_model_rank": "ok",  # a model of one's own is agreed by its class and parameter count, not its attributes
    "batch_size_str": "TypeError agreed: batch_size must be an integer, got '12'",
    "epochs_float": "TypeError agreed: epochs must be an integer, got 2.5",
    "lr_str": "TypeError agreed: lr must be a number, got '0.1'",
    "sgd_lr_str": "TypeError agreed: lr must be a positive number, got '0.1'",
    "adam_betas": "TypeError agreed: betas must be a pair of numbers in [0, 1), got 0.9",
    "own_runtime": "ok",
    "fit_epochs": "ValueError agreed: fit: epochs differs across ranks: 2 on {others}, 3 on {last}",
    "fit_rows": "ValueError agreed: fit: data differs across ranks: (ndarray of shape (60, 4) and dtype float64, "
                "ndarray of shape (60,) and dtype int64) on {others}, (ndarray of shape (59, 4) and dtype float64, "
                "ndarray of shape (59,) and dtype int64) on {last}",
    "fit_keras": "TypeError agreed: fit: no argument verbose (Keras's; here Trainer(progress=\"bar\" | \"lines\" | "
                 "\"none\"))",
    "evaluate_rows": "ValueError agreed: evaluate: data differs across ranks: (ndarray of shape (60, 4) and dtype "
                     "float64, ndarray of shape (60,) and dtype int64) on {others}, (ndarray of shape (30, 4) and "
                     "dtype float64, ndarray of shape (30,) and dtype int64) on {last}",
    "predict_root": "ValueError agreed: predict: root differs across ranks: 0 on {others}, {P1} on {last}",
    "fit_ok": "ok",
    "own_refusal": "ValueError agreed: check: refused by rank 1",
}

MATRICES = {
    "grid_dims": "ValueError agreed: ProcessGrid: dims differs across ranks: ({P}, 1) on {others}, (1, {P}) on "
                 "{last}",
    "random_shape": "ValueError agreed: random: gshape differs across ranks: (8, 8) on {others}, (9, 8) on {last}",
    "zeros_dtype": "ValueError agreed: zeros: dtype differs across ranks: 'float64' on {others}, 'float32' on "
                   "{last}",
    "from_global_root": "ValueError agreed: from_global: root differs across ranks: 0 on {others}, {P1} on {last}",
    "from_global_bad_root": "ValueError agreed: from_global: root differs across ranks: 0 on {others}, 9 on "
                            "{last}",
    "zeros_grid_type": "ValueError agreed: zeros: grid differs across ranks: None on {others}, 'x' on {last}",
    "random_grid_type": "TypeError agreed: random: grid must be a ProcessGrid, got str",
    "redistribute_type": "ValueError agreed: redistribute: grid differs across ranks: ProcessGrid of shape (1, {P}) "
                         "on {others}, 'x' on {last}",
    "matmul_transb": "ValueError agreed: matmul: transb differs across ranks: 'N' on {others}, 'T' on {last}",
    "matmul_alpha": "ValueError agreed: matmul: alpha differs across ranks: 1.0 on {others}, 2.0 on {last}",
    "matmul_ok": "ok",
    "map_retries": "ValueError agreed: map: retries differs across ranks: 0 on {others}, 1 on {last}",
}


def _words(nprocs: int) -> dict:
    others = "rank 0" if nprocs == 2 else f"ranks 0-{nprocs - 2}"
    return dict(others=others, last=f"rank {nprocs - 1}", P=nprocs, P1=nprocs - 1)


def _launch(tmp_path, nprocs: int, table: dict, env=None, timeout: float = 300):
    p = _mpi.run(nprocs, [f"{_mpi.SCRIPTS}/agreed_inputs.py", str(tmp_path), *table], timeout=timeout, env=env)
    return p


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([2, 3], [3]))
@pytest.mark.parametrize("table", [TRAINER, MATRICES], ids=["trainer", "matrices"])
def test_a_difference_is_one_agreed_line_on_every_rank(tmp_path, nprocs, table):
    p = _launch(tmp_path, nprocs, table)
    assert p.returncode == 0, p.stderr
    words = _words(nprocs)
    want = [f"{case}: {line.format(**words)}" for case, line in table.items()]
    for rank, got in enumerate(_mpi.rank_lines(tmp_path, nprocs)):
        assert got == want, f"rank {rank}"


@pytest.mark.mpi
@pytest.mark.parametrize(("case", "where"), [
    ("stall_trainer", r"Trainer's agreement of its arguments"),
    ("stall_summa", r"SUMMA panel broadcast \(panel \d+ of \d+\)"),
])
def test_a_rank_that_never_arrives_ends_the_job_in_one_line(tmp_path, case, where):
    """The last rank sleeps where the others wait: the watchdog (on by default; here 3 s) names a waiting rank."""
    p = _launch(tmp_path, 3, [case], env={"HPCGPU_STALL_TIMEOUT": "3"}, timeout=240)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("hpcgpu: ")]
    assert lines and all(re.fullmatch(rf"hpcgpu: stall: rank [01] waited \d+ s in {where}; aborting the job", ln)
                         for ln in lines), p.stderr


def test_the_watchdog_is_on_by_default_and_0_turns_it_off(monkeypatch):
    from hpcgpu import watchdog

    monkeypatch.delenv("HPCGPU_STALL_TIMEOUT", raising=False)
    assert watchdog.stall_timeout() == watchdog.DEFAULT_STALL_TIMEOUT == 600
    monkeypatch.setenv("HPCGPU_STALL_TIMEOUT", "0")
    assert watchdog.stall_timeout() == 0
    assert not watchdog.Watchdog(None).on
    assert watchdog.stall_timeout(5) == 5


def test_a_wait_longer_than_the_timeout_is_reported_by_the_process_watchdog():
    """The process's own watchdog (no communicator) names this rank and the wait; its thread starts at the first
    wait and ends at close."""
    import threading

    from hpcgpu.watchdog import Watchdog

    said = []
    done = threading.Event()
    wd = Watchdog(None, 0.2, abort=lambda msg: (said.append(msg), done.set()))
    assert wd._thread is None  # nothing runs until a wait
    with wd.watch("test Allreduce", "step 3"):
        assert done.wait(60)
    wd.close()
    assert len(said) == 1 and re.fullmatch(
        r"hpcgpu: stall: rank 0 waited \d+ s in test Allreduce \(step 3\); aborting the job", said[0]), said


class _Comm:
    """One rank's communicator over a fixed table of what each rank was given (``(args, error)`` a rank): each
    collective returns what the table's ranks would send in it, this rank's own part from the call."""

    def __init__(self, rank: int, given: list):
        self.rank, self.given = rank, given
        self.calls = 0

    def Get_size(self):  # noqa: N802 - MPI's name
        return len(self.given)

    def Get_rank(self):  # noqa: N802 - MPI's name
        return self.rank

    def Allreduce(self, sendbuf, recvbuf, op):  # noqa: N802 - MPI's name; in place: recvbuf holds this rank's part
        self.calls += 1
        rows = [np.array([_digest(_normal(a)), -_digest(_normal(a)), -(len(self.given) if e is None else r)])
                for r, (a, e) in enumerate(self.given)]
        rows[self.rank] = recvbuf.copy()
        recvbuf[:] = np.max(rows, axis=0)

    def allgather(self, value):
        self.calls += 1
        return [value if r == self.rank else _normal(a) for r, (a, _) in enumerate(self.given)]

    def bcast(self, value, root):
        self.calls += 1
        return value if root == self.rank else _refusal(self.given[root][1])


def test_one_collective_when_the_arguments_agree_and_two_when_they_differ_or_a_rank_refused():
    comm = _Comm(1, [({"lr": 0.1, "x": np.zeros((3, 2))}, None)] * 3)
    agree_inputs("T", {"lr": 0.1, "x": np.ones((3, 2))}, comm=comm)  # contents are not compared, shapes are
    assert comm.calls == 1
    comm = _Comm(0, [({"lr": lr}, None) for lr in (0.1, 0.1, 0.5, 0.1, 0.5)])
    with pytest.raises(ValueError, match=r"^T: lr differs across ranks: 0\.1 on ranks 0-1, 3, 0\.5 on ranks 2, 4$"):
        agree_inputs("T", {"lr": 0.1}, comm=comm)
    assert comm.calls == 2
    comm = _Comm(0, [({"lr": 0.1}, None), ({"lr": 0.1}, TypeError("x must be an integer, got '1'"))] * 2)
    with pytest.raises(TypeError, match=r"^x must be an integer, got '1'$"):  # rank 1's, the lowest that refused
        agree_inputs("T", {"lr": 0.1}, comm=comm)
    assert comm.calls == 2


def test_a_difference_wins_over_a_refusal_and_a_refusal_is_agreed():
    given = [({"lr": 0.1}, None), ({"lr": -0.1}, ValueError("lr must be a positive number, got -0.1"))]
    with pytest.raises(ValueError, match=r"^T: lr differs across ranks: 0\.1 on rank 0, -0\.1 on rank 1$") as e:
        agree_inputs("T", {"lr": 0.1}, comm=_Comm(0, given))
    assert isinstance(e.value, AgreedError)
    given = [({"lr": 0.1}, None), ({"lr": 0.1}, TypeError("x must be an integer, got '1'"))]
    with pytest.raises(TypeError, match=r"^x must be an integer, got '1'$") as e:
        agree_inputs("T", {"lr": 0.1}, comm=_Comm(0, given))
    assert isinstance(e.value, AgreedError)
    err = TypeError("x must be an integer, got '1'")  # the refusing rank raises its own, agreed, from it
    with pytest.raises(TypeError, match=r"^x must be an integer, got '1'$") as e:
        agree_inputs("T", {"lr": 0.1}, comm=_Comm(1, [({"lr": 0.1}, None), ({"lr": 0.1}, err)]), error=err)
    assert isinstance(e.value, AgreedError) and e.value.__cause__ is err


def test_a_nested_difference_is_named_by_its_path():
    given = [({"optimizer": {"name": "sgd", "lr": lr}}, None) for lr in (0.1, 0.2)]
    with pytest.raises(ValueError, match=r"^T: optimizer\.lr differs across ranks: 0\.1 on rank 0, 0\.2 on rank 1$"):
        agree_inputs("T", {"optimizer": {"name": "sgd", "lr": 0.1}}, comm=_Comm(0, given))


def test_normal_forms_are_the_same_for_the_same_arguments_on_two_ranks():
    class Plain:  # object.__repr__ holds an address: another on every rank
        pass

    def f():
        pass

    assert _normal(Plain()) == _normal(Plain()) == {"class": f"{__name__}.test_normal_forms_are_the_same_for_the_"
                                                    "same_arguments_on_two_ranks.<locals>.Plain"}
    assert _normal(f) == f"{__name__}.test_normal_forms_are_the_same_for_the_same_arguments_on_two_ranks.<locals>.f"
    assert _normal(np.float32(0.5)) == _normal(0.5) == "0.5"
    assert _normal(np.int64(3)) == _normal(3) == "3"
    assert _normal(True) != _normal(1)
    assert _normal(np.bool_(True)) == _normal(True)
    assert _normal({"b": 1, "a": 2}) == _normal({"a": 2, "b": 1})
    assert _normal({"b", "a"}) == ["set", "'a'", "'b'"]  # not in the order of this process's string hashes
    assert _normal(list(range(1000))) == _normal(list(range(1000)))
    assert _normal(list(range(1000))).startswith("list of 1000, first 0, digest ")
    assert _normal(np.zeros((2, 3), np.float32)) == "ndarray of shape (2, 3) and dtype float32"


LATE = "TypeError agreed: Torch: Late returned a tuple, not a tensor: its forward must return the outputs as one " \
       "tensor, (n, k) or (n,) (at step {step}, rank {P1})"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([2, 3], [3]))
def test_a_later_contract_error_is_agreed_when_the_reduction_overlaps_the_backward_pass(tmp_path, nprocs):
    """The broken rank posts the buckets its backward pass did not, so the reduction (and the agreement after it)
    completes on every rank: with several buckets, and with gradient accumulation breaking at either micro-batch.
    The stall timeout ends a launch where a rank waits for buckets that never come."""
    cases = {"late_contract_buckets": 6, "late_contract_accumulated_9": 3, "late_contract_accumulated_10": 4}
    p = _launch(tmp_path, nprocs, list(cases), env={"HPCGPU_STALL_TIMEOUT": "60"})
    assert p.returncode == 0, p.stderr
    want = [f"{case}: {LATE.format(step=step, **_words(nprocs))}" for case, step in cases.items()]
    for rank, got in enumerate(_mpi.rank_lines(tmp_path, nprocs)):
        assert got == want, f"rank {rank}"


def test_normal_forms_differ_where_the_arguments_do():
    """Every part of an argument counts: a partial's arguments, a generator's seed, an object's attributes, a long
    list's every item, a key's type; and a dataclass's NumPy float is its float."""
    import dataclasses
    import functools

    from hpcgpu.errors import _flat

    def f(x, a):
        return x

    class Opt:
        def __init__(self, lr):
            self.lr = lr

    @dataclasses.dataclass
    class Cfg:
        opt: object
        lr: float

    differ = [(functools.partial(f, a=1), functools.partial(f, a=2)),
              (functools.partial(f, 1), functools.partial(f, 2)),
              (np.random.default_rng(1), np.random.default_rng(2)), (Opt(0.1), Opt(0.5)),
              (Cfg(Opt(1), 0.1), Cfg(Opt(2), 0.1)), (list(range(20)), [*range(19), 99]), ({1: "a"}, {"1": "a"})]
    for a, b in differ:
        assert _flat(_normal(a)) != _flat(_normal(b)), (a, b)
    same = [(functools.partial(f, a=1), functools.partial(f, a=1)),
            (np.random.default_rng(1), np.random.default_rng(1)), (Opt(0.1), Opt(0.1)),
            (Cfg(None, np.float64(0.1)), Cfg(None, 0.1)), (list(range(20)), list(range(20)))]
    for a, b in same:
        assert _flat(_normal(a)) == _flat(_normal(b)), (a, b)
    assert _flat(_normal(Opt(0.5))) == f"{{class: {__name__}.test_normal_forms_differ_where_the_arguments_do." \
        "<locals>.Opt, lr: 0.5}"


def test_an_entry_agreement_is_watched_only_under_an_explicit_timeout(monkeypatch):
    """The wait at a collective's first agreement is the other ranks' own code before their call: the default
    timeout does not watch it, HPCGPU_STALL_TIMEOUT does."""
    import contextlib

    from hpcgpu import watchdog

    seen = []

    class Spy:  # the process's own watchdog: records what it is asked to watch
        def watch(self, name, detail=""):
            seen.append(name)
            return contextlib.nullcontext()

    monkeypatch.setattr(watchdog, "_OWN", Spy())
    monkeypatch.delenv("HPCGPU_STALL_TIMEOUT", raising=False)
    agree_inputs("T", {"lr": 0.1}, comm=_Comm(0, [({"lr": 0.1}, None)] * 2))
    assert seen == []
    monkeypatch.setenv("HPCGPU_STALL_TIMEOUT", "5")
    agree_inputs("T", {"lr": 0.1}, comm=_Comm(0, [({"lr": 0.1}, None)] * 2))
    assert seen == ["T's agreement of its arguments"]
