#!/usr/bin/env bash
# The main job: the host backend plus a sample CUDA program, unmodified, running
# through the bridge. On a machine with an NVIDIA GPU and driver the kernels run on
# the GPU; elsewhere the host-memory test executor stands in, and says so.
#
#   tests/demo.sh [APP]        APP: a program in tests/apps (default vector_add)
#   tests/demo.sh --help       usage and the programs, nothing built
#
# Then the same program inside a VM: the guest package in the demo guest image
# (images/build-demo-image.sh, cached in build/demo/vm), booted under QEMU from its own
# disk, reaching the host through the vhost-user vsock device (vmcuda-vhost-vsock) with
# vmcuda-run. As root, QEMU and the image tools are installed with apt when missing
# (.ci/apt-install.sh, as tests/run.sh does); otherwise the demo says at the start what
# to install and runs the host part only.
#   VMCUDA_DEMO_VM=0|1       skip the VM part | require it (default: run it when QEMU
#                            is there or could be installed)
#   VMCUDA_DEMO_ACCEL=kvm    boot with KVM (default tcg: works everywhere, ~10 s)
# It ends with a summary: each run, where (this host or the QEMU guest), on which
# executor, and its result. Exit status: 0 when every run passed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The programs, for the usage text: several to a line.
app_list() {
  local names=() f
  for f in tests/apps/*.cu; do names+=("$(basename "$f" .cu)"); done
  printf '%s\n' "${names[@]}" | paste -sd ' ' | fold -s -w 76 | sed 's/^/  /; s/ *$//'
}
usage() {
  cat <<'EOF'
usage: tests/demo.sh [APP]
Builds vmcuda, starts the host daemon (vmcuda-host) and runs APP, a CUDA program from
tests/apps (default: vector_add), through the bridge on this host, then inside a QEMU
guest through the vhost-user vsock device.
  VMCUDA_DEMO_VM=0       skip the VM part (=1: fail if it cannot run)
  VMCUDA_DEMO_ACCEL=kvm  boot the VM with KVM (default: tcg)
APP is one of:
EOF
  app_list
}
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  -*) echo "tests/demo.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
esac
[ $# -le 1 ] || { usage >&2; exit 2; }
# `vector_add`, `vector_add.cu` and `tests/apps/vector_add.cu` all name the same program.
sample=$(basename "${1:-vector_add}" .cu)
if [ ! -f "tests/apps/$sample.cu" ]; then
  echo "tests/demo.sh: there is no program $sample in tests/apps" >&2
  usage >&2
  exit 2
fi

demo_vm=${VMCUDA_DEMO_VM:-auto}
case "$demo_vm" in 0|1|auto) ;; *) echo "VMCUDA_DEMO_VM must be 0 or 1" >&2; exit 2 ;; esac
accel=${VMCUDA_DEMO_ACCEL:-tcg}
case "$accel" in tcg|kvm) ;; *) echo "VMCUDA_DEMO_ACCEL must be tcg or kvm" >&2; exit 2 ;; esac
vm_note=""
if [ "$demo_vm" != 0 ]; then
  # What the VM part needs: QEMU, and for the image build syslinux, mtools, qemu-img.
  need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v syslinux >/dev/null || need+=(syslinux)
  [ -f /usr/lib/syslinux/mbr/mbr.bin ] || need+=(syslinux-common)
  command -v mformat >/dev/null || need+=(mtools)
  command -v qemu-img >/dev/null || need+=(qemu-utils)
  if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    echo "== installing what the VM part needs: ${need[*]} (VMCUDA_DEMO_VM=0 skips the VM part)"
    if ! bash .ci/apt-install.sh "${need[@]}"; then
      [ "$demo_vm" = auto ] || { echo "tests/demo.sh: the VM part cannot run without ${need[*]}" >&2; exit 1; }
      demo_vm=0; vm_note="installing ${need[*]} failed (build/logs/apt.log)"
    fi
  elif [ ${#need[@]} -gt 0 ]; then
    [ "$demo_vm" = auto ] || { echo "tests/demo.sh: the VM part needs: sudo apt-get install ${need[*]}" >&2; exit 1; }
    demo_vm=0; vm_note="it needs: sudo apt-get install ${need[*]} (then run the demo again)"
    echo "== the VM part will not run: $vm_note"
  fi
fi

run=$(mktemp -d)
host_pid=""
stop() {
  if [ -n "$host_pid" ]; then kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; fi
  rm -rf "$run"
}
trap stop EXIT

# Cargo reports errors and warnings only: its hundreds of `Compiling` lines say nothing
# a first-time reader needs.
export CARGO_TERM_QUIET=true
echo "== building vmcuda: the host daemon, the guest library and the vmcuda command (cargo, release; the first build takes minutes)"
if [ "$demo_vm" != 0 ]; then
  cargo build --release -p vmcuda-host -p vmcuda-vmm-glue
else
  cargo build --release -p vmcuda-host
fi
guest_lib="$root/build/guest/lib"
bash guest-lib/build-libs.sh "$guest_lib" >/dev/null
bin=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release
echo "   $bin/vmcuda-host, $bin/vmcuda; the guest libraries in $guest_lib"

echo "== building tests/apps/$sample.cu with nvcc (-cudart shared: the runtime is loaded at run time)"
cu13=$(bash .ci/install-nvcc.sh | tail -n 1)
mkdir -p build/demo "$run/src"
cp "tests/apps/$sample.cu" "$run/src/"
# tests/apps/build.sh knows which libraries each program links (cuBLAS, the driver...).
NVCC="$cu13/bin/nvcc" bash tests/apps/build.sh "$root/build/demo" "$run/src" 2>"$run/nvcc.log" ||
  { cat "$run/nvcc.log" >&2; echo "tests/demo.sh: building $sample failed" >&2; exit 1; }
echo "   build/demo/$sample"

"$bin/vmcuda-host" serve --unix "$run/vmcuda.sock" --executor auto --state-dir "$run/state" 2>"$run/host.log" &
host_pid=$!
for _ in $(seq 100); do [ -S "$run/vmcuda.sock" ] && break; sleep 0.1; done
[ -S "$run/vmcuda.sock" ] || { cat "$run/host.log"; echo "vmcuda-host did not start" >&2; exit 1; }

# The banner says which executor served, from the logs of that run (the backend's, the
# program's stderr with VMCUDA_VERBOSE=1): FILE... It sets `executor` for the summary.
banner() {
  if grep -qs -e "HOST-MEMORY TEST EXECUTOR" -e "executor=HostMemory" "$@"; then
    executor="host-memory test executor, no GPU"
    cat <<'BANNER'
****************************************************************************
*  NO GPU HERE: the host-memory TEST executor serves this run.             *
*  Memory, copies, streams and events are real; kernels are recorded and   *
*  NOT executed, so kernel results below are not computed.                 *
****************************************************************************
BANNER
  elif grep -qs 'CUDA executor' "$@"; then
    executor="CUDA executor: $(grep -ohs 'CUDA executor.*' "$@" | head -n 1 | sed 's/^CUDA executor:* *//')"
    echo "== GPU: $(grep -ohs 'CUDA executor.*' "$@" | head -n 1)"
  else
    executor="executor unknown (see the logs)"
    echo "== the executor is not in the logs: see them below"
  fi
}

# Right under a program's output on the test executor: why its kernel results are
# wrong, and what the run did check. Nothing when the program launched no kernel of
# its own. OUTPUT LOG...
test_executor_note() {
  local output=$1 launches wrong copies
  shift
  launches=$(cat "$@" 2>/dev/null | grep -c 'kernel launch recorded, NOT executed' || true)
  [ "$launches" -gt 0 ] || return 0
  wrong=$(sed -n 's/^wrong elements: \([0-9]*\).*/\1/p' "$output" | head -n 1)
  copies="a program that checks what it copies back exits non-zero on a difference"
  [ "$sample" != vector_add ] ||
    copies="vector_add reads its inputs back and exits non-zero on a difference"
  echo "== EXPECTED on the test executor: kernels do not run here, so what the program's"
  echo "   kernels compute is missing and those results above are wrong. That is not a bug."
  [ -z "$wrong" ] || echo "   (\"wrong elements: $wrong\": no element was computed.)"
  echo "   Still checked by this run: memory, copies, memsets, streams and events are real"
  echo "   ($copies),"
  echo "   and $launches kernel launch(es) reached the host with grid, block and arguments"
  echo "   marshalled (\"kernel launch recorded\" in the log below; tests/run.sh checks those"
  echo "   arguments byte for byte). Kernel results need a GPU."
}

results=()
passed=0
failed=0
# record WHERE RC: one line of the summary.
record() {
  local verdict=pass
  if [ "$2" = 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    verdict="FAIL"
    case "$executor" in host-memory*)
      verdict="FAIL (on the test executor, a program that checks what its kernels computed fails)" ;;
    esac
  fi
  results+=("$sample $1 ($executor): exit $2, $verdict")
}

banner "$run/host.log"
echo "== running build/demo/$sample through the bridge, on this host"
set +e
# vmcuda's driver first, NVIDIA's runtime (the nvcc wheels') after it.
LD_LIBRARY_PATH="$guest_lib:$cu13/lib" VMCUDA_SERVER="unix:$run/vmcuda.sock" VMCUDA_VERBOSE=1 \
  "build/demo/$sample" | tee "$run/host-run.out"
status=${PIPESTATUS[0]}
set -e
kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; host_pid=""
banner "$run/host.log" >/dev/null
case "$executor" in host-memory*) test_executor_note "$run/host-run.out" "$run/host.log" ;; esac
echo "== host log"
sed 's/^/   /' "$run/host.log"
record "on this host, through vmcuda-host on a Unix socket" "$status"

summary() {
  echo "== summary"
  local r
  for r in "${results[@]}"; do echo "   $r"; done
  [ -z "$vm_note" ] || echo "   not run inside a VM: $vm_note"
  echo "   programs run: ${#results[@]}, passed: $passed, failed: $failed"
  echo "   binaries: $bin (vmcuda-host, vmcuda-vhost-vsock, vmcuda); guest libraries: $guest_lib"
}

if [ "$demo_vm" = 0 ]; then
  summary
  exit $((failed > 0))
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
  --host-bin "$bin/vmcuda-host" --vhost-bin "$bin/vmcuda-vhost-vsock" \
  --apps "$sample" --append vmcuda.verbose=1 --timeout 300 --out "$out" 2>"$run/vm.log" || vm_status=$?
if [ "$vm_status" != 0 ]; then
  cat "$run/vm.log" >&2
  echo "tests/demo.sh: the VM did not finish; console in $out/console.log" >&2
  banner "$out/vhost.log" >/dev/null
  record "in the QEMU guest ($accel): the VM did not finish" 1
  summary
  exit 1
fi
banner "$out/vhost.log" "$out/$sample.stderr"
echo "== $sample in the VM: stdout"
cat "$out/$sample.stdout"
echo "== $sample in the VM: stderr"
cat "$out/$sample.stderr"
guest_rc=$(cat "$out/$sample.rc" 2>/dev/null || echo 1)
echo "== $sample in the VM exited with $guest_rc ($(grep -E '^(qemu wall|guest uptime when ready)' "$out/timing.txt" | tr '\n' ' '))"
case "$executor" in host-memory*) test_executor_note "$out/$sample.stdout" "$out/vhost.log" ;; esac
echo "== vhost-user device log"
sed 's/^/   /' "$out/vhost.log"
record "in the QEMU guest ($accel), with vmcuda-run through vmcuda-vhost-vsock" "$guest_rc"
summary
exit $((failed > 0))
