#!/usr/bin/env bash
# The main job: the host backend plus a sample CUDA program, unmodified, running
# through the bridge. On a machine with an NVIDIA GPU (nvidia-smi lists one) the daemon
# runs the CUDA executor and the kernels run on the GPU; elsewhere it is started with
# `--executor host-memory`, the TEST DOUBLE, and the demo says so on screen and in the
# summary: kernels are not executed there, so no kernel result is called a pass.
#
#   tests/demo.sh [APP]        APP: a program in tests/apps (default vector_add)
#   tests/demo.sh --help       usage and the programs, nothing built
#
# Then the same program inside a VM: the guest package in the demo guest image
# (images/build-demo-image.sh, cached in build/demo/vm, booted with huge pages), booted
# under QEMU from its own disk, reaching the host through the vhost-user vsock device
# (vmcuda-vhost-vsock) with vmcuda-run. As root, QEMU and the image tools are installed
# with apt when missing (.ci/apt-install.sh: no recommended packages, the plan printed
# first, never removing or downgrading an installed package); a QEMU that apt cannot
# install without that is unpacked into build/demo/qemu instead (tests/vm/unpack-qemu.sh,
# nothing installed). Otherwise the demo says at the start what to install and runs the
# host part only.
#   VMCUDA_DEMO_VM=0|1       skip the VM part | require it (default: run it when QEMU
#                            is there or could be installed)
#   VMCUDA_DEMO_ACCEL=kvm    boot with KVM (default tcg: works everywhere, ~10 s)
#   VMCUDA_DEMO_EXECUTOR=cuda|host-memory  the executor (default: cuda when nvidia-smi
#                            lists a GPU, else host-memory)
# All the daemon's state (its socket, --state-dir with the VMs' ledgers and figures)
# lives in a temporary directory of its own, removed on exit: /run/vmcuda is not used.
# It ends with a summary: per run, where it ran (this host or the QEMU guest), on which
# executor (the GPU, or TEST DOUBLE), which data path its copies took (shared memory,
# guest RAM or the socket) and its result. Exit status: 0 when every run passed (on the
# test double: ran through the bridge).
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
  VMCUDA_DEMO_EXECUTOR=cuda|host-memory  (default: cuda when nvidia-smi lists a GPU,
                         else host-memory, the test double, which runs no kernel)
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

# The executor, chosen here and passed explicitly: the daemon's own default is the CUDA
# executor, which refuses to start without a GPU.
if [ -n "${VMCUDA_DEMO_EXECUTOR:-}" ]; then
  executor_arg=$VMCUDA_DEMO_EXECUTOR
  why_executor="VMCUDA_DEMO_EXECUTOR=$executor_arg"
elif gpus=$(nvidia-smi -L 2>/dev/null) && grep -q '^GPU ' <<<"$gpus"; then
  executor_arg=cuda
  why_executor="nvidia-smi lists $(grep -c '^GPU ' <<<"$gpus") GPU(s)"
else
  executor_arg=host-memory
  if command -v nvidia-smi >/dev/null; then
    why_executor="nvidia-smi lists no GPU"
  else
    why_executor="no nvidia-smi, so no NVIDIA driver"
  fi
fi
case "$executor_arg" in cuda|host-memory) ;; *) echo "VMCUDA_DEMO_EXECUTOR must be cuda or host-memory" >&2; exit 2 ;; esac
if [ "$executor_arg" = host-memory ]; then
  echo "== no GPU here ($why_executor): the daemon runs with --executor host-memory, the TEST DOUBLE."
  echo "   Memory, copies, streams and events are real; kernels are recorded, NOT executed,"
  echo "   so what a program's kernels compute is missing. It proves the bridge, not a result."
else
  echo "== GPU: $why_executor; the daemon runs with --executor cuda"
fi

# /run/vmcuda as found, to say at the end that the demo left it alone.
run_state_before=$(find /run/vmcuda 2>/dev/null | sort || true)

vm_note=""
qemu=qemu-system-x86_64
if [ "$demo_vm" != 0 ]; then
  # What the VM part needs: QEMU, and for the image build syslinux, mtools, qemu-img.
  need_tools() {
    need=()
    command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
    command -v syslinux >/dev/null || need+=(syslinux)
    [ -f /usr/lib/syslinux/mbr/mbr.bin ] || need+=(syslinux-common)
    command -v mformat >/dev/null || need+=(mtools)
    command -v qemu-img >/dev/null || need+=(qemu-utils)
  }
  need_tools
  if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    echo "== the VM part needs: ${need[*]} (VMCUDA_DEMO_VM=0 skips the VM part)"
    apt_rc=0
    bash .ci/apt-install.sh "${need[@]}" >/dev/null || apt_rc=$?
    [ "$apt_rc" = 0 ] || [ "$apt_rc" = 3 ] || echo "   apt failed (build/logs/apt.log)"
    need_tools
  fi
  if [ ${#need[@]} -gt 0 ] && [ "${need[*]}" = qemu-system-x86 ]; then
    # Only QEMU is missing: apt would have to remove or downgrade something for it, or
    # we are not root. Debian's QEMU unpacked into the checkout needs neither.
    echo "== QEMU: not installed (see above); unpacking Debian's qemu-system-x86 into build/demo/qemu instead"
    echo "   (apt-get download + dpkg -x: nothing is installed, dpkg's database is not touched)"
    if unpacked=$(bash tests/vm/unpack-qemu.sh build/demo/qemu | tail -n 1) && [ -x "$unpacked" ]; then
      qemu=$unpacked
      need=()
    fi
  fi
  if [ ${#need[@]} -gt 0 ]; then
    [ "$demo_vm" = auto ] || { echo "tests/demo.sh: the VM part needs: sudo apt-get install --no-install-recommends ${need[*]}" >&2; exit 1; }
    demo_vm=0; vm_note="it needs: sudo apt-get install --no-install-recommends ${need[*]} (then run the demo again)"
    echo "== the VM part will not run: $vm_note"
  fi
fi

run=$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-demo.XXXXXX")
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
cargo build --release -p vmcuda-guest --bin vmcuda
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

echo "== starting $bin/vmcuda-host serve --executor $executor_arg (socket and --state-dir in $run)"
"$bin/vmcuda-host" serve --unix "$run/vmcuda.sock" --state-dir "$run/state" \
  --executor "$executor_arg" 2>"$run/host.log" &
host_pid=$!
for _ in $(seq 100); do [ -S "$run/vmcuda.sock" ] && break; sleep 0.1; done
[ -S "$run/vmcuda.sock" ] || { cat "$run/host.log"; echo "vmcuda-host did not start" >&2; exit 1; }

# executor_of LOG...: which executor served, from the backend's log (and the program's
# stderr): "GPU: NAMES (driver N)", "TEST DOUBLE (host-memory executor)" or unknown.
executor_of() {
  local cuda
  if grep -qs -e "HOST-MEMORY TEST EXECUTOR" -e "executor=HostMemory" "$@"; then
    echo "TEST DOUBLE (host-memory executor, no GPU)"
  elif cuda=$(grep -ohs 'CUDA executor: .*' "$@" | head -n 1) && [ -n "$cuda" ]; then
    echo "GPU: ${cuda#CUDA executor: }"
  else
    echo "executor unknown (not in the logs)"
  fi
}
# data_path_of STDERR: how the program's copies travelled, from the guest library's
# VMCUDA_VERBOSE=1 lines.
data_path_of() {
  local why
  if grep -qs 'copies use the shared-memory data path.*in guest huge pages' "$1"; then
    echo "guest RAM (staging in the guest's huge pages, read by the host from guest memory)"
  elif grep -qs 'copies use the shared-memory data path' "$1"; then
    echo "shared memory (staging pages shared with the host process)"
  elif why=$(sed -n 's/^vmcuda: \(.*\); copies\( and calls\)\{0,1\} \(go over\|travel on\) the socket.*/\1/p' "$1" | head -n 1) && [ -n "$why" ]; then
    echo "socket (every byte on the connection: $why)"
  else
    echo "not reported (the program made no staged copy)"
  fi
}

# Right under a program's output on the test double: why its kernel results are
# wrong, and what the run did check. Nothing when the program launched no kernel of
# its own. OUTPUT LOG...
test_double_note() {
  local output=$1 launches wrong
  shift
  launches=$(cat "$@" 2>/dev/null | grep -c 'kernel launch recorded, NOT executed' || true)
  [ "$launches" -gt 0 ] || return 0
  wrong=$(sed -n 's/^wrong elements: \([0-9]*\).*/\1/p' "$output" | head -n 1)
  echo "== on the TEST DOUBLE: kernels do not run, so what the program's kernels compute is"
  echo "   missing and the results it printed above are not computed${wrong:+ (\"wrong elements: $wrong\")}."
  echo "   What this run did show: the program's memory, copies, memsets, streams and events"
  echo "   went through the bridge, and $launches kernel launch(es) reached the host with grid,"
  echo "   block and arguments (\"kernel launch recorded\" in the log below). Results need a GPU."
}

results=()
runs=0
passed=0
failed=0
# record WHERE RC STDERR LOG...: one line of the summary, and the tally. On a GPU the
# program's own check (its exit status) is the result; on the test double no kernel
# ran, so a run counts as done when it reached the host and was not killed.
record() {
  local where=$1 rc=$2 err=$3 executor path verdict ok=1
  shift 3
  executor=$(executor_of "$@" "$err")
  path=$(data_path_of "$err")
  case "$executor" in
    TEST\ DOUBLE*)
      # "guest connected": a worker of the backend served this program.
      if [ "$rc" -ge 128 ] || ! grep -qs 'guest connected' "$@"; then
        verdict="FAIL (exit $rc: did not run through the bridge)"; ok=0
      else
        verdict="ran (exit $rc), results not computed (test double)"
      fi ;;
    GPU*)
      if [ "$rc" = 0 ]; then verdict="pass (the program's own check)"; else verdict="FAIL (exit $rc, the program's own check)"; ok=0; fi ;;
    *) verdict="FAIL (exit $rc; the backend's log names no executor)"; ok=0 ;;
  esac
  runs=$((runs + 1))
  if [ "$ok" = 1 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  results+=("$sample, $where" "    executor:  $executor" "    data path: $path" "    result:    $verdict")
}

echo "== running build/demo/$sample through the bridge, on this host (VMCUDA_VERBOSE=1: the library says which path it takes)"
set +e
# vmcuda's driver first, NVIDIA's runtime (the nvcc wheels') after it.
LD_LIBRARY_PATH="$guest_lib:$cu13/lib" VMCUDA_SERVER="unix:$run/vmcuda.sock" VMCUDA_VERBOSE=1 \
  "build/demo/$sample" > >(tee "$run/host-run.out") 2> >(tee "$run/host-run.err" >&2)
status=$?
set -e
sleep 0.2  # tee's last lines
kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; host_pid=""
case "$(executor_of "$run/host.log")" in TEST\ DOUBLE*) test_double_note "$run/host-run.out" "$run/host.log" ;; esac
echo "== host log"
sed 's/^/   /' "$run/host.log"
record "on this host, through vmcuda-host on a Unix socket" "$status" "$run/host-run.err" "$run/host.log"

summary() {
  local r run_state_after
  echo "== summary"
  for r in "${results[@]}"; do echo "   $r"; done
  [ -z "$vm_note" ] || echo "   not run inside a VM: $vm_note"
  if [ "$executor_arg" = host-memory ]; then
    echo "   every run was on the TEST DOUBLE: no kernel ran, so no kernel result was checked"
  fi
  if [ "$executor_arg" = host-memory ]; then
    echo "   runs: $runs, ran through the bridge: $passed, failed: $failed"
  else
    echo "   runs: $runs, passed: $passed, failed: $failed"
  fi
  echo "   binaries: $bin (vmcuda-host, vmcuda-vhost-vsock, vmcuda); guest libraries: $guest_lib"
  run_state_after=$(find /run/vmcuda 2>/dev/null | sort || true)
  if [ "$run_state_after" = "$run_state_before" ]; then
    echo "   state: the daemon's socket and state were in $run (removed now); /run/vmcuda untouched"
  else
    # Not the demo's daemons (their --state-dir and state_dir are in $run): another one.
    echo "   state: the demo's daemons kept theirs in $run (removed now); /run/vmcuda changed"
    echo "   while it ran, so another vmcuda-host on this machine wrote it"
  fi
}

if [ "$demo_vm" = 0 ]; then
  summary
  exit $((failed > 0))
fi

echo "== the guest package and the demo guest image (build/demo/vm)"
# From what was built above (the libraries and the vmcuda command), not built again.
pkg=$(PKG_COMPRESS=gzip bash images/guest-deb/build.sh build/demo/pkg --no-build --guest-lib "$guest_lib" \
  2>"$run/pkg.log" | tail -n 2 | head -n 1) ||
  { cat "$run/pkg.log" >&2; echo "tests/demo.sh: building the guest package failed" >&2; exit 1; }
mkdir -p build/demo/vm/apps
rm -f build/demo/vm/apps/*
cp "build/demo/$sample" build/demo/vm/apps/
image=build/demo/vm/demo.qcow2
# Rebuilt only when what goes in changed (the guest package is reproducible).
key=$(cat "$pkg" "build/demo/$sample" images/build-demo-image.sh images/build-guest.sh images/guest/init | sha256sum | cut -d' ' -f1)
if [ -f "$image" ] && [ "$(cat "$image.key" 2>/dev/null)" = "$key" ]; then
  echo "   up to date: $image"
else
  bash images/build-demo-image.sh "$image" --guest-deb "$pkg" --apps build/demo/vm/apps 2>"$run/image.log" ||
    { cat "$run/image.log" >&2; echo "tests/demo.sh: building the demo image failed" >&2; exit 1; }
  echo "$key" >"$image.key"
  grep -E '^(image|guest package|boot menu):' "${image%.qcow2}.manifest.txt" | cut -c1-160 | sed 's/^/   /'
fi

echo "== booting $image under QEMU ($accel) with vmcuda-vhost-vsock --executor $executor_arg; in the guest: vmcuda-run /opt/vmcuda/apps/$sample"
out=build/demo/vm/out
vm_status=0
bash tests/vm/run-guest.sh --mode vhost-user --disk "$image" --accel "$accel" --executor "$executor_arg" \
  --qemu "$qemu" --host-bin "$bin/vmcuda-host" --vhost-bin "$bin/vmcuda-vhost-vsock" \
  --apps "$sample" --append vmcuda.verbose=1 --timeout 300 --out "$out" 2>"$run/vm.log" || vm_status=$?
if [ "$vm_status" != 0 ]; then
  cat "$run/vm.log" >&2
  echo "tests/demo.sh: the VM did not finish; console in $out/console.log" >&2
  record "in the QEMU guest ($accel): the VM did not finish" 255 /dev/null "$out/vhost.log"
  summary
  exit 1
fi
hugepages=$(sed -n 's/^=== VMCUDA-GUEST-INFO .*hugepages=\([0-9]*\).*/\1/p' "$out/console.log" | head -n 1)
echo "== the guest booted with ${hugepages:-no} huge pages (kernel command line hugepages=N, from the image's boot menu)"
echo "== $sample in the VM: stdout"
cat "$out/$sample.stdout"
echo "== $sample in the VM: stderr"
cat "$out/$sample.stderr"
guest_rc=$(cat "$out/$sample.rc" 2>/dev/null || echo 1)
echo "== $sample in the VM exited with $guest_rc ($(grep -E '^(qemu wall|guest uptime when ready)' "$out/timing.txt" | tr '\n' ' '))"
case "$(executor_of "$out/vhost.log")" in TEST\ DOUBLE*) test_double_note "$out/$sample.stdout" "$out/vhost.log" ;; esac
echo "== vhost-user device log"
sed 's/^/   /' "$out/vhost.log"
record "in the QEMU guest ($accel, ${hugepages:-0} huge pages), with vmcuda-run through vmcuda-vhost-vsock" \
  "$guest_rc" "$out/$sample.stderr" "$out/vhost.log"
summary
exit $((failed > 0))
