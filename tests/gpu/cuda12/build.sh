#!/usr/bin/env bash
# tests/gpu/cuda12/build.sh OUTDIR: build the CUDA 12 guest programs of list.txt into
# OUTDIR in tests/gpu/samples/build.sh's layout (OUTDIR/<name>/<name>, list.txt, BUILT,
# SAMPLES_COMMIT, COMMIT, and OUTDIR.tar.xz), with NVIDIA's CUDA 12 libraries they load
# in OUTDIR-lib.tar.xz (libcudart.so.12, libnvjpeg.so.12) and NVRTC 12's wheel as PyPI
# has it (OUTDIR-nvrtc12.whl: already compressed; libnvrtc.so.12 is 60 MB), for
# tests/gpu/run-extra.sh.
#
# A CUDA 12 toolchain is what builds a CUDA 12 program; PyPI has no CUDA 12 nvcc (its
# nvcc wheel has ptxas and headers only), so the host code is built by g++ against the
# CUDA 12.9 wheels' headers and runtime (shared libcudart.so.12, or libcudart_static.a)
# and the kernels by this repository's nvcc into a cubin (sm_90) and PTX, whose ISA
# version is set to 8.0, the one CUDA 12.0 emits (the kernels use nothing newer).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
[ "$#" -eq 1 ] || { echo "usage: build.sh OUTDIR" >&2; exit 2; }
mkdir -p "$1"
out="$(cd "$1" && pwd)"
nvcc="${NVCC:-$(bash "$repo/.ci/install-nvcc.sh" | tail -n 1)/bin/nvcc}"
wheels="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-cu12.XXXXXX")"
trap 'rm -rf "$wheels"' EXIT
python3 -m pip install -q --no-deps --target "$wheels" \
    'nvidia-cuda-runtime-cu12==12.9.*' 'nvidia-cuda-nvcc-cu12==12.9.*' \
    'nvidia-nvjpeg-cu12==12.4.*' 'nvidia-cuda-nvrtc-cu12==12.4.*'
python3 -m pip download -q --no-deps -d "$wheels/dl" 'nvidia-cuda-nvrtc-cu12==12.4.*'
rt="$wheels/nvidia/cuda_runtime"
jpeg="$wheels/nvidia/nvjpeg"
"$nvcc" -cubin -arch=sm_90 -o "$wheels/vector_add.cubin" "$here/vector_add.cu"
"$nvcc" -ptx -arch=compute_90 -o "$wheels/vector_add.ptx" "$here/vector_add.cu"
sed -i 's/^\.version .*/.version 8.0/' "$wheels/vector_add.ptx"

built=()
while IFS='|' read -r name _ srcs libs files _; do
    case "$name" in '#'*|'') continue ;; esac
    name="${name//[[:space:]]/}"
    dest="$out/$name"
    rm -rf "$dest" && mkdir -p "$dest"
    # The runtime's headers include crt/ from the nvcc wheel (headers only are used).
    flags=(-std=c++17 -O2 "-I$rt/include" "-I$wheels/nvidia/cuda_nvcc/include")
    link=()
    for l in $libs; do
        case "$l" in
            cudart12) link+=("$rt/lib/libcudart.so.12" "-Wl,-rpath-link,$rt/lib") ;;
            cudart12-static) link+=("$rt/lib/libcudart_static.a" -ldl -lrt -lpthread) ;;
            nvjpeg12) flags+=("-I$jpeg/include"); link+=("$jpeg/lib/libnvjpeg.so.12") ;;
            nvrtc12)
                nvrtc="$wheels/nvidia/cuda_nvrtc"
                flags+=("-I$nvrtc/include"); link+=("$nvrtc/lib/libnvrtc.so.12") ;;
            *) echo "unknown lib $l" >&2; exit 2 ;;
        esac
    done
    # shellcheck disable=SC2086
    g++ "${flags[@]}" -o "$dest/$name" $(for s in $srcs; do echo "$here/$s"; done) "${link[@]}"
    strip "$dest/$name"
    for f in $files; do
        case "$f" in
            -) ;;
            vector_add) cp "$wheels/vector_add.cubin" "$wheels/vector_add.ptx" "$dest/" ;;
            *) echo "unknown file $f" >&2; exit 2 ;;
        esac
    done
    built+=("$name")
done <"$here/list.txt"
cp "$here/list.txt" "$out/list.txt"
printf '%s\n' "${built[@]}" >"$out/BUILT"
echo "cuda-12.9 runtime wheel, nvjpeg-cu12 12.4 wheel" >"$out/SAMPLES_COMMIT"
commit="$(git -C "$repo" rev-parse HEAD)"
git -C "$repo" diff --quiet HEAD || commit="$commit (with uncommitted changes)"
echo "$commit" >"$out/COMMIT"
tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
mkdir -p "$wheels/carry/lib"
cp "$rt/lib/libcudart.so.12" "$jpeg/lib/libnvjpeg.so.12" "$wheels/carry/lib/"
tar -C "$wheels/carry" -cJf "$out-lib.tar.xz" lib
cp "$wheels"/dl/nvidia_cuda_nvrtc_cu12-*.whl "$out-nvrtc12.whl"
ls -l "$out.tar.xz" "$out-lib.tar.xz" "$out-nvrtc12.whl"
