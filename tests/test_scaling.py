"""The performance model: its fits recover known alpha, beta and T_comp from synthetic timings; the command
line runs end to end at 1 and 2 ranks and writes its plot."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import _mpi
from hpcgpu.scaling import collective_model, fit_collective_model, fit_line, model_table, predict_step


def test_fits_recover_alpha_and_beta():
    n = np.geomspace(256, 4e6, 9)
    rng = np.random.default_rng(0)
    t = (3e-6 + 2e-10 * n) * (1 + 0.01 * rng.standard_normal(n.size))
    a, b = fit_line(n, t)
    assert a == pytest.approx(3e-6, rel=0.05) and b == pytest.approx(2e-10, rel=0.05)
    P = np.repeat([2, 4, 8, 16], n.size)
    nn = np.tile(n, 4)
    t = collective_model(P, nn, 5e-6, 1e-10) * (1 + 0.01 * rng.standard_normal(P.size))
    a, b = fit_collective_model(P, nn, t)
    assert a == pytest.approx(5e-6, rel=0.05) and b == pytest.approx(1e-10, rel=0.05)
    assert collective_model([1], 1e6, 5e-6, 1e-10)[0] == 0.0


def test_model_table_recovers_t_comp_and_predicts_from_the_lines():
    t_comp, grad = 4e-3, 1e6
    runs = {1: {"step_seconds": t_comp, "phases_per_step": {"data": 1e-3, "compute": 3e-3, "comm": 0.0}}}
    micro = {}
    for P in (2, 4):
        pts = [(n, 2e-5 * P + 1e-9 * n) for n in (1e3, 1e4, 1e5, 1e6)]
        micro[P] = pts
        runs[P] = {"step_seconds": predict_step(t_comp, P, 2, 2e-5 * P, 1e-9, grad),
                   "phases_per_step": {}}
    m = model_table({"runs": runs, "micro": micro, "grad_bytes": grad}, units=2)
    assert m["t_comp"] == pytest.approx(t_comp)
    assert m["lines"][4] == pytest.approx((8e-5, 1e-9), rel=1e-6)
    assert [r["fitted"] for r in m["rows"]] == [True, False, False]
    assert [r["oversubscribed"] for r in m["rows"]] == [False, False, True]
    assert all(abs(r["error"]) < 1e-6 for r in m["rows"])
    runs[2]["step_seconds"] = 3e-3 + 2e-5 * 2 + 1e-9 * grad  # the compute step measured at 2 ranks: 3 ms
    m = model_table({"runs": runs, "micro": micro, "grad_bytes": grad, "compute": {2: 3e-3}}, units=2)
    assert abs(m["rows"][1]["error"]) < 1e-9 and m["rows"][1]["t_comp_s"] == 3e-3
    assert predict_step(t_comp, 4, 2, 0.0, 0.0, grad) == t_comp / 2  # 4 ranks on 2 units compute as 2


@pytest.mark.mpi
def test_command_line_at_1_and_2_ranks(tmp_path):
    pytest.importorskip("matplotlib")
    p = subprocess.run([sys.executable, "-m", "hpcgpu.scaling", "--ranks", "1,2", "--epochs", "2", "--repeat", "3",
                        "--sizes", "4", "-o", str(tmp_path)], capture_output=True, text=True, timeout=300,
                       env=_mpi.environment())
    assert p.returncode == 0, p.stderr
    assert "fitted" in p.stdout and os.path.getsize(tmp_path / "scaling-model.png") > 10_000
    m = json.load(open(tmp_path / "scaling-model.json"))
    assert [r["P"] for r in m["rows"]] == [1, 2] and m["t_comp"] > 0 and m["grad_bytes"] > 0
    assert (tmp_path / "train-P2.h5").exists()
