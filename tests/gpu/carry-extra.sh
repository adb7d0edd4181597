#!/usr/bin/env bash
# tests/gpu/carry-extra.sh DIR: build, from scratch, the programs issue 33 adds beyond
# tests/gpu/carry.sh's, into DIR (default .carry/gpu/extra), with the libraries the GPU
# machine may lack carried beside them, and print the sizes:
#   DIR/samples.tar.xz  NVIDIA's nvJPEG, nvJPEG_encoder, simpleCUBLASXT, libNVVM's simple,
#                       uvmlite and device-side-launch, the NPP samples, and vmcuda's
#                       NPP check (tests/gpu/samples/build.sh's archive; see
#                       samples/list.txt)
#   DIR/lib.tar.xz      libnvjpeg.so.13 (nvidia-nvjpeg wheel) and FreeImage with the
#                       libraries it loads (this machine's, Debian's libfreeimage3)
#   DIR/cuda12.tar.xz, DIR/cuda12-lib.tar.xz, DIR/cuda12-nvrtc12.whl  the CUDA 12 guest
#                       programs and NVIDIA's CUDA
#                       12 runtime, nvJPEG 12 and NVRTC 12.4 (tests/gpu/cuda12/build.sh)
#   DIR/COMMIT          this repository's commit
# NPP's libraries, libNVVM and cuBLASXt (in libcublas.so.13) are the GPU machine's: its
# CUDA 13.0 toolkit (/usr/local/cuda-13.0) has them. For a machine without a toolkit,
# VMCUDA_EXTRA_TOOLKIT_LIBS=1 carries libnvvm.so.4 and the NPP libraries vmcuda's NPP
# check uses (about 29 MB more, packed; the NPP samples' libnppif is too big to carry).
# Then on the GPU machine: bash tests/gpu/run-extra.sh DIR
#   VMCUDA_SAMPLES_CHECKOUT  a cuda-samples checkout or export at list.txt's commit
#                            (required; see tests/gpu/samples/build.sh)
# Needs FreeImage's headers here (Debian: apt-get install libfreeimage-dev).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
dir=${1:-.carry/gpu/extra}
: "${VMCUDA_SAMPLES_CHECKOUT:?set it to a cuda-samples checkout (tests/gpu/samples/build.sh)}"
rm -rf "$dir" && mkdir -p "$dir/lib"
dir="$(cd "$dir" && pwd)"
cu13=$(bash .ci/install-nvcc.sh | tail -1)
# The wheels' headers and libraries, in scratch space: only the libraries travel.
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
python3 -m pip install -q --no-deps --target "$wheels" 'nvidia-nvjpeg==13.0.*' 'nvidia-npp==13.0.*'
cp "$wheels/nvidia/cu13/lib/libnvjpeg.so.13" "$dir/lib/"
if [ -n "${VMCUDA_EXTRA_TOOLKIT_LIBS:-}" ]; then
  for l in nppc nppisu nppicc nppidei; do cp "$wheels/nvidia/cu13/lib/lib$l.so.13" "$dir/lib/"; done
  cp "$cu13/lib/libnvvm.so.4" "$dir/lib/"
fi
# FreeImage for the NPP samples, with what it loads but the C and C++ runtimes.
[ -e /usr/include/FreeImage.h ] || { echo "carry-extra.sh: no FreeImage.h: apt-get install libfreeimage-dev" >&2; exit 2; }
freeimage=$(ldconfig -p | awk '/libfreeimage\.so\.3 / {print $NF; exit}')
cp -L "$freeimage" "$dir/lib/"
ldd "$freeimage" | awk '$3 ~ /^\// {print $3}' | grep -vE '/lib(c|m|stdc\+\+|gcc_s|pthread|dl|rt)\.so' |
  while read -r l; do cp -L "$l" "$dir/lib/"; done
VMCUDA_SAMPLES_LIBROOTS="$wheels/nvidia/cu13" NVCC="$cu13/bin/nvcc" \
  bash tests/gpu/samples/build.sh "$VMCUDA_SAMPLES_CHECKOUT" "$dir/samples" \
  simpleCUBLASXT nvJPEG nvJPEG_encoder simple uvmlite device-side-launch npp_check \
  boxFilterNPP cannyEdgeDetectorNPP FilterBorderControlNPP freeImageInteropNPP histEqualizationNPP
rm -rf "$dir/samples"
# The libraries packed too: xz halves them (run-extra.sh unpacks them).
tar -C "$dir" -cJf "$dir/lib.tar.xz" lib && rm -rf "$dir/lib"
NVCC="$cu13/bin/nvcc" bash tests/gpu/cuda12/build.sh "$dir/cuda12"
rm -rf "$dir/cuda12"
git rev-parse HEAD >"$dir/COMMIT"
git diff --quiet HEAD || echo "$(cat "$dir/COMMIT") (with uncommitted changes)" >"$dir/COMMIT"
ls -l "$dir"
du -sh "$dir"
