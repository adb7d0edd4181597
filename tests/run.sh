#!/usr/bin/env bash
# The test command: builds everything the tests need and runs all of them.
#   - nvcc 13 from PyPI wheels (.ci/install-nvcc.sh), then the CUDA test programs;
#   - the host daemon and the guest libcudart.so.13 (linked with its version node);
#   - every Rust test, including the end-to-end ones that run the real programs
#     through the bridge on the host-memory executor (no GPU needed).
#   - a minimal Debian guest (images/build-guest.sh) that QEMU boots under TCG, so the
#     programs also run inside a real VM: over the vhost-user vsock device, the TCP
#     fallback and the AF_VSOCK listener (tests/tests/vm.rs).
#   - every cargo-fuzz target (tests/fuzz/run.sh) for a bounded time, from the committed
#     seeds: VMCUDA_FUZZ_SECONDS per target (default 20), on the stable toolchain.
# GPU comparisons against native runs are tests/gpu/run.sh, on a GPU machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

echo "== nvcc 13 (PyPI wheels)"
cu13=$(bash .ci/install-nvcc.sh | tail -n 1)
export NVCC="$cu13/bin/nvcc"

echo "== building the host backend and the guest library"
cargo build --workspace --all-targets
VMCUDA_PROFILE=debug bash guest-lib/build-libs.sh >/dev/null

echo "== building the CUDA test programs"
bash tests/apps/build.sh "$root/build/apps"

echo "== building the test guest (Debian cloud kernel + busybox initramfs)"
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v cpio >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq qemu-system-x86 cpio >/dev/null
  else
    echo "tests/run.sh: install qemu-system-x86 (and cpio) to run the VM tests" >&2
    exit 1
  fi
fi
bash images/build-guest.sh "$root/build/vm" --guest-lib "$root/build/guest/lib" \
  --apps "$root/build/apps" --host-bin "$root/target/debug/vmcuda-host"

echo "== tests"
export VMCUDA_HOST_BIN="$root/target/debug/vmcuda-host"
export VMCUDA_GUEST_LIB_DIR="$root/build/guest/lib"
export VMCUDA_APPS_DIR="$root/build/apps"
export VMCUDA_VM_DIR="$root/build/vm"
export VMCUDA_VHOST_BIN="$root/target/debug/vmcuda-vhost-vsock"
log=$(mktemp)
fuzzlog=$(mktemp)
trap 'rm -f "$log" "$fuzzlog"' EXIT
status=0
cargo test --workspace -- --include-ignored 2>&1 | tee "$log" || status=$?

echo "== fuzzing"
fuzz_status=0
bash tests/fuzz/run.sh "${VMCUDA_FUZZ_SECONDS:-20}" 2>&1 | tee "$fuzzlog" || fuzz_status=$?

# Closing lines for the whole run (cargo prints one per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
grep -E '^fuzz: [0-9]+ targets' "$fuzzlog" | tail -n 1 || echo "fuzz: did not complete (exit $fuzz_status)"
if [ "$status" -eq 0 ]; then
  status=$fuzz_status
fi
exit "$status"
