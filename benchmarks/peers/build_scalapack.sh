#!/bin/sh
# Build the ScaLAPACK peer of benchmarks/linalg.py: scalapack_bench.c against Debian's ScaLAPACK for the
# system Open MPI, with OpenBLAS's single-threaded build as its BLAS and LAPACK (one BLAS thread a rank).
#
#   sh benchmarks/peers/build_scalapack.sh      (as root where the packages are missing: apt-get installs them)
#
# Writes benchmarks/peers/build/scalapack_bench. The benchmark runs it with the system mpirun and
# LD_LIBRARY_PATH=/usr/lib/<arch>/openblas-serial, so the system's default BLAS (the alternatives
# libblas.so.3 and liblapack.so.3) is left as it was: installing OpenBLAS switches a default left on auto,
# and this script puts the previous choice back.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
need=""
dpkg -s libscalapack-openmpi-dev >/dev/null 2>&1 || need="$need libscalapack-openmpi-dev"
dpkg -s libopenblas0-serial >/dev/null 2>&1 || need="$need libopenblas0-serial"
if [ -n "$need" ]; then
    blas=$(update-alternatives --query "libblas.so.3-$arch" 2>/dev/null | awk '/^Value:/ {print $2}')
    lapack=$(update-alternatives --query "liblapack.so.3-$arch" 2>/dev/null | awk '/^Value:/ {print $2}')
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
    [ -z "$blas" ] || update-alternatives --set "libblas.so.3-$arch" "$blas"
    [ -z "$lapack" ] || update-alternatives --set "liblapack.so.3-$arch" "$lapack"
fi
mkdir -p "$here/build"
mpicc -O2 -o "$here/build/scalapack_bench" "$here/scalapack_bench.c" -lscalapack-openmpi -lm
echo "$here/build/scalapack_bench"
