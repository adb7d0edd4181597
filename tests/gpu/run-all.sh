#!/usr/bin/env bash
# tests/gpu/run-all.sh CARRY: on the GPU machine, in one go, every GPU check of the
# project from artifacts built by tests/gpu/carry.sh: the test apps natively and
# through vmcuda (run.sh: shared runtime, static runtime, NVIDIA's runtime over
# vmcuda's driver), the library programs, NVIDIA's public samples (when carried),
# torch's own libraries (run-torch-libs.sh), isolation (run-isolation.sh), the driver's
# older entry points (run-legacy.sh), load with faults
# (run-load.sh), the stock torch wheel (run-torch.sh) and, on a machine with two GPUs
# or more, several GPUs at once (run-multi-gpu.sh). Each script's Markdown lands in $OUT (RESULTS*.md); the logs are
# bundled as $OUT/logs.tar.gz. Exits non-zero if any part failed. A run kept goes into
# tests/gpu/results/ with its row in that folder's README.md (tests/tests/results.rs).
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-all.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
logs=$(mktemp -d)
export VMCUDA_COMMIT_FILE="$carry/COMMIT"
rc=0

echo "== apps on NVIDIA's shared runtime over vmcuda's libcuda.so.1: native vs bridged ($(date -u +%T))"
OUT="$logs/apps" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
  VMCUDA_APPS_DIR="$carry/apps" bash tests/gpu/run.sh >"$logs/apps.out" 2>&1 || rc=1
tail -30 "$logs/apps.out"

echo "== apps built with nvcc's default static runtime: native vs bridged ($(date -u +%T))"
OUT="$logs/apps-static" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
  VMCUDA_APPS_DIR="$carry/apps-static" bash tests/gpu/run.sh >"$logs/apps-static.out" 2>&1 || rc=1
tail -30 "$logs/apps-static.out"

if [ -d "$carry/libapps" ]; then
  echo "== NVIDIA's libraries (cuFFT, cuRAND, cuSOLVER, cuSPARSE) over vmcuda's libcuda.so.1 ($(date -u +%T))"
  OUT="$logs/libapps" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
    VMCUDA_APPS_DIR="$carry/libapps" VMCUDA_BRIDGED_RUNTIME=nvidia bash tests/gpu/run.sh >"$logs/libapps.out" 2>&1 || rc=1
  tail -12 "$logs/libapps.out"
fi

if [ -e "$carry/samples.tar.xz" ]; then
  echo "== NVIDIA's public CUDA samples, plain nvcc builds ($(date -u +%T))"
  OUT="$logs/samples" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
    VMCUDA_SAMPLES_DEADLINE="${VMCUDA_SAMPLES_DEADLINE:-300}" \
    bash tests/gpu/samples/run.sh "$carry/samples.tar.xz" >"$logs/samples.out" 2>&1 || rc=1
  tail -6 "$logs/samples.out"
fi

echo "== isolation ($(date -u +%T))"
OUT="$logs/iso" bash tests/gpu/run-isolation.sh "$carry" >"$logs/iso.out" 2>&1 || rc=1
tail -20 "$logs/iso.out"

echo "== the driver's older entry points ($(date -u +%T))"
OUT="$logs/legacy" bash tests/gpu/run-legacy.sh "$carry" >"$logs/legacy.out" 2>&1 || rc=1
grep -E "checks pass|^\| .* \| (FAIL|DIFF) \|" "$logs/legacy.out" | head -20

echo "== load with faults ($(date -u +%T))"
OUT="$logs/load" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
  VMCUDA_LOAD_GUEST="$carry/load/load_guest" VMCUDA_LOAD_DRIVER="$carry/bin/load-driver" \
  bash tests/gpu/run-load.sh >"$logs/load.out" 2>&1 || rc=1
tail -25 "$logs/load.out"

echo "== torch's own libraries (cuDNN, cuFFT, cuSOLVER, cuSPARSE, Triton) and CuPy over vmcuda's libcuda.so.1 ($(date -u +%T))"
OUT="$logs/torch-libs" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
  bash tests/gpu/run-torch-libs.sh >"$logs/torch-libs.out" 2>&1 || rc=1
tail -20 "$logs/torch-libs.out"

echo "== torch, the stock wheel ($(date -u +%T))"
OUT="$logs/torch" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
  bash tests/gpu/run-torch.sh >"$logs/torch.out" 2>&1 || rc=1
tail -40 "$logs/torch.out"

# Several GPUs: the multi_gpu app, peer copies and DDP (nccl, gloo), only where the
# machine has two GPUs or more.
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${ngpus:-0}" -ge 2 ]; then
  echo "== $ngpus GPUs: multi_gpu, peer copies, DDP natively and bridged ($(date -u +%T))"
  OUT="$logs/multi-gpu" bash tests/gpu/run-multi-gpu.sh "$carry" >"$logs/multi-gpu.out" 2>&1 || rc=1
  sed -n '/^| part/,/^$/p' "$logs/multi-gpu.out"
fi

cp "$logs/apps/RESULTS.md" "$out/RESULTS.md" 2>/dev/null
cp "$logs/apps-static/RESULTS.md" "$out/RESULTS-STATIC.md" 2>/dev/null
cp "$logs/apps-nvidia/RESULTS.md" "$out/RESULTS-NVIDIA-RUNTIME.md" 2>/dev/null
cp "$logs/libapps/RESULTS.md" "$out/RESULTS-LIBRARIES.md" 2>/dev/null
cp "$logs/torch-libs/RESULTS-TORCH-LIBS.md" "$out/RESULTS-TORCH-LIBS.md" 2>/dev/null
cp "$logs/samples/RESULTS-SAMPLES.md" "$out/RESULTS-SAMPLES.md" 2>/dev/null
cp "$logs/torch/RESULTS-TORCH.md" "$out/RESULTS-TORCH.md" 2>/dev/null
cp "$logs/iso/RESULTS-ISOLATION.md" "$out/RESULTS-ISOLATION.md" 2>/dev/null
cp "$logs/load/RESULTS-load.md" "$out/RESULTS-load.md" 2>/dev/null
cp "$logs/multi-gpu/RESULTS-MULTI-GPU.md" "$out/RESULTS-MULTI-GPU.md" 2>/dev/null
tar -C "$logs" -czf "$out/logs.tar.gz" . 2>/dev/null
echo "== done ($(date -u +%T)), rc=$rc"
exit $rc
