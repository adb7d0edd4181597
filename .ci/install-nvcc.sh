#!/usr/bin/env bash
# Installs a CUDA 13.0 nvcc toolchain from PyPI wheels into a Python venv
# (idempotent) and prints the cu13 root directory on the last stdout line.
#
# Besides nvcc, the runtime, crt and nvvm, it installs the CCCL headers
# (nvidia-cuda-cccl): cooperative_groups.h includes <nv/target>, which lives there.
#
#   VMCUDA_NVCC_VENV   venv location (default: $HOME/.cache/vmcuda/nvcc-venv)
#   PYTHON             python interpreter used to create the venv (default: python3)
set -euo pipefail

venv="${VMCUDA_NVCC_VENV:-$HOME/.cache/vmcuda/nvcc-venv}"
python="${PYTHON:-python3}"

find_cu13() {
    # Prints the cu13 root inside the venv (site-packages/nvidia/cu13), if any.
    local d
    for d in "$venv"/lib/python3*/site-packages/nvidia/cu13; do
        if [ -d "$d" ]; then
            printf '%s\n' "$d"
            return 0
        fi
    done
    return 1
}

nvcc_works() {
    local root
    root="$(find_cu13)" || return 1
    [ -x "$root/bin/nvcc" ] || return 1
    "$root/bin/nvcc" --version 2>/dev/null | grep -q 'release 13\.0'
}

cccl_present() {
    local root
    root="$(find_cu13)" || return 1
    [ -e "$root/include/cccl/nv/target" ] || [ -e "$root/include/nv/target" ]
}

if nvcc_works && ! cccl_present; then
    echo "install-nvcc: adding CCCL headers to $venv" >&2
    "$venv/bin/python" -m pip install --quiet 'nvidia-cuda-cccl==13.0.*' >&2
elif ! nvcc_works; then
    echo "install-nvcc: installing CUDA 13.0 nvcc wheels into $venv" >&2
    mkdir -p "$(dirname "$venv")"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv" >&2
    fi
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2 || true
    "$venv/bin/python" -m pip install --quiet \
        'nvidia-cuda-nvcc==13.0.*' \
        'nvidia-cuda-runtime==13.0.*' \
        'nvidia-cuda-crt==13.0.*' \
        'nvidia-nvvm==13.0.*' \
        'nvidia-cuda-cccl==13.0.*' >&2
fi

# cuBLAS headers and libraries (libcublasLt too), for the apps that link -lcublas or
# -lcublasLt (tests/apps/cublas*),
# pinned to the release whose export list guest-lib/exports/ holds.
cublas_present() {
    local root
    root="$(find_cu13)" || return 1
    [ -e "$root/include/cublas_v2.h" ] && [ -e "$root/lib/libcublas.so.13" ]
}
if ! cublas_present; then
    echo "install-nvcc: adding cuBLAS (nvidia-cublas) to $venv" >&2
    "$venv/bin/python" -m pip install --quiet 'nvidia-cublas==13.10.0.20' >&2
fi

root="$(find_cu13)" || { echo "install-nvcc: cu13 directory not found in $venv" >&2; exit 1; }
[ -x "$root/bin/nvcc" ] || { echo "install-nvcc: $root/bin/nvcc missing" >&2; exit 1; }

# The wheels ship only libcudart.so.13; the linker needs the unversioned name.
lib="$root/lib"
for l in cudart cublas cublasLt; do
    if [ -e "$lib/lib$l.so.13" ] && [ ! -e "$lib/lib$l.so" ]; then
        ln -sfn "lib$l.so.13" "$lib/lib$l.so" 2>/dev/null \
            || echo "install-nvcc: warning: cannot create $lib/lib$l.so symlink" >&2
    fi
done

"$root/bin/nvcc" --version | grep -q 'release 13\.0' \
    || { echo "install-nvcc: $root/bin/nvcc is not CUDA 13.0" >&2; exit 1; }

printf '%s\n' "$root"
