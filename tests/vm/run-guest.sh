#!/usr/bin/env bash
# shellcheck disable=SC2054  # commas separate QEMU sub-options, not array elements
# Boots the vmcuda test guest (images/build-guest.sh) under QEMU TCG, lets it run the
# CUDA test programs against a vmcuda backend on this machine, and collects each
# program's stdout, stderr and exit code.
#
#   tests/vm/run-guest.sh --mode net|vhost-user|vsock-loopback [options]
#
# Modes:
#   net         vmcuda-host serve --tcp 127.0.0.1:PORT; the guest gets virtio-net with
#               QEMU user networking and VMCUDA_SERVER=tcp:10.0.2.2:PORT (the TCP
#               fallback of VirtualBox/VMware guests).
#   vhost-user  vmcuda-vhost-vsock (the vhost-user vsock device, which starts its own
#               vmcuda-host) and QEMU's vhost-user-vsock-pci on memfd-backed guest RAM;
#               the guest uses VMCUDA_SERVER=vsock:2:7731.
#   vsock-loopback  no device and no host backend: vmcuda-host runs inside the guest
#               (image built with --host-bin), listening on AF_VSOCK; the programs
#               reach it over vsock_loopback as vsock:1:7731. Its log is host.log.
#
# Options:
#   --kernel FILE     guest kernel        (default: build/vm/vmlinuz)
#   --initrd FILE     guest initramfs     (default: build/vm/initramfs.cpio.gz)
#   --disk FILE       boot this disk image instead of --kernel/--initrd (the demo image,
#                     images/build-demo-image.sh): it boots with its own bootloader, gets
#                     the options through QEMU's -fw_cfg (opt/vmcuda/cmdline), runs with
#                     snapshot=on (the image is not written) and powers off at the end
#   --host-bin FILE   vmcuda-host         (default: target/debug/vmcuda-host)
#   --vhost-bin FILE  vmcuda-vhost-vsock  (default: target/debug/vmcuda-vhost-vsock)
#   --executor NAME   backend executor    (default: host-memory)
#   --out DIR         results             (default: build/vm/out-MODE)
#   --timeout SECS    whole boot + run; QEMU is killed and the run fails past it (default 900)
#   --app-timeout S   kill one program after S seconds inside the guest (default: none)
#   --apps a,b,c      programs to run     (default: all in the image)
#   --qemu PATH       QEMU binary         (default: qemu-system-x86_64)
#   --accel NAME      tcg or kvm          (default: tcg)
#   --mem SIZE        guest RAM           (default: 512M)
#   --smp N           guest CPUs          (default: 1)
#   --append ARGS     more kernel command line (e.g. vmcuda.verbose=1)
#   --show-console    copy the serial console to stderr while it runs
#   --expect-rc a=0,b=1  the exit codes the programs should have (those of the same
#                     programs on the host): the summary marks a non-zero one that
#                     matches as expected, and one that differs as UNEXPECTED
# Environment: QEMU_EXTRA (more QEMU arguments, split on spaces).
#
# Results in --out: APP.stdout, APP.stderr, APP.rc per program; summary.txt (name, rc,
# seconds, and with --expect-rc whether the rc was expected); timing.txt; console.log (raw serial output); qemu.log; host.log or
# vhost.log. Exit status: 0 when the guest printed VMCUDA-GUEST-DONE (whatever the
# programs' own exit codes), 1 otherwise, 2 for bad usage.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" | grep -v shellcheck | sed 's/^# \{0,1\}//' >&2; exit 2; }
log() { echo "run-guest.sh: $*" >&2; }

mode=net
kernel="$repo/build/vm/vmlinuz"
initrd="$repo/build/vm/initramfs.cpio.gz"
disk=""
accel=tcg
host_bin="$repo/target/debug/vmcuda-host"
vhost_bin="$repo/target/debug/vmcuda-vhost-vsock"
executor=host-memory
out=""
timeout_s=900
app_timeout=""
apps=""
qemu="qemu-system-x86_64"
mem=512M
smp=1
append_extra=""
show_console=0
expect_rc=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --initrd) initrd=$2; shift 2 ;;
    --disk) disk=$2; shift 2 ;;
    --accel) accel=$2; shift 2 ;;
    --host-bin) host_bin=$2; shift 2 ;;
    --vhost-bin) vhost_bin=$2; shift 2 ;;
    --executor) executor=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --app-timeout) app_timeout=$2; shift 2 ;;
    --apps) apps=$2; shift 2 ;;
    --qemu) qemu=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --append) append_extra=$2; shift 2 ;;
    --show-console) show_console=1; shift ;;
    --expect-rc) expect_rc=$2; shift 2 ;;
    -h|--help) usage ;;
    *) log "unknown argument $1"; usage ;;
  esac
done
case "$mode" in net|vhost-user|vsock-loopback) ;; *) log "--mode must be net, vhost-user or vsock-loopback"; exit 2 ;; esac
[ -n "$out" ] || out="$repo/build/vm/out-$mode"
boot_files=("$kernel" "$initrd")
[ -z "$disk" ] || boot_files=("$disk")
for f in "${boot_files[@]}" "$host_bin"; do
  [ -f "$f" ] || { log "missing $f (see images/README.md)"; exit 2; }
done
if [ "$mode" = vhost-user ] && [ ! -x "$vhost_bin" ]; then
  log "missing $vhost_bin (cargo build -p vmm-glue)"; exit 2
fi
command -v "$qemu" >/dev/null || { log "no QEMU at $qemu"; exit 2; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/*.stdout "$out"/*.stderr "$out"/*.rc "$out"/summary.txt "$out"/timing.txt \
  "$out"/console.log "$out"/qemu.log "$out"/host.log "$out"/vhost.log
# Everything the backend keeps (its configuration, the VMs' ledgers and figures: the
# configuration's state_dir) stays in here, never in the system's /run/vmcuda.
work=$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-vm.XXXXXX")

daemon_pid=""
cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t_start=$(date +%s.%N)
deadline=$(( $(date +%s) + timeout_s ))

# True once something listens on 127.0.0.1:PORT (read from /proc, so no connection
# reaches the daemon).
listening() {
  local hex
  hex=$(printf '0100007F:%04X' "$1")
  awk -v a="$hex" '$2 == a && $4 == "0A" { found = 1 } END { exit !found }' /proc/net/tcp
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_for() {  # wait_for DESCRIPTION SECONDS COMMAND...
  local what=$1 secs=$2; shift 2
  for _ in $(seq $((secs * 10))); do
    "$@" && return 0
    if [ -n "$daemon_pid" ] && ! kill -0 "$daemon_pid" 2>/dev/null; then
      log "$what: the backend exited"; return 1
    fi
    sleep 0.1
  done
  log "$what: not ready after ${secs}s"; return 1
}

qemu_args=(-accel "$accel" -m "$mem" -smp "$smp" -nodefaults -no-reboot -display none -serial stdio)
if [ -n "$disk" ]; then
  # The image's bootloader has the console and the rest of the command line; these
  # options reach /init through the firmware configuration, and win over its own.
  qemu_args+=(-drive "file=$disk,if=virtio,snapshot=on" -fw_cfg "name=opt/vmcuda/cmdline,file=$work/cmdline")
  cmdline="vmcuda.shell=0"
else
  qemu_args+=(-kernel "$kernel" -initrd "$initrd")
  cmdline="console=ttyS0 quiet loglevel=1 panic=-1"
fi

case "$mode" in
  net)
    port=$(free_port)
    # TCP guests are admitted by token only: a fresh one for this run.
    token="test-$$-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
    # The run's ledgers and figures stay in its own directory, never in /run/vmcuda.
    printf 'state_dir = "%s"\n\n[[vm]]\nname = "vmcuda-test-%s"\ntcp = true\ntoken = "%s"\n' \
      "$work/state" "$$" "$token" >"$work/host.toml"
    "$host_bin" serve --config "$work/host.toml" --tcp "127.0.0.1:$port" --executor "$executor" >"$out/host.log" 2>&1 &
    daemon_pid=$!
    wait_for "vmcuda-host on 127.0.0.1:$port" 30 listening "$port" || { cat "$out/host.log" >&2; exit 1; }
    qemu_args+=(-machine q35 -netdev user,id=n0 -device virtio-net-pci,netdev=n0)
    cmdline+=" vmcuda.net=1 vmcuda.server=tcp:10.0.2.2:$port vmcuda.token=$token"
    ;;
  vhost-user)
    sock="$work/vsock.sock"
    # The device names its VM to the workers; the configuration admits that name.
    # The device's workers keep their ledgers and figures in the run's own directory.
    printf 'state_dir = "%s"\n\n[[vm]]\nname = "vmcuda-test-%s"\n' "$work/state" "$$" >"$work/host.toml"
    # Every worker line kept: the tests count the device's lines per program (a VM's
    # workers are otherwise held to 100 lines at once, then 5 a second, together).
    VMCUDA_VM_LOG_BURST=100000 "$vhost_bin" --socket "$sock" --guest-cid 3 --vm-name "vmcuda-test-$$" --port 7731 --config "$work/host.toml" \
      --host-bin "$host_bin" --executor "$executor" >"$out/vhost.log" 2>&1 &
    daemon_pid=$!
    wait_for "vmcuda-vhost-vsock socket $sock" 30 test -S "$sock" || { cat "$out/vhost.log" >&2; exit 1; }
    qemu_args+=(-object "memory-backend-memfd,id=mem,size=$mem,share=on"
      -machine q35,memory-backend=mem
      -chardev "socket,id=vc,path=$sock" -device vhost-user-vsock-pci,chardev=vc)
    # Huge pages for the guest library's staging area: the device's workers copy
    # straight from them (the shared-memory data path through guest RAM).
    cmdline+=" vmcuda.server=vsock:2:7731 hugepages=40"
    ;;
  vsock-loopback)
    qemu_args+=(-machine q35)
    cmdline+=" vmcuda.host=vsock vmcuda.server=vsock:1:7731"
    ;;
esac
[ -n "$apps" ] && cmdline+=" vmcuda.apps=$apps"
[ -n "$app_timeout" ] && cmdline+=" vmcuda.timeout=$app_timeout"
[ -n "$append_extra" ] && cmdline+=" $append_extra"
if [ -n "$disk" ]; then
  printf '%s\n' "$cmdline" >"$work/cmdline"
  cp "$work/cmdline" "$out/fw_cfg-cmdline"
else
  qemu_args+=(-append "$cmdline")
fi
# shellcheck disable=SC2206  # QEMU_EXTRA is split on spaces on purpose
[ -n "${QEMU_EXTRA:-}" ] && qemu_args+=(${QEMU_EXTRA})

remaining=$(( deadline - $(date +%s) ))
[ "$remaining" -gt 0 ] || remaining=1
printf '%q ' "$qemu" "${qemu_args[@]}" >"$out/qemu.cmd"; echo >>"$out/qemu.cmd"
log "mode $mode: booting (timeout ${remaining}s; console in $out/console.log)"
t_qemu=$(date +%s.%N)
set +e
if [ "$show_console" = 1 ]; then
  timeout -k 5 "$remaining" "$qemu" "${qemu_args[@]}" </dev/null 2>"$out/qemu.log" | tee "$out/console.log" >&2
  qemu_rc=${PIPESTATUS[0]}
else
  timeout -k 5 "$remaining" "$qemu" "${qemu_args[@]}" </dev/null >"$out/console.log" 2>"$out/qemu.log"
  qemu_rc=$?
fi
set -e
t_end=$(date +%s.%N)

# Split the console into per-program files. Only lines that start with "=== VMCUDA"
# are markers; a stream's last line gets its newline back unless NOEOL follows it.
awk -v dir="$out" -v expect="$expect_rc" '
  BEGIN {
    n = split(expect, pairs, ",")
    for (i = 1; i <= n; i++) if (split(pairs[i], kv, "=") == 2) want[kv[1]] = kv[2]
  }
  function flush() {
    if (cur != "") {
      if (has_pending) printf "%s%s", pending, (noeol ? "" : "\n") > cur
      close(cur)
    }
    cur = ""; has_pending = 0; noeol = 0
  }
  function open_stream(f) { flush(); cur = f; printf "" > cur }
  { sub(/\r$/, "") }
  /^=== VMCUDA-APP-BEGIN / { open_stream(dir "/" $3 ".stdout"); next }
  /^=== VMCUDA-APP-STDERR / { open_stream(dir "/" $3 ".stderr"); next }
  /^=== VMCUDA-APP-NOEOL/ { noeol = 1; next }
  /^=== VMCUDA-HOSTLOG-BEGIN/ { open_stream(dir "/host.log"); next }
  /^=== VMCUDA-APP-END / {
    flush()
    rc = ""; secs = ""
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^rc=/) rc = substr($i, 4)
      if ($i ~ /^secs=/) secs = substr($i, 6)
    }
    print rc > (dir "/" $3 ".rc"); close(dir "/" $3 ".rc")
    # A program that fails on purpose (errors, device_assert...) exits non-zero on the
    # host too: marked, so that the table is read at a glance.
    note = ""
    if ($3 in want && want[$3] != rc) note = "  UNEXPECTED: rc=" want[$3] " on the host"
    else if ($3 in want && rc != "0") note = "  expected (the same on the host)"
    printf "%-20s rc=%-4s %8ss%s\n", $3, rc, secs, note > (dir "/summary.txt")
    next
  }
  /^=== VMCUDA/ { flush(); next }
  cur != "" {
    if (has_pending) print pending > cur
    pending = $0; has_pending = 1
  }
  END { flush() }
' "$out/console.log"
touch "$out/summary.txt"

num() {
  local v
  v=$(sed -n "s/^=== VMCUDA-$1.*uptime=\([0-9.]*\).*/\1/p" "$out/console.log" | head -n1)
  if [ -n "$v" ]; then echo "${v}s"; else echo "n/a"; fi
}
done_line=$(grep -a '^=== VMCUDA-GUEST-DONE' "$out/console.log" || true)
{
  echo "mode: $mode"
  echo "qemu wall: $(awk "BEGIN { printf \"%.2f\", $t_end - $t_qemu }")s"
  echo "total wall (backend start to QEMU exit): $(awk "BEGIN { printf \"%.2f\", $t_end - $t_start }")s"
  echo "guest uptime at init start: $(num GUEST-BOOT)"
  echo "guest uptime when ready to run programs: $(num GUEST-INFO)"
  echo "guest uptime when done: $(num GUEST-DONE)"
  echo "programs: $(wc -l <"$out/summary.txt"), summed run time: $(awk '{ s += $3 } END { printf "%.2f", s }' "$out/summary.txt")s"
} >"$out/timing.txt"

cat "$out/summary.txt" >&2
cat "$out/timing.txt" >&2
if [ -z "$done_line" ]; then
  running=$(grep -a '^=== VMCUDA-APP-RUN ' "$out/console.log" | tail -n1 | tr -d '\r' | awk '{ print $3 }')
  last_end=$(grep -a '^=== VMCUDA-APP-END ' "$out/console.log" | tail -n1 | tr -d '\r' | awk '{ print $3 }')
  if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
    log "FAIL: timed out after ${timeout_s}s${running:+ (last program started: $running)}"
  else
    log "FAIL: QEMU exited with $qemu_rc before VMCUDA-GUEST-DONE${running:+ (last program started: $running)}"
  fi
  [ -n "$running" ] && [ "$running" != "$last_end" ] && log "$running never finished"
  echo "--- last console lines:" >&2; tail -n 20 "$out/console.log" | tr -d '\r' >&2
  [ -s "$out/qemu.log" ] && { echo "--- qemu.log:" >&2; tail -n 20 "$out/qemu.log" >&2; }
  exit 1
fi
log "guest done; results in $out"
