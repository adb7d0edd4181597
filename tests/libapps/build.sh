#!/usr/bin/env bash
# Builds the library test programs (tests/libapps/*.cu: cuFFT, cuRAND, cuSOLVER,
# cuSPARSE) with plain nvcc, i.e. nvcc's default static CUDA runtime, into OUTDIR.
#   tests/libapps/build.sh OUTDIR
# Each library carries its own static runtime and reaches the GPU through
# libcuda.so.1 alone: through vmcuda, these prove the guest driver.
#
# The libraries' headers and link libraries: $VMCUDA_CULIBS (a directory with
# include/ and lib/, such as the cu13 directory of the pip wheels nvidia-cufft,
# nvidia-curand, nvidia-cusolver, nvidia-cusparse), else the CUDA toolkit's. Not part
# of CI: the host-memory test executor cannot run the libraries' kernels, and the
# wheels are large. tests/gpu/carry.sh builds them when the libraries are there.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
root="$(bash "$repo/.ci/install-nvcc.sh" | tail -n 1)"
nvcc="${NVCC:-$root/bin/nvcc}"
libs="${VMCUDA_CULIBS:-${CUDA_HOME:-/usr/local/cuda}}"
[ -e "$libs/include/cufft.h" ] || { echo "libapps/build.sh: no cufft.h under $libs/include (set VMCUDA_CULIBS)" >&2; exit 1; }
lib_dir="$libs/lib"
[ -d "$libs/lib64" ] && lib_dir="$libs/lib64"
# The wheels ship only versioned sonames: link against them by path.
link() {
    local f
    f=$(ls "$lib_dir"/lib"$1".so* 2>/dev/null | head -n 1)
    [ -n "$f" ] || { echo "libapps/build.sh: lib$1 not found in $lib_dir" >&2; exit 1; }
    echo "-l:$(basename "$f")"
}
declare -A needs=(
    [cufft_c2c]="cufft"
    [curand_gen]="curand"
    [cusolver_potrf]="cusolver"
    [cusparse_spmv]="cusparse"
)
for src in "$here"/*.cu; do
    name=$(basename "$src" .cu)
    extra=()
    for l in ${needs[$name]}; do extra+=("$(link "$l")"); done
    "$nvcc" -arch=sm_90 -O2 -I"$libs/include" -o "$out/$name" "$src" -L"$lib_dir" "${extra[@]}" \
        -L"$root/lib" -lcublas -lcublasLt -Xlinker --allow-shlib-undefined
    echo "  built $name" >&2
done
