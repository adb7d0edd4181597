#!/usr/bin/env bash
# tests/gpu/run-compute.sh CARRY: on the GPU machine, VMs' compute shares
# (host-backend/src/compute.rs) against native processes time-sliced by the driver, in
# one run: N saturating VMs with equal shares (throughput per VM, Jain's index, the
# aggregate against N native processes), shares 50/25/25, and a decode VM (latency)
# beside a saturating VM (batch), with plain time-slicing (turns off) for comparison.
# Bridged runs see the machine as a VM guest does (tests/gpu/hide-gpu.sh). CARRY:
# bin/vmcuda-host, guest/lib, COMMIT. Results: $OUT/RESULTS-COMPUTE.md and stdout.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-compute.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
load="$repo/bench/compute_load.py"
secs=${VMCUDA_COMPUTE_SECONDS:-5}
port_on=$((20000 + RANDOM % 10000))
port_off=$((port_on + 10000))
vms() { # shares...: [[vm]] entries vm1.. with those shares ("latency"/"batch" suffix = priority)
  printf '[compute]\nenable = %s\n' "$1"; shift
  # More [compute] keys for every daemon, e.g. VMCUDA_COMPUTE_EXTRA='latency_lease_ms = 5'.
  [ -n "${VMCUDA_COMPUTE_EXTRA:-}" ] && printf '%s\n' "$VMCUDA_COMPUTE_EXTRA"
  local i=0
  for s in "$@"; do
    i=$((i + 1))
    printf '[[vm]]\nname = "vm%d"\ntcp = true\ntoken = "compute-share-vm-%02d"\n' "$i" "$i"
    case $s in
      *:*) printf 'compute_share = %s\ncompute_priority = "%s"\n' "${s%%:*}" "${s#*:}" ;;
      *) printf 'compute_share = %s\n' "$s" ;;
    esac
  done
}
start_daemon() { # NAME PORT CONFIG-ARGS...
  local name=$1 port=$2; shift 2
  vms "$@" >"$work/$name.toml"
  "$carry/bin/vmcuda-host" serve --unix "$work/$name.sock" --tcp "127.0.0.1:$port" --config "$work/$name.toml" \
    --state-dir "$work/$name-state" --executor cuda 2>"$work/$name.log" &
  echo $! >"$work/$name.pid"
  for _ in $(seq 200); do [ -S "$work/$name.sock" ] && break; sleep 0.1; done
}
stop_daemon() { kill "$(cat "$work/$1.pid")" 2>/dev/null; wait "$(cat "$work/$1.pid")" 2>/dev/null; }
trap 'for f in "$work"/*.pid; do kill "$(cat "$f")" 2>/dev/null; done; wait 2>/dev/null' EXIT
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
bridged() { # PORT VM MODE START OUTFILE
  ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$carry/guest/lib/libcuda.so.1" LD_LIBRARY_PATH="$carry/guest/lib" \
    VMCUDA_SERVER="tcp:127.0.0.1:$1" VMCUDA_TOKEN="$(printf 'compute-share-vm-%02d' "$2")" \
    timeout -k 5 120 "$py" "$load" "$3" "$4" "$secs" >"$5" 2>"$5.err" &
  loads+=($!)
}
native() { timeout -k 5 120 "$py" "$load" "$1" "$2" "$secs" >"$3" 2>"$3.err" & loads+=($!); }
loads=()
# Wait for the loads started (not the daemons, which are children too).
waitloads() { for p in "${loads[@]}"; do wait "$p"; done; loads=(); }
lead=${VMCUDA_COMPUTE_LEAD:-22}
rate() { sed -n 's/^matmuls_per_s //p' "$1" 2>/dev/null; }
jain() { awk '{s+=$1; q+=$1*$1; n++} END{if(q>0) printf "%.3f", s*s/(n*q); else print "-"}'; }
rows=()
# Equal shares: N native processes, then N VMs with turns, then N VMs without.
for n in ${VMCUDA_COMPUTE_NS:-2 4 8}; do
  t=$(( $(date +%s) + lead ))
  for i in $(seq "$n"); do native saturate "$t" "$work/nat$n.$i"; done; waitloads
  start_daemon on "$port_on" true $(for i in $(seq "$n"); do printf '100 '; done)
  t=$(( $(date +%s) + lead ))
  for i in $(seq "$n"); do bridged "$port_on" "$i" saturate "$t" "$work/on$n.$i"; done; waitloads
  stop_daemon on
  start_daemon off "$port_off" false $(for i in $(seq "$n"); do printf '100 '; done)
  t=$(( $(date +%s) + lead ))
  for i in $(seq "$n"); do bridged "$port_off" "$i" saturate "$t" "$work/off$n.$i"; done; waitloads
  stop_daemon off
  for kind in nat on off; do
    r=$(for i in $(seq "$n"); do rate "$work/$kind$n.$i"; done | tr '\n' ' ')
    sum=$(echo "$r" | tr ' ' '\n' | awk '{s+=$1} END{printf "%.1f", s}')
    rows+=("| $n | $kind | $r | $sum | $(echo "$r" | tr ' ' '\n' | grep . | jain) |")
    echo "${rows[-1]}"
  done
done
# Shares 50/25/25.
start_daemon on "$port_on" true 50 25 25
t=$(( $(date +%s) + lead ))
for i in 1 2 3; do bridged "$port_on" "$i" saturate "$t" "$work/sh.$i"; done
# What each VM was charged (GPU TIME), beside what it got done.
(sleep $((t - $(date +%s) + secs - 1)); "$carry/bin/vmcuda-host" status --state-dir "$work/on-state" >"$work/sh-status.txt" 2>&1) &
waitloads
wait $!
stop_daemon on
shares=$(for i in 1 2 3; do rate "$work/sh.$i"; done | tr '\n' ' ')
# Decode beside a saturating neighbour.
t=$(( $(date +%s) + lead )); native decode "$t" "$work/dec-nat-alone"; waitloads
t=$(( $(date +%s) + lead )); native decode "$t" "$work/dec-nat-noisy"; native saturate "$t" "$work/dec-nat-n"; waitloads
start_daemon on "$port_on" true 100:latency 100:batch
t=$(( $(date +%s) + lead )); bridged "$port_on" 1 decode "$t" "$work/dec-on-alone"; waitloads
t=$(( $(date +%s) + lead )); bridged "$port_on" 1 decode "$t" "$work/dec-on-noisy"; bridged "$port_on" 2 saturate "$t" "$work/dec-on-n"
(sleep $((t - $(date +%s) + secs - 1)); "$carry/bin/vmcuda-host" status --state-dir "$work/on-state" >"$work/status.txt" 2>&1) &
waitloads
wait $!
stop_daemon on
start_daemon off "$port_off" false 100 100
t=$(( $(date +%s) + lead )); bridged "$port_off" 1 decode "$t" "$work/dec-off-noisy"; bridged "$port_off" 2 saturate "$t" "$work/dec-off-n"; waitloads
stop_daemon off
tok() { sed -n 's/^token_ms //p' "$1" 2>/dev/null; }
{
  echo "# Compute shares: VMs taking turns on one GPU"
  echo
  echo "- date: $(date -u +%F) commit: $(head -1 "$carry/COMMIT" 2>/dev/null)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- command: bash tests/gpu/run-compute.sh CARRY (bench/compute_load.py, ${secs} s per measure, all processes started together)"
  echo "- bridged process isolation: $isolation"
  echo "- on: [compute] enable = true (quantum 10 ms${VMCUDA_COMPUTE_EXTRA:+; $VMCUDA_COMPUTE_EXTRA}); off: turns off (the driver time-slices the workers' contexts); nat: native processes"
  echo
  echo "## Saturating processes, equal shares (fp16 4096² matmuls per second)"
  echo
  echo "| N | kind | per process | sum | Jain's index |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
  echo
  echo "## Shares 50/25/25 (matmuls per second): $shares"
  echo
  echo "status near the end of the shares run (GPU TIME is what each VM was charged):"
  echo
  echo '```'
  cat "$work/sh-status.txt"
  echo '```'
  echo
  echo "## Decode (12 × 2048 linear + .item(), per token, ms) beside a saturating neighbour"
  echo
  echo "| run | token ms | neighbour matmuls/s |"
  echo "| --- | --- | --- |"
  echo "| native alone | $(tok "$work/dec-nat-alone") | - |"
  echo "| native beside native (time-slicing) | $(tok "$work/dec-nat-noisy") | $(rate "$work/dec-nat-n") |"
  echo "| bridged alone (latency) | $(tok "$work/dec-on-alone") | - |"
  echo "| bridged latency beside bridged batch (turns on) | $(tok "$work/dec-on-noisy") | $(rate "$work/dec-on-n") |"
  echo "| bridged beside bridged, turns off (time-slicing) | $(tok "$work/dec-off-noisy") | $(rate "$work/dec-off-n") |"
  echo
  echo "status at the end of the turns-on decode run:"
  echo
  echo '```'
  cat "$work/status.txt"
  echo '```'
  echo
  echo "Errors (first lines of each stderr that has any):"
  echo
  echo '```'
  for f in "$work"/*.err; do [ -s "$f" ] && { echo "$(basename "$f"):"; grep -v -e Warning -e "export table 1734dc26" "$f" | head -3; }; done
  grep -iE "panick|error" "$work"/on.log "$work"/off.log 2>/dev/null | head -5
  echo '```'
} >"$out/RESULTS-COMPUTE.md"
cat "$out/RESULTS-COMPUTE.md"
