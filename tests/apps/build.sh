#!/usr/bin/env bash
# Builds every tests/apps/*.cu into OUTDIR (default: <repo>/build/apps), or every
# SRCDIR/*.cu when SRCDIR is given (tests/run.sh builds tests/load that way, apart
# from the apps, because tests/gpu/run.sh compares every program in the apps dir).
#   tests/apps/build.sh [OUTDIR [SRCDIR]]
#
# Compiler selection: $NVCC if set; else `nvcc` on PATH if it is CUDA 13;
# else the venv toolchain from .ci/install-nvcc.sh (installed on demand).
# Apps are linked against the shared CUDA runtime (libcudart.so.13) so that
# the runtime can be swapped via LD_LIBRARY_PATH. With VMCUDA_APPS_CUDART=static every
# app is built with nvcc's default static runtime instead (NVIDIA's runtime inside the
# program, reaching the GPU through libcuda.so.1 alone).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
outdir="${1:-$repo/build/apps}"
srcdir="$(cd "${2:-$here}" && pwd)"
mkdir -p "$outdir"
outdir="$(cd "$outdir" && pwd)"

is_cuda13() { "$1" --version 2>/dev/null | grep -q 'release 13\.'; }

if [ -n "${NVCC:-}" ]; then
    nvcc="$NVCC"
elif command -v nvcc >/dev/null 2>&1 && is_cuda13 nvcc; then
    nvcc="$(command -v nvcc)"
else
    root="$(bash "$repo/.ci/install-nvcc.sh" | tail -n 1)"
    nvcc="$root/bin/nvcc"
fi
is_cuda13 "$nvcc" || { echo "build.sh: $nvcc is not a CUDA 13 nvcc" >&2; exit 1; }

# cu13/toolkit root: <root>/bin/nvcc -> <root>; its lib dir holds libcudart.so.
nvcc_real="$(readlink -f "$(command -v "$nvcc")")"
curoot="$(dirname "$(dirname "$nvcc_real")")"
libdirs=()
for d in "$curoot/lib" "$curoot/lib64" "$curoot/targets/x86_64-linux/lib"; do
    [ -d "$d" ] && libdirs+=("-L$d")
done

echo "build.sh: nvcc=$nvcc out=$outdir" >&2

# Apps that call the driver API directly link against a stub libcuda.so made here from
# guest-lib/exports/libcuda.so.1.txt (every export of the real driver, none callable):
# at run time the real driver or vmcuda's is loaded. The toolkit's NVRTC is found
# through an rpath to its directory, or LD_LIBRARY_PATH where that is not there.
stubdir="$(mktemp -d)"
trap 'rm -rf "$stubdir"' EXIT
grep -v '^#' "$repo/guest-lib/exports/libcuda.so.1.txt" | sed '/^$/d' |
    awk '{printf "void %s(void) {}\n", $1}' >"$stubdir/cuda_stub.c"
cc -shared -fPIC -o "$stubdir/libcuda.so" -Wl,-soname,libcuda.so.1 "$stubdir/cuda_stub.c"
rm -f "$stubdir/cuda_stub.c"
export stubdir curoot

build_one() {
    local src="$1" name log
    name="$(basename "$src" .cu)"
    log="$outdir/$name.build.log"
    local extra=()
    if grep -q -e '<thread>' -e 'pthread' "$src"; then extra+=(-lpthread); fi
    if grep -q '<cublas_v2.h>' "$src"; then extra+=(-lcublas); fi
    # An app may ask for nvcc's default static runtime with a line
    # `// build: -cudart static` (static_cudart.cu: what vmcuda tells such programs).
    local cudart="${VMCUDA_APPS_CUDART:-shared}"
    if grep -q '^// build: -cudart static' "$src"; then cudart=static; fi
    if grep -q '<cublasLt.h>' "$src"; then extra+=(-lcublasLt); fi
    # `// build: --default-stream per-thread`: the per-thread default stream entry points.
    if grep -q '^// build: --default-stream per-thread' "$src"; then
        extra+=(--default-stream per-thread)
    fi
    # `// build: -rdc=true`: relocatable device code, linked with the device runtime
    # (device-side graph calls such as cudaGraphSetConditional live there).
    if grep -q '^// build: -rdc=true' "$src"; then extra+=(-rdc=true -lcudadevrt); fi
    if grep -q '^#include <cuda.h>' "$src" && ! grep -q 'dlopen' "$src"; then
        extra+=("-L$stubdir" -lcuda)
    fi
    if grep -q "<nvrtc.h>" "$src"; then extra+=(-l:libnvrtc.so.13 -Xlinker "-rpath=$curoot/lib"); fi
    rm -f "$outdir/$name"
    # shellcheck disable=SC2086  # libdirs_str is a space-separated list of -L flags
    if "$nvcc" -cudart "$cudart" -arch=sm_90 \
        -gencode arch=compute_90,code='[sm_90,compute_90]' \
        -O2 -o "$outdir/$name" "$src" $libdirs_str ${extra[@]+"${extra[@]}"} >"$log" 2>&1; then
        echo "  built $name" >&2
        rm -f "$log"
    else
        echo "  FAILED $name (log: $log)" >&2
        cat "$log" >&2
        return 1
    fi
}
export -f build_one
export nvcc outdir
export libdirs_str="${libdirs[*]}"

shopt -s nullglob
srcs=("$srcdir"/*.cu)
[ "${#srcs[@]}" -gt 0 ] || { echo "build.sh: no .cu files in $srcdir" >&2; exit 1; }

# 2 parallel jobs; xargs exits non-zero if any build failed.
if ! printf '%s\0' "${srcs[@]}" | xargs -0 -n 1 -P 2 bash -c 'build_one "$1"' _; then
    failed=()
    for src in "${srcs[@]}"; do
        n="$(basename "$src" .cu)"
        [ -e "$outdir/$n.build.log" ] && failed+=("$n")
    done
    echo "build.sh: FAILED to build: ${failed[*]:-?}" >&2
    exit 1
fi
echo "build.sh: built ${#srcs[@]} apps into $outdir" >&2
