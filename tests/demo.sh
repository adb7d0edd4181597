#!/usr/bin/env bash
# The main job: the host backend plus a sample CUDA program, unmodified, running
# through the bridge. On a machine with an NVIDIA GPU and driver the kernels run on
# the GPU; elsewhere the host-memory test executor stands in, and says so.
#
#   tests/demo.sh [APP]        APP: a program in tests/apps (default vector_add)
#
# Then, where QEMU is installed, the same program inside a VM: the guest package in
# the demo guest image (images/build-demo-image.sh, cached in build/demo/vm), booted
# under QEMU from its own disk, reaching the host through the vhost-user vsock device
# (vmcuda-vhost-vsock) with vmcuda-run.
#   VMCUDA_DEMO_VM=0|1       skip the VM part | require it (default: run it when
#                            qemu-system-x86_64 is there)
#   VMCUDA_DEMO_ACCEL=kvm    boot with KVM (default tcg: works everywhere, ~10 s)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
sample=${1:-vector_add}

demo_vm=${VMCUDA_DEMO_VM:-auto}
case "$demo_vm" in 0|1|auto) ;; *) echo "VMCUDA_DEMO_VM must be 0 or 1" >&2; exit 2 ;; esac
accel=${VMCUDA_DEMO_ACCEL:-tcg}
case "$accel" in tcg|kvm) ;; *) echo "VMCUDA_DEMO_ACCEL must be tcg or kvm" >&2; exit 2 ;; esac
vm_note=""
if [ "$demo_vm" != 0 ]; then
  # What the image build needs beyond QEMU; root installs it, anyone else is told.
  need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v syslinux >/dev/null || need+=(syslinux)
  [ -f /usr/lib/syslinux/mbr/mbr.bin ] || need+=(syslinux-common)
  command -v mformat >/dev/null || need+=(mtools)
  command -v qemu-img >/dev/null || need+=(qemu-utils)
  if [ "$demo_vm" = auto ] && ! command -v qemu-system-x86_64 >/dev/null; then
    demo_vm=0; vm_note="no qemu-system-x86_64 here: install qemu-system-x86 to also run the sample inside a VM"
  elif [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq "${need[@]}" >/dev/null
  elif [ ${#need[@]} -gt 0 ]; then
    [ "$demo_vm" = auto ] || { echo "tests/demo.sh: the VM part needs: apt-get install ${need[*]}" >&2; exit 1; }
    demo_vm=0; vm_note="the VM part needs: apt-get install ${need[*]}"
  fi
fi

echo "== building vmcuda (host daemon and guest libcudart.so.13)"
if [ "$demo_vm" != 0 ]; then
  cargo build --release -p vmcuda-host -p vmcuda-vmm-glue
else
  cargo build --release -p vmcuda-host
fi
bash guest-lib/build-libs.sh >/dev/null

echo "== building the sample program with nvcc -cudart shared"
cu13=$(bash .ci/install-nvcc.sh | tail -n 1)
mkdir -p build/demo
"$cu13/bin/nvcc" -cudart shared -arch=sm_90 -gencode arch=compute_90,code=[sm_90,compute_90] \
  -O2 -o "build/demo/$sample" "tests/apps/$sample.cu" -L"$cu13/lib"

run=$(mktemp -d)
host_pid=""
stop() {
  if [ -n "$host_pid" ]; then kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; fi
  rm -rf "$run"
}
trap stop EXIT
./target/release/vmcuda-host serve --unix "$run/vmcuda.sock" --executor auto 2>"$run/host.log" &
host_pid=$!
for _ in $(seq 100); do [ -S "$run/vmcuda.sock" ] && break; sleep 0.1; done
[ -S "$run/vmcuda.sock" ] || { cat "$run/host.log"; echo "vmcuda-host did not start" >&2; exit 1; }

# The banner says which executor served, from the logs of that run (the backend's, the
# program's stderr with VMCUDA_VERBOSE=1): FILE...
banner() {
  if grep -qs -e "HOST-MEMORY TEST EXECUTOR" -e "executor=HostMemory" "$@"; then
    cat <<'BANNER'
****************************************************************************
*  NO GPU HERE: the host-memory TEST executor serves this run.             *
*  Memory, copies, streams and events are real; kernels are recorded and   *
*  NOT executed, so kernel results below are not computed.                 *
****************************************************************************
BANNER
  elif grep -qs 'CUDA executor' "$@"; then
    echo "== GPU: $(grep -ohs 'CUDA executor.*' "$@" | head -n 1)"
  else
    echo "== the executor is not in the logs: see them below"
  fi
}
banner "$run/host.log"

echo "== running build/demo/$sample through the bridge"
status=0
LD_LIBRARY_PATH="$root/build/guest/lib" VMCUDA_SERVER="unix:$run/vmcuda.sock" VMCUDA_VERBOSE=1 \
  "build/demo/$sample" || status=$?
echo "== host log"
sed 's/^/   /' "$run/host.log"
kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; host_pid=""

if [ "$demo_vm" = 0 ]; then
  [ -z "$vm_note" ] || echo "== not run inside a VM: $vm_note"
  exit $status
fi

echo "== the guest package and the demo guest image (build/demo/vm)"
pkg=$(PKG_COMPRESS=gzip bash images/guest-deb/build.sh build/demo/pkg 2>"$run/pkg.log" | tail -n 2 | head -n 1) ||
  { cat "$run/pkg.log" >&2; echo "tests/demo.sh: building the guest package failed" >&2; exit 1; }
mkdir -p build/demo/vm/apps
rm -f build/demo/vm/apps/*
cp "build/demo/$sample" build/demo/vm/apps/
image=build/demo/vm/demo.qcow2
# Rebuilt only when what goes in changed (the guest package is reproducible).
key=$(cat "$pkg" "build/demo/$sample" images/build-demo-image.sh images/build-guest.sh images/guest/init   | sha256sum | cut -d' ' -f1)
if [ -f "$image" ] && [ "$(cat "$image.key" 2>/dev/null)" = "$key" ]; then
  echo "   up to date: $image"
else
  bash images/build-demo-image.sh "$image" --guest-deb "$pkg" --apps build/demo/vm/apps 2>"$run/image.log" ||
    { cat "$run/image.log" >&2; echo "tests/demo.sh: building the demo image failed" >&2; exit 1; }
  echo "$key" >"$image.key"
  grep -E '^(image|guest package):' "${image%.qcow2}.manifest.txt" | cut -c1-160 | sed 's/^/   /'
fi

echo "== booting $image under QEMU ($accel) with vmcuda-vhost-vsock; in the guest: vmcuda-run /opt/vmcuda/apps/$sample"
out=build/demo/vm/out
vm_status=0
bash tests/vm/run-guest.sh --mode vhost-user --disk "$image" --accel "$accel" --executor auto \
  --host-bin target/release/vmcuda-host --vhost-bin target/release/vmcuda-vhost-vsock \
  --apps "$sample" --append vmcuda.verbose=1 --timeout 300 --out "$out" 2>"$run/vm.log" || vm_status=$?
if [ "$vm_status" != 0 ]; then
  cat "$run/vm.log" >&2
  echo "tests/demo.sh: the VM did not finish; console in $out/console.log" >&2
  exit 1
fi
banner "$out/vhost.log" "$out/$sample.stderr"
echo "== $sample in the VM: stdout"
cat "$out/$sample.stdout"
echo "== $sample in the VM: stderr"
cat "$out/$sample.stderr"
guest_rc=$(cat "$out/$sample.rc" 2>/dev/null || echo 1)
echo "== $sample in the VM exited with $guest_rc ($(grep -E '^(qemu wall|guest uptime when ready)' "$out/timing.txt" | tr '\n' ' '))"
echo "== vhost-user device log"
sed 's/^/   /' "$out/vhost.log"
[ "$status" != 0 ] || status=$guest_rc
exit $status
