#!/usr/bin/env bash
# tests/gpu/run-suspend.sh CARRY: on the GPU machine, `vmcuda-host suspend` and
# `resume` under running guests (CUDA executor, the driver's process checkpoint):
#  - suspend_steps (tests/c/suspend_steps.c, driver API) holding 1, 8 and 64 GiB:
#    suspended mid-run, GPU memory in use while suspended, suspend and resume times,
#    the pause the program saw, its data checked after; its native twin beside.
#  - a torch training loop (tests/gpu/suspend_train.py) suspended and resumed mid-run:
#    its losses against an uninterrupted native run's.
# Bridged runs see the machine as a VM guest does (tests/gpu/hide-gpu.sh). CARRY holds
# bin/vmcuda-host, guest/lib, suspend_steps (built natively against libcuda) and
# COMMIT. Results: a table on stdout and $OUT/RESULTS-SUSPEND.md.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-suspend.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
sizes=${VMCUDA_SUSPEND_GIB:-1 8 64}
host="$carry/bin/vmcuda-host"
printf '[local]\nhost_memory = "100GiB"\n' >"$work/host.toml"
"$host" serve --unix "$work/s.sock" --config "$work/host.toml" --state-dir "$work/state" \
  --executor cuda 2>"$work/host.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
op() { "$host" "$1" local --config "$work/host.toml" --state-dir "$work/state"; }
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
secs() { sed -n 's/.*, \([0-9.]*\) s (.*/\1/p' <<<"$1" | head -1; }
wait_for() {  # wait_for FILE PREFIX
  for _ in $(seq 3000); do grep -q "^$2" "$1" 2>/dev/null && return 0; sleep 0.02; done
  return 1
}
idle=$(used)
rows=()

# One suspend and resume under a running guest: FILE the guest's stdout.
suspend_once() {  # suspend_once FILE -> sets s_out r_out during
  wait_for "$1" "step 10 " || { s_out="no step 10"; r_out=""; during=""; return; }
  s_out=$(op suspend 2>&1)
  during=$(used)
  sleep 1
  r_out=$(op resume 2>&1)
}

for gib in $sizes; do
  mib=$((gib * 1024))
  native=$(timeout -k 5 300 "$carry/suspend_steps" 60 10 "$mib" 2>&1 | grep -E '^(PASS|FAIL)' | head -1)
  f="$work/steps-$gib.out"
  ${isolate[@]+"${isolate[@]}"} env LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$work/s.sock" \
    timeout -k 5 600 "$carry/suspend_steps" 60 10 "$mib" >"$f" 2>&1 &
  g=$!
  wait_for "$f" "ready" || true
  running=$(used)
  suspend_once "$f"
  wait $g
  rc=$?
  pause=$(sed -n 's/^longest pause between steps: //p' "$f")
  result=$(grep -E '^(PASS|FAIL)' "$f" | head -1)
  rows+=("| suspend_steps, $gib GiB | $native | ${result:-rc $rc} | $running / $during / $idle | $(secs "$s_out") | $(secs "$r_out") | $pause |")
  echo "$s_out" >>"$work/ops.log"
  echo "$r_out" >>"$work/ops.log"
done

# torch: native uninterrupted, bridged suspended and resumed at step 10.
preload="$carry/guest/lib/libcuda.so.1"
env -u VMCUDA_SERVER timeout -k 5 300 "$py" tests/gpu/suspend_train.py 40 0.05 1024 >"$work/torch-native.out" 2>"$work/torch-native.err"
f="$work/torch-bridged.out"
${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$preload" LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$work/s.sock" \
  timeout -k 5 600 "$py" tests/gpu/suspend_train.py 40 0.05 1024 >"$f" 2>"$work/torch-bridged.err" &
g=$!
wait_for "$f" "ready" || true
running=$(used)
suspend_once "$f"
wait $g
same=no
cmp -s "$work/torch-native.out" "$f" && same=yes
echo "$s_out" >>"$work/ops.log"
echo "$r_out" >>"$work/ops.log"
kept=$(sed -n 's/^kept tensor intact: //p' "$f")
rows+=("| torch training loop, 40 steps | $(grep -c '^step' "$work/torch-native.out") steps | $(grep -c '^step' "$f") steps, losses identical to native: **$same**, kept tensor intact: $kept | $running / $during / $idle | $(secs "$s_out") | $(secs "$r_out") | |")

{
  echo "# Suspend and resume under running guests (the driver's process checkpoint)"
  echo
  echo "- date: $(date -u +%F) commit: $(cat "$carry/COMMIT" 2>/dev/null | head -1)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- command: bash tests/gpu/run-suspend.sh CARRY (vmcuda-host suspend/resume local)"
  echo "- bridged process isolation: $isolation"
  echo
  echo "| guest | native | bridged, suspended and resumed mid-run | GPU MiB used: running / suspended / before | suspend s | resume s | longest pause seen, ms |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
  echo
  echo "## The operator's output"
  echo
  echo '```'
  cat "$work/ops.log"
  echo '```'
  if ! cmp -s "$work/torch-native.out" "$work/torch-bridged.out"; then
    echo; echo '## torch: native vs bridged'; echo '```'
    diff "$work/torch-native.out" "$work/torch-bridged.out" | head -20
    tail -5 "$work/torch-bridged.err"
    echo '```'
  fi
  echo; echo '## Host log (last lines)'; echo '```'; tail -15 "$work/host.log"; echo '```'
} >"$out/RESULTS-SUSPEND.md"
cat "$out/RESULTS-SUSPEND.md"
