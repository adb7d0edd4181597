#!/usr/bin/env bash
# tests/gpu/run-isolation.sh CARRY: on the GPU machine, what one program can learn of
# another's GPU memory, natively and through vmcuda (CUDA executor), and whether a
# guest's memory quota holds on the real GPU.
#
# CARRY holds bin/vmcuda-host, guest/lib (our libcudart.so.13), isolation (built
# from tests/gpu/isolation.cu with -cudart shared) and COMMIT. Results: the table on
# stdout and $OUT/RESULTS-ISOLATION.md (or build/gpu-results).
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-isolation.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
real_cudart=${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}
prog="$carry/isolation"
bytes=$((256 << 20))
quota=$((1 << 30))

printf '[local]\nmemory_quota = %d\n' "$quota" >"$work/quota.toml"
"$carry/bin/vmcuda-host" serve --unix "$work/plain.sock" --executor "${VMCUDA_ISO_EXECUTOR:-cuda}" 2>"$work/host.log" &
plain=$!
"$carry/bin/vmcuda-host" serve --unix "$work/quota.sock" --config "$work/quota.toml" \
  --executor "${VMCUDA_ISO_EXECUTOR:-cuda}" 2>"$work/host-quota.log" &
quota_host=$!
trap 'kill $plain $quota_host 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$work/plain.sock" ] && [ -S "$work/quota.sock" ] && break; sleep 0.1; done

native() { LD_LIBRARY_PATH="$real_cudart" "$prog" "$@"; }
bridged() { LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$work/plain.sock" "$prog" "$@"; }

# One process fills memory and holds it; a second peeks at its pointer; then the first
# dies without freeing and a third allocates the same amount fresh.
scenario() {  # scenario native|bridged
  local run=$1 fifo="$work/hold.$1" filler ptr
  mkfifo "$fifo"
  "$run" fill "$bytes" <"$fifo" >"$work/fill.$run" 2>&1 &
  filler=$!
  exec 9>"$fifo"
  for _ in $(seq 300); do grep -q filled "$work/fill.$run" && break; sleep 0.1; done
  ptr=$(awk '/filled/ {print $2}' "$work/fill.$run")
  echo "| $run | peek | $("$run" peek "$ptr" 2>&1 | tail -1) |"
  exec 9>&-
  wait "$filler"
  sleep 1
  echo "| $run | probe | $("$run" probe "$bytes" 2>&1 | tail -1) |"
  echo "| $run | reuse | $("$run" reuse "$bytes" 2>&1 | tail -1) |"
}

{
  echo "# Isolation on the GPU: native vs vmcuda"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $(cat "$carry/COMMIT" 2>/dev/null || echo unknown)"
  echo "- command: tests/gpu/run-isolation.sh $1"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo
  echo "| run | check | result |"
  echo "| --- | --- | --- |"
  scenario native
  scenario bridged
  echo "| bridged, quota $quota | quota | $(LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$work/quota.sock" "$prog" quota "$quota" 2>&1 | tr '\n' ' ') |"
  echo
  echo "Host log lines about refusals and quotas:"
  echo
  echo '```'
  grep -h -E "refused|over the guest" "$work/host.log" "$work/host-quota.log" | sed 's/\x1b\[[0-9;]*m//g' | head -20
  echo '```'
} | tee "$out/RESULTS-ISOLATION.md"
