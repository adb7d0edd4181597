#!/usr/bin/env bash
# tests/gpu/carry.sh [DIR]: build everything the GPU scripts need into DIR (default
# .carry/gpu), small enough to travel to the GPU machine: release binaries (stripped),
# the guest library, the test apps (shared and static-runtime builds), the load guest,
# the isolation check, the older driver entry points' check, the benchmark (bench/bench, transport-floor) and COMMIT; with
# VMCUDA_CULIBS the library programs (tests/libapps), with VMCUDA_SAMPLES_CHECKOUT
# NVIDIA's public samples (tests/gpu/samples), packed.
# Then, on the GPU machine: bash tests/gpu/run-all.sh DIR (or, with two GPUs or more,
# bash tests/gpu/run-multi-gpu.sh DIR alone: multi_gpu is among the apps, bench --peer in
# bench/bench, and tests/gpu/ddp_check.py travels with the checkout).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
dir=${1:-.carry/gpu}
rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/apps" "$dir/load"
cu13=$(bash .ci/install-nvcc.sh | tail -1)
nvcc="$cu13/bin/nvcc"
cargo build --release -p vmcuda-host -p vmcuda-tests -p vmcuda-bench --bin vmcuda-host \
  --bin load-driver --bin transport-floor
cp target/release/vmcuda-host target/release/load-driver target/release/transport-floor "$dir/bin/"
strip "$dir/bin/"*
bash guest-lib/build-libs.sh "$dir/guest/lib" >/dev/null
# The guest's command (`vmcuda smi`, `vmcuda cdi generate`), built with the libraries.
cp target/release/vmcuda "$dir/bin/" && strip "$dir/bin/vmcuda"
# Debug info stays here: the libraries travel small (the dynamic symbols stay).
strip --strip-debug "$dir"/guest/lib/*.so.*
NVCC=$nvcc bash tests/apps/build.sh "$dir/apps"
VMCUDA_APPS_CUDART=static NVCC=$nvcc bash tests/apps/build.sh "$dir/apps-static"
# NVIDIA's public samples, from a checkout of NVIDIA/cuda-samples the caller names
# (VMCUDA_SAMPLES_CHECKOUT; see tests/gpu/samples/build.sh), carried packed.
if [ -n "${VMCUDA_SAMPLES_CHECKOUT:-}" ]; then
  NVCC=$nvcc bash tests/gpu/samples/build.sh "$VMCUDA_SAMPLES_CHECKOUT" "$dir/samples"
  [ -e "$dir/samples.tar.xz" ] && rm -rf "$dir/samples"
fi
# The library programs, where the libraries' headers are (see tests/libapps/build.sh).
if [ -n "${VMCUDA_CULIBS:-}" ]; then
  NVCC=$nvcc bash tests/libapps/build.sh "$dir/libapps"
  strip "$dir"/libapps/*
fi
NVCC=$nvcc bash tests/apps/build.sh "$dir/load" tests/load
"$nvcc" -cudart shared -arch=sm_90 -O2 -o "$dir/isolation" tests/gpu/isolation.cu -L"$cu13/lib"
"$nvcc" -cudart shared -arch=sm_90 -O2 -o "$dir/host_memory_graphs" tests/gpu/host_memory_graphs.cu -L"$cu13/lib"
# The driver API checks of tests/gpu/run-texref.sh (deprecated texture references
# among them), linked against the guest's libcuda.so.1 (natively the real one loads).
"$nvcc" -cudart shared -arch=sm_90 -O2 -Wno-deprecated-declarations -o "$dir/texref_memops" \
  tests/gpu/texref_memops.cu -L"$cu13/lib" -L"$dir/guest/lib" -l:libcuda.so.1
# The driver's older entry points (tests/gpu/run-legacy.sh), linked against the guest's
# libcuda.so.1 for its symbols (at run time the real driver or vmcuda's is loaded).
"$nvcc" -cudart shared -arch=sm_90 -O2 -o "$dir/legacy_driver" tests/gpu/legacy_driver.cu -L"$cu13/lib" \
  -L"$dir/guest/lib" -lcuda
# The NVML query program (tests/c/nvml_query.c; natively it finds NVIDIA's NVML and
# runtime, bridged the guest's), and pynvml from the nvidia-ml-py wheel for
# tests/gpu/run-nvml.sh.
cc -O2 -o "$dir/nvml_query" tests/c/nvml_query.c -L"$dir/guest/lib" -L"$cu13/lib" -l:libnvidia-ml.so.1 -l:libcudart.so.13
# The managed-memory page model's own checks (tests/c/managed_pages.c), bridged only
# (natively the H100 has concurrent managed access, which it checks is off).
cc -O2 -o "$dir/managed_pages" tests/c/managed_pages.c -L"$dir/guest/lib" -L"$cu13/lib" -l:libcudart.so.13 -l:libcuda.so.1
mkdir -p "$dir/py"
wheel_dir=$(mktemp -d)
if pip download -q --no-deps -d "$wheel_dir" nvidia-ml-py >/dev/null 2>&1; then
  unzip -q -o -j "$wheel_dir"/nvidia_ml_py-*.whl pynvml.py -d "$dir/py"
else
  echo "carry.sh: no nvidia-ml-py wheel (no registry?); run-nvml.sh will lack pynvml" >&2
fi
rm -rf "$wheel_dir"
mkdir -p "$dir/bench"
"$nvcc" -cudart shared -arch=sm_90 -O2 -o "$dir/bench/bench" bench/bench.cu -L"$cu13/lib"
"$nvcc" -cudart shared -arch=sm_90 -O2 -o "$dir/bench/launch_kinds" bench/launch_kinds.cu -L"$cu13/lib"
git rev-parse HEAD >"$dir/COMMIT"
git diff --quiet HEAD || echo "$(cat "$dir/COMMIT") (with uncommitted changes)" >"$dir/COMMIT"
du -sh "$dir"
