#!/usr/bin/env bash
# tests/gpu/run-idle.sh CARRY: on the GPU machine, the daemon's idle policy
# ([suspend] idle_after_ms = 500, CUDA executor): a torch training loop
# (tests/gpu/suspend_train.py) that sleeps 2 s between its steps, so its VM is suspended
# in each sleep and resumed by its next call; its losses against a native run's, the
# GPU memory used while it sleeps, and the suspends and resumes the daemon logged.
# Bridged runs see the machine as a VM guest does (tests/gpu/hide-gpu.sh). CARRY:
# bin/vmcuda-host, guest/lib, COMMIT. Results: $OUT/RESULTS-IDLE.md and stdout.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-idle.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
printf '[suspend]\nidle_after_ms = 500\n' >"$work/host.toml"
"$carry/bin/vmcuda-host" serve --unix "$work/s.sock" --config "$work/host.toml" --state-dir "$work/state" \
  --executor cuda 2>"$work/host.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
env -u VMCUDA_SERVER timeout -k 5 300 "$py" tests/gpu/suspend_train.py 6 2 1024 >"$work/native.out" 2>"$work/native.err"
f="$work/bridged.out"
t0=$(date +%s.%N)
${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$carry/guest/lib/libcuda.so.1" LD_LIBRARY_PATH="$carry/guest/lib" \
  VMCUDA_SERVER="unix:$work/s.sock" timeout -k 5 300 "$py" tests/gpu/suspend_train.py 6 2 1024 >"$f" 2>"$work/bridged.err" &
g=$!
for _ in $(seq 3000); do grep -q '^step 1 ' "$f" 2>/dev/null && break; sleep 0.02; done
sleep 1.2
asleep=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
wait $g
rc=$?
t1=$(date +%s.%N)
same=no
cmp -s "$work/native.out" "$f" && same=yes
suspends=$(grep -c 'idle: suspended VM' "$work/host.log")
resumes=$(grep -c 'its guest called: resumed VM' "$work/host.log")
{
  echo "# The idle policy under a torch loop that sleeps between its steps"
  echo
  echo "- date: $(date -u +%F) commit: $(head -1 "$carry/COMMIT" 2>/dev/null)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- command: bash tests/gpu/run-idle.sh CARRY ([suspend] idle_after_ms = 500)"
  echo "- bridged process isolation: $isolation"
  echo
  echo "| check | result |"
  echo "| --- | --- |"
  echo "| torch loop, 6 steps 2 s apart | exit $rc, $(grep -c '^step' "$f") steps, losses identical to native: **$same**, kept tensor intact: $(sed -n 's/^kept tensor intact: //p' "$f") |"
  echo "| suspends / resumes the daemon logged | $suspends / $resumes |"
  echo "| GPU memory used while the loop slept (MiB) | $asleep |"
  echo "| bridged run's wall time (s) | $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") |"
  echo
  echo '```'
  grep -E 'idle: suspended|resumed VM|not suspended|failed' "$work/host.log" | sed 's/^[^ ]* //' | head -20
  echo '```'
  if [ "$same" != yes ]; then
    echo '```'; diff "$work/native.out" "$f" | head; tail -5 "$work/bridged.err"; echo '```'
  fi
} >"$out/RESULTS-IDLE.md"
cat "$out/RESULTS-IDLE.md"
