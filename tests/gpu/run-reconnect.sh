#!/usr/bin/env bash
# tests/gpu/run-reconnect.sh CARRY: on the GPU machine, guests whose connections are cut
# under them come back to their sessions (CUDA executor; docs/survival.md,
# "Reconnect"). Every connection goes through bin/cut-proxy, a Unix relay that cuts
# all the connections it carries every few hundred milliseconds, as a VM's live
# migration resets its vsock connections. A torch training loop
# (tests/gpu/suspend_train.py) bridged through it against a native run's losses, and
# suspend_steps (patterns written, copied and read back each step) for the pause a
# program sees. Bridged runs see the machine as a VM guest does (tests/gpu/hide-gpu.sh).
# CARRY: bin/vmcuda-host, bin/cut-proxy, guest/lib, suspend_steps, COMMIT.
# Results: $OUT/RESULTS-RECONNECT.md and stdout.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-reconnect.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
host="$carry/bin/vmcuda-host"
"$host" serve --unix "$work/s.sock" --state-dir "$work/state" --executor cuda 2>>"$work/host.log" &
daemon=$!
for _ in $(seq 200); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
proxy=""
trap 'kill $daemon $proxy 2>/dev/null; wait 2>/dev/null' EXIT
cutting() {
  "$carry/bin/cut-proxy" "$work/p.sock" "$work/s.sock" "$1" >"$work/cuts-$1.log" 2>&1 &
  proxy=$!
  for _ in $(seq 100); do [ -S "$work/p.sock" ] && break; sleep 0.05; done
}
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
bridged() {
  ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$carry/guest/lib/libcuda.so.1" LD_LIBRARY_PATH="$carry/guest/lib" \
    VMCUDA_SERVER="unix:$work/p.sock" timeout -k 5 300 "$@"
}
resumes() { grep -c 'guest came back to its session' "$work/host.log"; }

env -u VMCUDA_SERVER timeout -k 5 300 "$py" tests/gpu/suspend_train.py 60 0.05 1024 >"$work/native.out" 2>"$work/native.err"
cutting 500
before=$(resumes)
bridged "$py" tests/gpu/suspend_train.py 60 0.05 1024 >"$work/bridged.out" 2>"$work/bridged.err"
rc=$?
kill $proxy; wait $proxy 2>/dev/null
torch_cuts=$(grep -c '^cut' "$work/cuts-500.log")
torch_resumes=$(( $(resumes) - before ))
same=no
cmp -s "$work/native.out" "$work/bridged.out" && same=yes
rm -f "$work/p.sock"
cutting 300
before=$(resumes)
steps=$(bridged "$carry/suspend_steps" 300 10 1024 2>&1)
kill $proxy; wait $proxy 2>/dev/null
steps_cuts=$(grep -c '^cut' "$work/cuts-300.log")
steps_resumes=$(( $(resumes) - before ))
rm -f "$work/p.sock"
# The same program with no cut, for its pause between steps without drops.
cutting 100000000
calm=$(bridged "$carry/suspend_steps" 300 10 1024 2>&1)
kill $proxy; wait $proxy 2>/dev/null
{
  echo "# Guests come back to their sessions after their connections are cut"
  echo
  echo "- date: $(date -u +%F) commit: $(head -1 "$carry/COMMIT" 2>/dev/null)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- command: bash tests/gpu/run-reconnect.sh CARRY"
  echo "- bridged process isolation: $isolation"
  echo
  echo "| check | result |"
  echo "| --- | --- |"
  echo "| torch loop (60 steps), every connection cut every 500 ms | exit $rc, $(grep -c '^step' "$work/bridged.out") steps, losses identical to native: **$same**, kept tensor intact: $(sed -n 's/^kept tensor intact: //p' "$work/bridged.out"); $torch_cuts cuts, $torch_resumes sessions come back to |"
  echo "| suspend_steps (300 steps, 1 GiB kept), cut every 300 ms | $(grep -E '^(PASS|FAIL)' <<<"$steps" | head -1); $steps_cuts cuts, $steps_resumes sessions come back to; $(grep 'longest pause' <<<"$steps") |"
  echo "| the same, no cut | $(grep -E '^(PASS|FAIL)' <<<"$calm" | head -1); $(grep 'longest pause' <<<"$calm") |"
  echo
  echo "Host log lines about the sessions (first 20):"
  echo
  echo '```'
  grep -E 'came back|dropped|refused|lacks' "$work/host.log" | head -20 | cut -c1-200
  echo '```'
  echo
  echo "Torch stderr (bridged, last 5 lines):"
  echo
  echo '```'
  tail -5 "$work/bridged.err"
  echo '```'
} | tee "$out/RESULTS-RECONNECT.md"
