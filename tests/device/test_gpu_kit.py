"""The GPU kit's Allreduce benchmark (benchmarks/gpu/allreduce.py) and its collector, on the CuPy stand-in.

The stand-in's times are those of host memory and files, not of a GPU: the
tests check what was measured and over which path, never how fast.
"""

import csv
import json
import os
import subprocess
import sys

import pytest

import _mpi

from _standin_env import ROOT, run_standin

KIT = os.path.join(ROOT, "benchmarks", "gpu")
SCRIPT = os.path.join(KIT, "allreduce.py")
TINY = ["--min-bytes", "1024", "--max-bytes", "65536", "--warmup", "1", "--iters", "3", "--batch", "2"]
SIZES = [1024 << i for i in range(7)]  # 1 KiB .. 64 KiB, each twice the last


def _bench(nprocs, tmp_path, env, *extra):
    out = tmp_path / f"allreduce-r{nprocs}.json"
    p = run_standin(nprocs, [SCRIPT, "--device", "gpu", *TINY, *extra, "--json", str(out)], env=env, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr == "", p.stderr
    return json.loads(out.read_text()), p.stdout


def _check_rows(entry, nprocs):
    assert entry["status"] == "ok", entry
    assert [r["bytes"] for r in entry["rows"]] == SIZES
    for r in entry["rows"]:
        assert r["count"] * 4 == r["bytes"]
        assert 0 < r["min_us"] <= r["time_us"] <= r["max_us"], r
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_us"] / 1e3)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (nprocs - 1) / nprocs)
        assert r["wrong"] == 0, r


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", _mpi.cases([1, 2], [2]))  # the benchmark's subject is not the MPI
def test_allreduce_benchmark_times_nccl_and_staged_at_every_size(nprocs, tmp_path):
    """A stand-in GPU per rank: both paths at every size, NCCL really over NCCL, staging really staged."""
    res, out = _bench(nprocs, tmp_path, {"HPCGPU_STANDIN_DEVICES": str(nprocs)})
    assert (res["ranks"], res["sizes"], res["standin"]) == (nprocs, SIZES, True)
    assert res["busbw_factor"] == 2 * (nprocs - 1) / nprocs
    paths = res["paths"]
    assert list(paths) == ["nccl", "staged", "aware"]
    for name in ("nccl", "staged"):
        _check_rows(paths[name], nprocs)
    nccl, staged = paths["nccl"], paths["staged"]
    assert (nccl["runtime"]["collectives"], nccl["runtime"]["device_path"]) == ("nccl", "nccl")
    assert (staged["runtime"]["collectives"], staged["runtime"]["device_path"]) == ("mpi", "staged")
    # NCCL: a NCCL communicator of the job's ranks was made, and nothing went through pinned host memory;
    # staged: no NCCL communicator, and the staging slot grew to the largest buffer.
    assert nccl["evidence"] == {"nccl_communicator_ranks": nprocs, "staging_bytes": 0}
    assert staged["evidence"]["nccl_communicator_ranks"] is None
    assert staged["evidence"]["staging_bytes"] >= SIZES[-1]
    if nprocs == 1:
        assert "_nccl.issue" in nccl["how"] and "to_host" in staged["how"]
        assert all(r["busbw_gbps"] == 0 for r in nccl["rows"] + staged["rows"])
        assert "busbw is 0" in out
    else:
        assert nccl["how"].startswith("hpcgpu.comm.Allreduce(a)") and "cuda_aware=False" in staged["how"]
    assert paths["aware"] == {"status": "skipped", "why": paths["aware"]["why"], "rows": []}
    assert "not CUDA-aware" in paths["aware"]["why"]
    table = [ln for ln in out.splitlines() if "KiB" in ln and ln.rstrip().endswith("| 0")]
    assert len(table) == len(SIZES), out


@pytest.mark.mpi
def test_allreduce_benchmark_runs_cuda_aware_mpi_only_where_mpi_is_and_skips_nccl_on_a_shared_gpu(tmp_path):
    """Two ranks on one stand-in GPU, MPI said CUDA-aware: NCCL refuses (skipped, with why), aware and staged run."""
    res, out = _bench(2, tmp_path, {"HPCGPU_STANDIN_DEVICES": "1", "HPCGPU_CUDA_AWARE_MPI": "1"},
                      "--paths", "aware,staged,nccl")
    paths = res["paths"]
    assert list(paths) == ["aware", "staged", "nccl"]
    assert paths["nccl"]["status"] == "skipped" and "share a GPU" in paths["nccl"]["why"], paths["nccl"]
    _check_rows(paths["aware"], 2)
    _check_rows(paths["staged"], 2)
    assert paths["aware"]["runtime"]["device_path"] == "aware"
    assert paths["aware"]["evidence"]["staging_bytes"] == 0
    assert paths["staged"]["runtime"]["device_path"] == "staged"  # staged on request, even on a CUDA-aware MPI
    assert paths["staged"]["evidence"]["staging_bytes"] >= SIZES[-1]
    assert "nccl:   skipped: " in out


@pytest.mark.mpi
def test_allreduce_benchmark_without_a_usable_gpu_is_one_line(tmp_path):
    out = tmp_path / "a.json"
    p = run_standin(2, [SCRIPT, "--device", "gpu", *TINY, "--json", str(out)],
                    env={"HPCGPU_STANDIN_FAIL": "driver"}, timeout=90)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device gpu:" in lines[0] and "cudaErrorInsufficientDriver" in lines[0], p.stderr
    assert not out.exists()


@pytest.mark.mpi
def test_the_collector_puts_the_allreduce_figures_and_the_step_per_path_in_the_summary(tmp_path):
    """collect.py: the benchmark's JSON under ``allreduce``, the trainer per path under ``train_paths``."""
    h5py = pytest.importorskip("h5py")
    logs = tmp_path / "work" / "logs"
    logs.mkdir(parents=True)
    res, _ = _bench(1, tmp_path, {"HPCGPU_STANDIN_DEVICES": "1"})
    (logs / "allreduce-r1.json").write_text(json.dumps(res))
    rows = [("allreduce-r1", "0", "3", "")]
    for path, rate in (("nccl", 1000.0), ("mpi", 1250.0)):  # a trainer's results file, as far as collect reads it
        name = f"trainpath-{path}-16x8-b50"
        with h5py.File(logs / f"{name}.h5", "w") as f:
            f.attrs.update(device="gpu", world_size=1, config=json.dumps({"batch_size": 50, "collectives": path}))
            f["metrics/samples_per_second"] = [500.0, rate]
            f["metrics/seconds"] = [1.0, 2.0]
        (logs / f"{name}.out").write_text(f"hpcgpu.train: 1 rank(s) on gpu ({path} words), data d.h5: N=100\n")
        rows.append((name, "0", "5", ""))
    steps = tmp_path / "steps.tsv"
    with open(steps, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(("name", "rc", "seconds", "note"))
        w.writerows(rows)
    figures = tmp_path / "figures.json"
    p = subprocess.run([sys.executable, os.path.join(KIT, "collect.py"), "--work", str(tmp_path / "work"),
                        "--steps", str(steps), "--out", str(figures)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    fig = json.loads(figures.read_text())
    (ar,) = fig["allreduce"]
    assert (ar["status"], ar["ranks"], ar["sizes"]) == ("ok", 1, SIZES)
    assert ar["paths"]["nccl"]["rows"] == res["paths"]["nccl"]["rows"]
    tp = fig["train_paths"]["16x8-b50"]
    assert tp["paths"]["nccl"]["step_ms"] == pytest.approx(50.0)  # 50 samples a step at 1000 samples/s
    assert tp["paths"]["mpi"]["step_ms"] == pytest.approx(40.0)
    assert tp["paths"]["nccl"]["runtime"] == "gpu (nccl words)"
    assert tp["nccl_over_mpi_step"] == pytest.approx(1.25)
    assert tp["same_work"] and "same steps" in tp["note"]
    assert "allreduce 1 rank(s) nccl:" in p.stdout and "(one rank: the same work)" in p.stdout
