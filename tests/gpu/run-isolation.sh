#!/usr/bin/env bash
# tests/gpu/run-isolation.sh CARRY: on the GPU machine, what one program can learn of
# another's GPU memory, natively and through vmcuda (CUDA executor), and whether a
# guest's memory quota holds on the real GPU, on every path by which a program can take
# device memory: allocations, module globals, context limits, pools, graph memory,
# VMM, device reset, many tiny allocations. Each path runs natively (no quota: the
# line shows what the GPU spent) and bridged under a small quota (the line shows the
# refusal). Bridged runs see the machine as a VM guest does: as root, in their own
# mount namespace, the GPU device files and the host's driver libraries are /dev/null.
#
# The host-memory rows: the CUDA driver's own host memory per node of a captured graph
# (natively), and a guest building graphs of large launches under a host_memory limit:
# refused at it (cudaErrorMemoryAllocation), its worker's RSS growing by no more.
#
# CARRY holds bin/vmcuda-host, guest/lib (vmcuda's libcuda.so.1), isolation and
# host_memory_graphs (built from tests/gpu/isolation.cu and host_memory_graphs.cu with
# -cudart shared) and COMMIT. Results: the table on
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
small=$((64 << 20))
host_memory=$((256 << 20))

printf '[local]\nmemory_quota = %d\n' "$quota" >"$work/quota.toml"
printf '[local]\nmemory_quota = %d\n' "$small" >"$work/small.toml"
printf '[local]\nmemory_quota = %d\nhost_memory = %d\n' "$small" "$host_memory" >"$work/hm.toml"
"$carry/bin/vmcuda-host" serve --unix "$work/plain.sock" --executor "${VMCUDA_ISO_EXECUTOR:-cuda}" --state-dir "$work/plain-state" 2>"$work/host.log" &
plain=$!
"$carry/bin/vmcuda-host" serve --unix "$work/quota.sock" --config "$work/quota.toml" --state-dir "$work/quota-state" \
  --executor "${VMCUDA_ISO_EXECUTOR:-cuda}" 2>"$work/host-quota.log" &
quota_host=$!
"$carry/bin/vmcuda-host" serve --unix "$work/small.sock" --config "$work/small.toml" --state-dir "$work/small-state" \
  --executor "${VMCUDA_ISO_EXECUTOR:-cuda}" 2>"$work/host-small.log" &
small_host=$!
"$carry/bin/vmcuda-host" serve --unix "$work/hm.sock" --config "$work/hm.toml" --state-dir "$work/hm-state" \
  --executor "${VMCUDA_ISO_EXECUTOR:-cuda}" 2>"$work/host-hm.log" &
hm_host=$!
trap 'kill $plain $quota_host $small_host $hm_host 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 200); do
  [ -S "$work/plain.sock" ] && [ -S "$work/quota.sock" ] && [ -S "$work/small.sock" ] &&
    [ -S "$work/hm.sock" ] && break
  sleep 0.1
done

# As tests/gpu/run-torch.sh: the bridged process reaches the GPU only through the bridge.
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"

native() { LD_LIBRARY_PATH="$real_cudart" "$prog" "$@"; }
bridged_on() {  # bridged_on SOCKET ARGS...
  local sock=$1
  shift
  ${isolate[@]+"${isolate[@]}"} timeout -k 5 300 \
    env LD_LIBRARY_PATH="$carry/guest/lib:$real_cudart" VMCUDA_SERVER="unix:$sock" "$prog" "$@"
}
bridged() { bridged_on "$work/plain.sock" "$@"; }

# One path of taking device memory: natively (what the GPU spends, no quota), then
# bridged under the small quota; a fresh process each, so nothing carries over.
path() {  # path MODE WHAT
  local mode=$1 what=$2 n b
  n=$(timeout -k 5 300 env LD_LIBRARY_PATH="$real_cudart" "$prog" "$mode" "$small" 2>&1 | tail -1)
  b=$(bridged_on "$work/small.sock" "$mode" "$small" 2>&1 | tail -1)
  echo "| $what | $n | $b |"
}

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

# The RSS (bytes) of the hm daemon's workers, largest first.
worker_rss() {
  local kib
  kib=$(ps -o rss= --ppid "$hm_host" 2>/dev/null | sort -n | tail -1)
  echo $((${kib:-0} * 1024))
}

# A guest builds graphs of 4096 launches with 5 KB of parameters each, instantiating
# each, until refused; its worker's RSS is read when it connected and while it holds
# what it built. PASS: refused with cudaErrorMemoryAllocation, and the RSS grew by no
# more than host_memory.
host_memory_row() {
  local log="$work/flood.out" base=0 peak=0 rc verdict
  prog="$carry/host_memory_graphs" bridged_on "$work/hm.sock" flood >"$log" 2>&1 &
  local guest=$!
  for _ in $(seq 300); do grep -q connected "$log" && break; sleep 0.1; done
  sleep 1
  base=$(worker_rss)
  for _ in $(seq 1200); do grep -q holding "$log" && break; sleep 0.1; done
  peak=$(worker_rss)
  wait "$guest"
  rc=$?
  verdict=PASS
  if [ "$rc" -ne 0 ] || [ $((peak - base)) -gt "$host_memory" ]; then verdict=FAIL; fi
  echo "| bridged, host_memory $host_memory | graphs of 5 KB launches | $(tail -1 "$log"); worker RSS $((base >> 20)) MiB connected, $((peak >> 20)) MiB holding (+$(((peak - base) >> 20)) MiB, limit $((host_memory >> 20)) MiB): $verdict |"
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
  echo "| bridged, quota $quota | quota | $(bridged_on "$work/quota.sock" quota "$quota" 2>&1 | tr '\n' ' ') |"
  echo
  echo "## The quota on every path (Q = $small bytes)"
  echo
  echo "- bridged runs' isolation: $isolation"
  echo "- native: no quota, the figure is what the GPU spent (cudaMemGetInfo); bridged: the"
  echo "  same program as a guest with a quota of Q, where each path must be refused or held"
  echo "  within Q (CUresult 2 / cudaErrorMemoryAllocation: refused over the quota)"
  echo
  echo "| path | native (no quota) | bridged, quota Q |"
  echo "| --- | --- | --- |"
  path globals "module globals (PTX .global of 2Q, then Q/4)"
  path limits "context limits (stack x resident threads, heap, printf FIFO)"
  path pool "pool reserve and release threshold"
  path graph "graph memory (captured cudaMallocAsync)"
  path vmm "VMM handle released three times"
  path reset "cudaDeviceReset refunds what it frees"
  path tiny "many tiny allocations (512 bytes each on the GPU)"
  echo
  echo "## Host memory"
  echo
  echo "The CUDA driver's host memory per node of a captured graph of launches with 5 KB of"
  echo "parameters, natively (RSS growth; tests/gpu/host_memory_graphs.cu measure), against"
  echo "what vmcuda charges a guest for the same node:"
  echo
  timeout -k 5 600 env LD_LIBRARY_PATH="$real_cudart" "$carry/host_memory_graphs" measure 2>&1
  echo
  echo "| run | check | result |"
  echo "| --- | --- | --- |"
  host_memory_row
  echo
  echo "Host log lines about refusals and quotas:"
  echo
  echo '```'
  grep -h -E "refused|over the guest|quota|host_memory" "$work/host.log" "$work/host-quota.log" \
    "$work/host-small.log" "$work/host-hm.log" |
    sed 's/\x1b\[[0-9;]*m//g' | head -40
  echo '```'
} | tee "$out/RESULTS-ISOLATION.md"
