"""Gather the figures of one setup-and-run.sh run into one JSON file.

    python benchmarks/gpu/collect.py --work WORK --steps steps.tsv --out figures.json [--budget S --elapsed S]

Reads the per-step logs in WORK/logs (NAME.out, NAME.err), the step table
(name, exit status, seconds, note), the trainer's HDF5 metrics
(WORK/logs/train-TAG.h5, WORK/logs/trainpath-PATH-TAG.h5) and the Allreduce
benchmark's JSON (WORK/logs/allreduce-rR.json). Only the standard library is
needed; h5py for the trainer's figures. Never fails on a missing or broken
step: that step's entry says what is missing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import socket
import sys
import time

SUMMARY = re.compile(r"\b\d+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b.* in [\d.]+s")
PEER = re.compile(r"RESULT\b.*\bsamples_per_s=([\d.]+)")


def read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_steps(path: str) -> list[dict]:
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            rc = r.get("rc", "")
            status = ("skipped" if rc == "skipped" else "ok" if rc == "0"
                      else "timeout" if rc in ("124", "137") else "failed")
            rows.append({"name": r["name"], "status": status, "rc": int(rc) if rc.lstrip("-").isdigit() else None,
                         "seconds": int(r.get("seconds") or 0), "note": r.get("note") or ""})
    return rows


def last_json(text: str):
    """The last line of ``text`` that is a JSON object, or None."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def stderr_tail(logs: str, name: str, lines: int = 6) -> list[str]:
    return [x for x in read(os.path.join(logs, name + ".err")).splitlines() if x.strip()][-lines:]


def why(logs: str, step: dict, missing: str) -> list[str]:
    """Why a step has no figure: its note when skipped, else the end of its stderr."""
    if step["status"] == "skipped":
        return [step["note"] or "skipped"]
    return [*([step["note"]] if step["note"] else []), *stderr_tail(logs, step["name"])] or [missing]


def info(logs: str, step: dict) -> dict:
    out = read(os.path.join(logs, step["name"] + ".out"))
    err = read(os.path.join(logs, step["name"] + ".err")).splitlines()
    return {"ranks": int(step["name"].rsplit("-r", 1)[1]), "status": step["status"],
            "lines": [x for x in out.splitlines() if x.strip()],
            "stderr_lines": len(err), "stderr_head": err[:4]}


def matmul(logs: str, step: dict) -> dict:
    # matmul-float32-tf32-r4 -> dtype float32, CUPY_TF32=1, 4 ranks; the JSON has the per-rank time split
    name = step["name"]
    res = last_json(read(os.path.join(logs, name + ".out")))
    row = {"step": name, "status": step["status"], "cupy_tf32_env": "-tf32-" in name,
           "ranks": int(name.rsplit("-r", 1)[1])}
    if res is None:
        row["error"] = why(logs, step, "no JSON line on stdout")
    else:
        row.update(res)
        row["tflops"] = res.get("gflops", 0) / 1e3
        row["local_gemm_tflops"] = (res.get("local_gemm_gflops") or 0) / 1e3
    return row


def train(logs: str, step: dict) -> dict:
    """The trainer's samples/s over epochs 2.. (as the peer times it), from its HDF5 metrics, and its step time."""
    name = step["name"]
    row = {"step": name, "status": step["status"]}
    path = os.path.join(logs, name + ".h5")
    try:
        import h5py

        with h5py.File(path, "r") as f:
            m = {k: f["metrics"][k][()].tolist() for k in f["metrics"]}
            row["device"] = str(f.attrs.get("device", ""))
            row["ranks"] = int(f.attrs.get("world_size", 0)) or None
            config = json.loads(f.attrs.get("config", "{}"))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        row["error"] = [f"{path}: {e}", *why(logs, step, "")]
        return row
    sps, secs = m.get("samples_per_second", []), m.get("seconds", [])
    pairs = list(zip(sps, secs, strict=False))
    timed = pairs[1:] or pairs  # epoch 1 pays for first touches, as in the peer
    n = sum(r * s for r, s in timed)
    t = sum(s for _, s in timed)
    rate = n / t if t else None
    batch = config.get("batch_size")
    row.update(samples_per_s=rate, epochs=len(sps), samples_per_s_by_epoch=sps,
               test_accuracy=(m.get("test_accuracy") or [None])[-1], batch_size=batch,
               collectives=config.get("collectives"),
               step_ms=1e3 * batch / rate if rate and batch else None)  # a global batch per step
    return row


def train_paths(logs: str, steps: list[dict]) -> dict:
    """The trainer's step per path (steps ``trainpath-PATH-TAG``): per config, each path's figures and their ratio.

    At one rank the trainer makes no collective: the two runs do the same
    work, and ``note`` says so (their gap is run-to-run noise).
    """
    out: dict = {}
    for s in steps:
        if not s["name"].startswith("trainpath-"):
            continue
        path, tag = s["name"][len("trainpath-"):].split("-", 1)
        row = train(logs, s)
        first = [x for x in read(os.path.join(logs, s["name"] + ".out")).splitlines() if x.startswith("hpcgpu.train:")]
        row["runtime"] = first[0].split(" on ", 1)[-1].split(", data ", 1)[0] if first else None
        out.setdefault(tag, {"paths": {}})["paths"][path] = row
    for entry in out.values():
        ms = {p: r.get("step_ms") for p, r in entry["paths"].items()}
        ranks = {r.get("ranks") for r in entry["paths"].values()} - {None}
        entry["nccl_over_mpi_step"] = ms["nccl"] / ms["mpi"] if ms.get("nccl") and ms.get("mpi") else None
        entry["same_work"] = ranks == {1}
        entry["note"] = ("one rank: the trainer makes no collective, so --collectives nccl and mpi run the same "
                         "steps; their gap is run-to-run noise, not the path" if ranks == {1} else
                         "several ranks: the gradient Allreduce goes over NCCL in one run and over MPI in the other")
    return out


def allreduce(logs: str, step: dict) -> dict:
    """benchmarks/gpu/allreduce.py's JSON (every path and size), with the step's status."""
    name = step["name"]
    path = os.path.join(logs, name + ".json")
    row = {"step": name, "status": step["status"], "ranks": int(name.rsplit("-r", 1)[1])}
    try:
        with open(path) as f:
            row.update(json.load(f))
    except (OSError, ValueError) as e:
        row["error"] = [f"{path}: {e}", *why(logs, step, "")]
    return row


def peer(logs: str, step: dict) -> dict:
    name = step["name"]
    out = read(os.path.join(logs, name + ".out"))
    row = {"step": name, "status": step["status"]}
    hits = PEER.findall(out)
    if hits:
        row["samples_per_s"] = float(hits[-1])
        row["result_line"] = [x for x in out.splitlines() if x.startswith("RESULT")][-1]
        row["epoch_lines"] = [x for x in out.splitlines() if x.startswith("epoch")]
    else:
        row["error"] = why(logs, step, "no RESULT line")
    return row


def pytest(logs: str, step: dict) -> dict:
    out = read(os.path.join(logs, "pytest.out"))
    lines = out.splitlines()
    summary = [x.strip("= ") for x in lines if SUMMARY.search(x)]
    return {"status": step["status"], "rc": step["rc"], "seconds": step["seconds"],
            "summary": summary[-1] if summary else None,
            "failed": [x for x in lines if x.startswith(("FAILED", "ERROR"))][:30],
            "stderr_tail": stderr_tail(logs, "pytest")}


def versions(logs: str) -> dict:
    out = read(os.path.join(logs, "versions.out"))
    v = last_json(out) or {}
    gpu = [x for x in out.splitlines() if x.strip() and not x.startswith("{")]
    if gpu:
        v["gpu"] = gpu
    return v


def collect(a: argparse.Namespace) -> dict:
    logs = os.path.join(a.work, "logs")
    steps = read_steps(a.steps)
    fig = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": socket.gethostname(), "dry": a.dry == "1",
           "device": a.device, "budget_s": a.budget, "elapsed_s": a.elapsed, "versions": versions(logs),
           "steps": steps, "failed_steps": [s["name"] for s in steps if s["status"] in ("failed", "timeout")],
           "smoke": {}, "info": [], "matmul": [], "allreduce": [], "train": {}, "peer": {}, "pytest": None}
    for s in steps:
        n = s["name"]
        if s["status"] == "skipped" and not n.startswith(("matmul-", "train-", "peer-", "info-", "allreduce-")):
            continue
        if n.startswith("smoke-"):
            out = read(os.path.join(logs, n + ".out")).strip()
            fig["smoke"][n[len("smoke-"):]] = {"status": s["status"], "out": out, "stderr_tail": stderr_tail(logs, n)}
        elif n.startswith("info-"):
            fig["info"].append(info(logs, s))
        elif n.startswith("matmul-"):
            fig["matmul"].append(matmul(logs, s))
        elif n.startswith("allreduce-"):
            fig["allreduce"].append(allreduce(logs, s))
        elif n.startswith("train-"):
            fig["train"][n[len("train-"):]] = train(logs, s)
        elif n.startswith("peer-"):
            fig["peer"][n[len("peer-"):]] = peer(logs, s)
        elif n == "pytest":
            fig["pytest"] = pytest(logs, s)
    fig["train_over_peer"] = {tag: fig["train"][tag]["samples_per_s"] / p["samples_per_s"]
                              for tag, p in fig["peer"].items()
                              if p.get("samples_per_s") and fig["train"].get(tag, {}).get("samples_per_s")}
    fig["train_paths"] = train_paths(logs, steps)
    return fig


def report(fig: dict) -> None:
    """A few lines for the device tool's output tail."""
    print(f"figures: {len(fig['steps'])} steps, failed: {', '.join(fig['failed_steps']) or 'none'}")
    for r in fig["matmul"]:
        if "tflops" in r:
            print(f"  matmul N={r['N']} {r['dtype']}{' CUPY_TF32=1' if r['cupy_tf32_env'] else ''} "
                  f"{r['ranks']} rank(s): {r['tflops']:.2f} TFLOP/s, local GEMM {r['local_gemm_tflops']:.2f}, "
                  f"ratio {r['ratio']:.2f}")
        else:
            print(f"  {r['step']}: {r['status']}: {(r.get('error') or [''])[-1]}")
    for r in fig["allreduce"]:
        report_allreduce(r)
    for tag, r in fig["train"].items():
        peer_sps, ratio = fig["peer"].get(tag, {}).get("samples_per_s"), fig["train_over_peer"].get(tag)
        print(f"  train {tag}: hpcgpu {r.get('samples_per_s') or 0:.0f} samples/s ({r['status']}), "
              f"PyTorch peer {'-' if peer_sps is None else f'{peer_sps:.0f}'}, "
              f"ratio {'-' if ratio is None else f'{ratio:.2f}'}")
    for tag, entry in fig["train_paths"].items():
        ms = {p: entry["paths"].get(p, {}).get("step_ms") for p in ("nccl", "mpi")}
        cells = ", ".join(f"{p} {'-' if v is None else f'{v:.3f}'} ms" for p, v in ms.items())
        print(f"  trainer step {tag} by path: {cells}{' (one rank: the same work)' if entry['same_work'] else ''}")
    if fig["pytest"]:
        print(f"  pytest: {fig['pytest']['summary']} (exit {fig['pytest']['rc']})")


def report_allreduce(r: dict) -> None:
    """Per path: the time and algbw at the smallest and the largest size, and the best algbw."""
    if "paths" not in r:
        print(f"  {r['step']}: {r['status']}: {(r.get('error') or [''])[-1]}")
        return
    for name, e in r["paths"].items():
        rows = e.get("rows") or []
        if not rows:
            print(f"  allreduce {r['ranks']} rank(s) {name}: {e.get('status')}: {e.get('why', '')}")
            continue
        lo, hi = rows[0], rows[-1]
        best = max(x["algbw_gbps"] for x in rows)
        print(f"  allreduce {r['ranks']} rank(s) {name}: {lo['bytes']} B {lo['time_us']:.1f} us, {hi['bytes']} B "
              f"{hi['time_us']:.1f} us; algbw up to {best:.2f} GB/s"
              f"{', busbw ' + format(max(x['busbw_gbps'] for x in rows), '.2f') + ' GB/s' if r['ranks'] > 1 else ''}"
              f"{' (CuPy stand-in)' if r.get('standin') else ''}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="the run's work folder (logs/ inside)")
    ap.add_argument("--steps", required=True, help="steps.tsv written by setup-and-run.sh")
    ap.add_argument("--out", required=True, help="figures.json to write")
    ap.add_argument("--budget", type=int, default=None)
    ap.add_argument("--elapsed", type=int, default=None)
    ap.add_argument("--dry", default="0")
    ap.add_argument("--device", default=None)
    a = ap.parse_args()
    fig = collect(a)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(fig, f, indent=1)
    os.replace(tmp, a.out)
    report(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
