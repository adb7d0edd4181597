#!/usr/bin/env bash
# tests/gpu/run-oversub.sh CARRY: on the GPU machine, more VMs than fit in the GPU's
# memory at once (CUDA executor, [suspend] idle_after_ms = 800, keep_free = 6 GiB): 16
# VMs (TCP tokens),
# each a guest of suspend_steps that keeps 4 GiB on its GPU and calls every 8 s, so the
# policy suspends it between its calls and resumes it at each, making room by
# suspending the VMs idle longest when a resume finds the GPU full. A native process
# holds all but 48 GiB of the GPU, so the 16 VMs' 72 GiB (4 GiB each and their
# contexts) do not fit. Every guest checks its data. Bridged runs see the machine as a
# VM guest does (tests/gpu/hide-gpu.sh). CARRY: bin/vmcuda-host, guest/lib,
# suspend_steps, COMMIT. Results: $OUT/RESULTS-OVERSUB.md and stdout.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-oversub.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
n=16
port=$((20000 + RANDOM % 20000))
{
  printf '[suspend]\nidle_after_ms = 800\nkeep_free = "6GiB"\n'
  for i in $(seq $n); do
    printf '[[vm]]\nname = "vm%d"\ntcp = true\ntoken = "oversubscribed-vm-%02d"\nmemory_quota = "5GiB"\nhost_memory = "6GiB"\n' "$i" "$i"
  done
} >"$work/host.toml"
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
hold=$((total - 48 * 1024 - 600))
"$py" -c "import torch,time; x=torch.empty($hold*2**20,dtype=torch.uint8,device='cuda'); print('held',flush=True); time.sleep(3600)" >"$work/ballast.out" 2>&1 &
ballast=$!
for _ in $(seq 600); do grep -q held "$work/ballast.out" && break; sleep 0.1; done
"$carry/bin/vmcuda-host" serve --unix "$work/s.sock" --tcp "127.0.0.1:$port" --config "$work/host.toml" \
  --state-dir "$work/state" --executor cuda 2>"$work/host.log" &
daemon=$!
sampler=""
trap 'kill $daemon $ballast $sampler 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
(while sleep 0.25; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; done) >"$work/used.log" &
sampler=$!
t0=$(date +%s.%N)
pids=()
for i in $(seq $n); do
  ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$carry/guest/lib/libcuda.so.1" LD_LIBRARY_PATH="$carry/guest/lib" \
    VMCUDA_SERVER="tcp:127.0.0.1:$port" VMCUDA_TOKEN="$(printf 'oversubscribed-vm-%02d' "$i")" \
    timeout -k 5 400 "$carry/suspend_steps" 4 8000 4096 >"$work/vm$i.out" 2>"$work/vm$i.err" &
  pids+=($!)
  sleep 2
done
fails=0
for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
t1=$(date +%s.%N)
kill $sampler 2>/dev/null
passed=$(cat "$work"/vm*.out | grep -c '^PASS')
peak=$(sort -n "$work/used.log" | tail -1)
{
  echo "# More VMs than fit in the GPU, the idle ones suspended by policy"
  echo
  echo "- date: $(date -u +%F) commit: $(head -1 "$carry/COMMIT" 2>/dev/null)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- command: bash tests/gpu/run-oversub.sh CARRY"
  echo "- bridged process isolation: $isolation"
  echo "- GPU memory: $total MiB; a native process held $hold MiB, leaving $free MiB free for the VMs"
  echo "- 16 VMs, memory_quota 5 GiB each (80 GiB in all); each guest keeps 4 GiB (suspend_steps 4 8000 4096: 4 steps 8 s apart, started 2 s apart)"
  echo
  echo "| check | result |"
  echo "| --- | --- |"
  echo "| guests that finished with their data checked (PASS) | $passed of $n ($fails exited non-zero) |"
  echo "| wall time (s) | $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") |"
  echo "| peak GPU memory used (all processes, sampled every 0.25 s) | $peak MiB of $total |"
  echo "| policy suspends / resumes / suspends to make room / resumes that found no room | $(grep -c 'idle: suspended VM' "$work/host.log") / $(grep -c 'its guest called: resumed VM' "$work/host.log") / $(grep -c 'to make room' "$work/host.log") / $(grep -c 'making room, tried again' "$work/host.log") |"
  echo "| longest pause a guest saw between steps (ms), per VM | $(for i in $(seq $n); do sed -n 's/^longest pause between steps: \([0-9.]*\) ms/\1/p' "$work/vm$i.out"; done | tr '\n' ' ') |"
  echo "| suspend / resume time per VM (s): median, max | $(grep -o 'idle: suspended VM [^,]*, [^,]*, [0-9.]* s' "$work/host.log" | sed 's/ s$//' | awk '{print $NF}' | sort -n | awk '{a[NR]=$1} END{printf "%s, %s", a[int((NR+1)/2)], a[NR]}') / $(grep -o 'its guest called: resumed VM [^,]*, [^,]*, [0-9.]* s' "$work/host.log" | sed 's/ s$//' | awk '{print $NF}' | sort -n | awk '{a[NR]=$1} END{printf "%s, %s", a[int((NR+1)/2)], a[NR]}') |"
  echo
  echo "Failures (first lines):"
  echo
  echo '```'
  grep -h -E '^FAIL|error|vmcuda:' "$work"/vm*.out "$work"/vm*.err | sort | uniq -c | head -10
  grep -E 'WARN' "$work/host.log" | cut -c1-220 | head -10
  echo '```'
} | tee "$out/RESULTS-OVERSUB.md"
