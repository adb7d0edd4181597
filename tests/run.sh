#!/usr/bin/env bash
# The test command: builds everything the tests need and runs all of them.
#   - nvcc 13 from PyPI wheels (.ci/install-nvcc.sh), then the CUDA test programs;
#   - the host daemon and the guest libcuda.so.1 (with NVML); the programs run on
#     NVIDIA's libcudart.so.13 from the nvcc wheels over it;
#   - every Rust test, including the end-to-end ones that run the real programs
#     through the bridge on the host-memory executor (no GPU needed), and the load
#     and fault test (16 guests at once with kills and crashes, tests/tests/load.rs).
#   - a minimal Debian guest (images/build-guest.sh) that QEMU boots under TCG, so the
#     programs also run inside a real VM: over the vhost-user vsock device, the TCP
#     fallback and the AF_VSOCK listener (tests/tests/vm.rs).
#   - the packages (images/host-deb, images/guest-deb) and their local apt repository
#     (images/build-repo.sh), from the debug build: installed with apt from it, run and
#     removed in a container-like root (tests/tests/install.rs, as root), and
#     the demo guest image (images/build-demo-image.sh: a bootable qcow2 with the guest
#     package) booted from its own disk, running programs with vmcuda-run over the host
#     package's vhost-user device (tests/tests/vm.rs).
#   - every cargo-fuzz target (tests/fuzz/run.sh) for a bounded time, from the committed
#     seeds: VMCUDA_FUZZ_SECONDS per target (default 10), on the stable toolchain.
# GPU comparisons against native runs are tests/gpu/run.sh, on a GPU machine.
# It fails if /run/vmcuda changed while it ran: the tests keep their state elsewhere.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# The tests keep their state to themselves (every daemon's --state-dir or state_dir is a
# temporary directory): /run/vmcuda, the system's, must be as found at the end.
run_state() { find /run/vmcuda 2>/dev/null | sort || true; }
run_state_before=$(run_state)

echo "== nvcc 13 (PyPI wheels)"
cu13=$(bash .ci/install-nvcc.sh | tail -n 1)
export NVCC="$cu13/bin/nvcc"
# NVIDIA's runtime for the `-cudart shared` programs (tests/src/lib.rs).
export VMCUDA_NVIDIA_CUDART_DIR="$cu13/lib"

echo "== building the host backend, the guest library and the guest's vmcuda command (cargo: errors and warnings only)"
# Cargo's `Compiling` lines (hundreds) are left out of the builds; the tests below keep
# cargo's usual output, one line per test.
CARGO_TERM_QUIET=true cargo build --workspace --all-targets
CARGO_TERM_QUIET=true VMCUDA_BUILD_PROFILE=debug bash guest-lib/build-libs.sh >/dev/null

echo "== building the CUDA test programs"
bash tests/apps/build.sh "$root/build/apps"
VMCUDA_APPS_CUDART=static bash tests/apps/build.sh "$root/build/apps-static"
# The load test's guest lives apart: tests/gpu/run.sh compares every program in build/apps.
bash tests/apps/build.sh "$root/build/load" "$root/tests/load"

echo "== building the test guest (Debian cloud kernel + busybox initramfs)"
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v cpio >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    # Never over what is installed: a package apt could only install by removing or
    # downgrading another is skipped (exit 3), and the check below says what is missing.
    bash .ci/apt-install.sh qemu-system-x86 cpio || [ $? = 3 ]
    # Skipped (it would remove or downgrade something here): Debian's QEMU unpacked
    # into build/qemu instead, installing nothing, first on PATH for the tests.
    if ! command -v qemu-system-x86_64 >/dev/null &&
      unpacked=$(bash tests/vm/unpack-qemu.sh "$root/build/qemu" | tail -n 1) && [ -x "$unpacked" ]; then
      export PATH="$(dirname "$unpacked"):$PATH"
    fi
    command -v qemu-system-x86_64 >/dev/null && command -v cpio >/dev/null ||
      { echo "tests/run.sh: no qemu-system-x86_64 or cpio (see above): the VM tests cannot run" >&2; exit 1; }
  else
    echo "tests/run.sh: install qemu-system-x86 (and cpio) to run the VM tests" >&2
    exit 1
  fi
fi
# The VM's reconnect test runs suspend_steps (a driver-API program) beside the programs.
mkdir -p "$root/build/vm-extra"
cc -O2 -o "$root/build/vm-extra/suspend_steps" tests/c/suspend_steps.c \
  -L"$root/build/guest/lib" -l:libcuda.so.1
bash images/build-guest.sh "$root/build/vm" --guest-lib "$root/build/guest/lib" \
  --apps "$root/build/apps" --extra-apps "$root/build/vm-extra" \
  --host-bin "$root/target/debug/vmcuda-host" --cli-bin "$root/target/debug/vmcuda"

echo "== packages (debug binaries, gzip) and the demo guest image with the guest package"
# Release packages are the default of the build scripts; here the debug build is
# packaged, so that CI builds nothing twice.
# Both packages and the local apt repository the install test installs from, as
# images/build-repo.sh builds dist/ for a user (here into build/repo).
pkg_repo=$(PKG_COMPRESS=gzip bash images/build-repo.sh "$root/build/repo" --profile debug --no-build \
  --guest-lib "$root/build/guest/lib" 2>/dev/null | tail -n 1)
host_deb=$(ls "$pkg_repo"/vmcuda-host_*.deb)
guest_deb=$(ls "$pkg_repo"/vmcuda-guest_*.deb)
guest_tarball=$(ls "$pkg_repo"/vmcuda-guest-*.tar.gz)
rm -rf "$root/build/vm-pkg-apps" && mkdir -p "$root/build/vm-pkg-apps"
cp "$root/build/apps/vector_add" "$root/build/apps/memcpy_kinds" "$root/build/vm-pkg-apps/"
# (as root, it installs the syslinux, mtools and qemu-img it needs)
bash images/build-demo-image.sh "$root/build/vm-pkg/demo.qcow2" --guest-deb "$guest_deb" \
  --apps "$root/build/vm-pkg-apps"

echo "== tests"
export VMCUDA_PKG_REPO="$pkg_repo"
export VMCUDA_HOST_DEB="$host_deb"
export VMCUDA_GUEST_DEB="$guest_deb"
export VMCUDA_GUEST_TARBALL="$guest_tarball"
export VMCUDA_DEMO_IMAGE="$root/build/vm-pkg/demo.qcow2"
export VMCUDA_HOST_BIN="$root/target/debug/vmcuda-host"
export VMCUDA_CLI_BIN="$root/target/debug/vmcuda"
export VMCUDA_GUEST_LIB_DIR="$root/build/guest/lib"
export VMCUDA_APPS_DIR="$root/build/apps"
export VMCUDA_APPS_STATIC_DIR="$root/build/apps-static"
export VMCUDA_LOAD_GUEST="$root/build/load/load_guest"
export VMCUDA_VM_DIR="$root/build/vm"
export VMCUDA_VHOST_BIN="$root/target/debug/vmcuda-vhost-vsock"
log=$(mktemp)
fuzzlog=$(mktemp)
trap 'rm -f "$log" "$fuzzlog"' EXIT
status=0
cargo test --workspace -- --include-ignored 2>&1 | tee "$log" || status=$?

echo "== fuzzing"
fuzz_status=0
bash tests/fuzz/run.sh "${VMCUDA_FUZZ_SECONDS:-10}" 2>&1 | tee "$fuzzlog" || fuzz_status=$?

# The closing line for the whole run (cargo prints one per test binary). The fuzz
# summary is tests/fuzz/run.sh's last line, just above: said again only when missing.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
grep -qE '^fuzz: [0-9]+ targets' "$fuzzlog" || echo "fuzz: did not complete (exit $fuzz_status)"
if [ "$status" -eq 0 ]; then
  status=$fuzz_status
fi
if [ "$(run_state)" != "$run_state_before" ]; then
  echo "tests/run.sh: the tests changed /run/vmcuda (they must keep their state in their own directories):"
  diff <(echo "$run_state_before") <(run_state) | sed 's/^/   /' || true
  status=1
fi
exit "$status"
