#!/usr/bin/env bash
# tests/gpu/run-restart.sh CARRY: on the GPU machine, the daemon restarted under a
# running guest (CUDA executor): a torch training loop (tests/gpu/suspend_train.py)
# bridged while its daemon is stopped with SIGTERM at step 10 and a new one started on
# the same socket and state directory; its losses against a native run's; a new guest
# through the new daemon beside it; the old worker suspended and resumed from the new
# daemon's state directory. Bridged runs see the machine as a VM guest does
# (tests/gpu/hide-gpu.sh). CARRY: bin/vmcuda-host, guest/lib, suspend_steps, COMMIT.
# Results: $OUT/RESULTS-RESTART.md and stdout.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-restart.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
host="$carry/bin/vmcuda-host"
serve() {
  "$host" serve --unix "$work/s.sock" --state-dir "$work/state" --executor cuda 2>>"$work/host.log" &
  daemon=$!
  for _ in $(seq 200); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
}
trap 'kill $daemon 2>/dev/null; wait 2>/dev/null' EXIT
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
bridged() {
  ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$carry/guest/lib/libcuda.so.1" LD_LIBRARY_PATH="$carry/guest/lib" \
    VMCUDA_SERVER="unix:$work/s.sock" timeout -k 5 300 "$@"
}
wait_for() {
  for _ in $(seq 3000); do grep -q "^$2" "$1" 2>/dev/null && return 0; sleep 0.02; done
  return 1
}

env -u VMCUDA_SERVER timeout -k 5 300 "$py" tests/gpu/suspend_train.py 40 0.05 1024 >"$work/native.out" 2>"$work/native.err"
serve
first=$daemon
f="$work/bridged.out"
bridged "$py" tests/gpu/suspend_train.py 40 0.05 1024 >"$f" 2>"$work/bridged.err" &
g=$!
wait_for "$f" "step 10 " || true
kill -TERM "$first"
wait "$first" 2>/dev/null
at_stop=$(grep -c '^step' "$f")
serve
newcomer=$(bridged "$carry/suspend_steps" 20 5 64 2>&1 | grep -E '^(PASS|FAIL)' | head -1)
ops=$("$host" suspend local --state-dir "$work/state" 2>&1; "$host" resume local --state-dir "$work/state" 2>&1)
wait $g
rc=$?
same=no
cmp -s "$work/native.out" "$f" && same=yes
{
  echo "# The daemon restarted under a running guest"
  echo
  echo "- date: $(date -u +%F) commit: $(head -1 "$carry/COMMIT" 2>/dev/null)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- command: bash tests/gpu/run-restart.sh CARRY"
  echo "- bridged process isolation: $isolation"
  echo
  echo "| check | result |"
  echo "| --- | --- |"
  echo "| torch loop (40 steps, daemon stopped with SIGTERM at step 10, a new one started) | exit $rc, $(grep -c '^step' "$f") steps, losses identical to native: **$same**, kept tensor intact: $(sed -n 's/^kept tensor intact: //p' "$f") |"
  echo "| steps done when the old daemon had exited | $at_stop |"
  echo "| a new guest through the new daemon meanwhile (suspend_steps, 64 MiB) | $newcomer |"
  echo "| the old worker suspended and resumed from the new daemon's state directory | $(grep -c '^suspended VM\|^resumed VM' <<<"$ops") of 2 |"
  echo
  echo '```'
  echo "$ops"
  echo '```'
  if [ "$same" != yes ]; then
    echo '```'; diff "$work/native.out" "$f" | head; tail -5 "$work/bridged.err"; echo '```'
  fi
  echo; echo '## Host log (last lines)'; echo '```'; tail -12 "$work/host.log"; echo '```'
} >"$out/RESULTS-RESTART.md"
cat "$out/RESULTS-RESTART.md"
