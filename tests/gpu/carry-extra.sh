#!/usr/bin/env bash
# tests/gpu/carry-extra.sh DIR: build, from scratch, the samples issue 33 adds beyond
# tests/gpu/carry.sh's (nvJPEG, nvJPEG_encoder, simpleCUBLASXT; see
# tests/gpu/samples/list.txt) into DIR (default .carry/gpu/extra), with the one library
# the GPU machine may lack carried beside them, and print the sizes:
#   DIR/samples.tar.xz  the programs (tests/gpu/samples/build.sh's archive)
#   DIR/lib/            libnvjpeg.so.13 (from the nvidia-nvjpeg wheel)
#   DIR/COMMIT          this repository's commit
# cuBLASXt is in libcublas.so.13, which the GPU machine has (torch's cu13 wheels).
# Then on the GPU machine: bash tests/gpu/run-extra.sh DIR
#   VMCUDA_SAMPLES_CHECKOUT  a cuda-samples checkout or export at list.txt's commit
#                            (required; see tests/gpu/samples/build.sh)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
dir=${1:-.carry/gpu/extra}
: "${VMCUDA_SAMPLES_CHECKOUT:?set it to a cuda-samples checkout (tests/gpu/samples/build.sh)}"
rm -rf "$dir" && mkdir -p "$dir/lib"
dir="$(cd "$dir" && pwd)"
cu13=$(bash .ci/install-nvcc.sh | tail -1)
# The wheel's headers and library, in scratch space: only the library travels.
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
python3 -m pip install -q --no-deps --target "$wheels" 'nvidia-nvjpeg==13.0.*'
cp "$wheels/nvidia/cu13/lib/libnvjpeg.so.13" "$dir/lib/"
VMCUDA_SAMPLES_LIBROOTS="$wheels/nvidia/cu13" NVCC="$cu13/bin/nvcc" \
  bash tests/gpu/samples/build.sh "$VMCUDA_SAMPLES_CHECKOUT" "$dir/samples" \
  simpleCUBLASXT nvJPEG nvJPEG_encoder
rm -rf "$dir/samples"
# The library packed too: xz halves it (run-extra.sh unpacks it).
tar -C "$dir" -cJf "$dir/lib.tar.xz" lib && rm -rf "$dir/lib"
git rev-parse HEAD >"$dir/COMMIT"
git diff --quiet HEAD || echo "$(cat "$dir/COMMIT") (with uncommitted changes)" >"$dir/COMMIT"
ls -l "$dir"
du -sh "$dir"
