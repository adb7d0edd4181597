#!/usr/bin/env bash
# The benchmark suite, on the GPU machine: every measurement natively and through the
# bridge in the same run, with the raw transport floors measured beside them.
#
#   bench/run.sh CARRYDIR
#
# CARRYDIR: bin/vmcuda-host, bin/transport-floor, guest/lib (vmcuda's libcuda.so.1),
# bench/bench (nvcc -cudart shared bench/bench.cu), COMMIT. Both sides run NVIDIA's
# runtime (VMCUDA_REAL_CUDART_DIR); the bridged one over vmcuda's driver.
# Runs: native; bridged over a Unix socket with the shared-memory data path (the
# default on one host); the same with neither side polling before it sleeps
# (VMCUDA_POLL_US=0, against a second host started so); the same with synchronous pinned
# copies waiting for the worker's reply instead of watching a word the GPU writes
# (VMCUDA_DONE_WORDS=0); the same with VMCUDA_SHARED_MEMORY=0 (every byte on the
# socket, as over vsock); the default with VMCUDA_SYNC=1 (every call waits for its
# reply: what the asynchronous pipeline gains); bridged over TCP; and 8 concurrent
# clients copying, natively and bridged; cudaMemcpyPeer between devices 0 and 1,
# natively and bridged (shm), where there are two; and managed memory (bench --managed:
# the CPU writes a buffer, a kernel updates it, the CPU reads it back, with prefetches
# and without), natively and bridged (shm). Writes $OUT (or build/bench-results):
# RESULTS.md, bandwidth.png, raw.tar.gz.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 2
carry=$(cd "${1:?usage: bench/run.sh CARRYDIR}" && pwd)
out=${OUT:-$repo/build/bench-results}
raw=$(mktemp -d)
mkdir -p "$out"
real_cudart=${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}
bench="$carry/bench/bench"
clients=${VMCUDA_BENCH_CLIENTS:-8}

echo "== transport floors"
"$carry/bin/transport-floor" unix >"$raw/floor_unix.txt"
"$carry/bin/transport-floor" tcp >"$raw/floor_tcp.txt"
"$carry/bin/transport-floor" shm >"$raw/floor_shm.txt"

echo "== native"
LD_LIBRARY_PATH="$real_cudart" "$bench" >"$raw/native.txt"

sock="$raw/vmcuda.sock"
port=$((20000 + RANDOM % 20000))
# TCP guests are admitted by token: one for this run.
token="bench-$$-$RANDOM$RANDOM$RANDOM"
printf '[[vm]]\nname = "bench"\ntcp = true\ntoken = "%s"\n' "$token" >"$raw/host.toml"
"$carry/bin/vmcuda-host" serve --config "$raw/host.toml" --unix "$sock" --state-dir "$raw/state" --tcp "127.0.0.1:$port" \
  --executor cuda 2>"$raw/host.log" &
host=$!
# A second host whose workers sleep in every read, for the no-polling column.
VMCUDA_POLL_US=0 "$carry/bin/vmcuda-host" serve --unix "$raw/nopoll.sock" --executor cuda \
  --state-dir "$raw/nopoll-state" 2>"$raw/host_nopoll.log" &
host_nopoll=$!
trap 'kill $host $host_nopoll 2>/dev/null; wait $host $host_nopoll 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$sock" ] && [ -S "$raw/nopoll.sock" ] && break; sleep 0.1; done

# Bridged runs see no GPU but through the bridge (as a VM guest).
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
echo "$isolation" >"$raw/isolation.txt"
bridged() { LD_LIBRARY_PATH="$carry/guest/lib:$real_cudart" VMCUDA_SERVER="$1" "${isolate[@]}" "${@:2}"; }
echo "== bridged: unix socket, shared-memory data path and command ring"
VMCUDA_VERBOSE=1 bridged "unix:$sock" "$bench" >"$raw/shm.txt" 2>"$raw/shm.err"
echo "== bridged: the same without the command ring (requests on the socket)"
VMCUDA_RING=0 bridged "unix:$sock" "$bench" >"$raw/shm_noring.txt"
echo "== bridged: the same with synchronous pinned copies waiting for the worker's reply"
VMCUDA_DONE_WORDS=0 bridged "unix:$sock" "$bench" >"$raw/shm_nowords.txt"
echo "== bridged: unix socket, shared-memory data path, copies staged by one thread"
VMCUDA_COPY_THREADS=1 bridged "unix:$sock" "$bench" >"$raw/shm_1thread.txt"
echo "== bridged: unix socket, shared-memory data path, neither side polling"
VMCUDA_POLL_US=0 bridged "unix:$raw/nopoll.sock" "$bench" >"$raw/shm_nopoll.txt"
echo "== bridged: unix socket, every byte on the socket"
VMCUDA_SHARED_MEMORY=0 VMCUDA_VERBOSE=1 bridged "unix:$sock" "$bench" >"$raw/unix.txt" 2>"$raw/unix.err"
echo "== bridged: unix socket, every call waits for its reply"
VMCUDA_SYNC=1 bridged "unix:$sock" "$bench" >"$raw/unix_sync.txt"
echo "== bridged: tcp"
VMCUDA_TOKEN="$token" bridged "tcp:127.0.0.1:$port" "$bench" >"$raw/tcp.txt"

echo "== $clients concurrent clients"
for i in $(seq "$clients"); do
  LD_LIBRARY_PATH="$real_cudart" "$bench" --bandwidth 64 --seconds 5 >"$raw/conc_native.$i.txt" &
done
wait_clients() { while [ "$(jobs -rp | grep -Evc "^($host|$host_nopoll)$")" -gt 0 ]; do sleep 0.2; done; }
wait_clients
for i in $(seq "$clients"); do
  bridged "unix:$sock" "$bench" --bandwidth 64 --seconds 5 >"$raw/conc_shm.$i.txt" &
done
wait_clients
LD_LIBRARY_PATH="$real_cudart" "$bench" --bandwidth 64 --seconds 5 >"$raw/single_native.txt"
bridged "unix:$sock" "$bench" --bandwidth 64 --seconds 5 >"$raw/single_shm.txt"

echo "== peer copies, device 0 -> device 1 (a note only, with one device)"
LD_LIBRARY_PATH="$real_cudart" "$bench" --peer >"$raw/peer_native.txt"
bridged "unix:$sock" "$bench" --peer >"$raw/peer_shm.txt"

echo "== managed memory: prefetch and fault paths"
LD_LIBRARY_PATH="$real_cudart" "$bench" --managed >"$raw/managed_native.txt" 2>"$raw/managed_native.err"
bridged "unix:$sock" "$bench" --managed >"$raw/managed_shm.txt" 2>"$raw/managed_shm.err"

python3 "$repo/bench/report.py" "$raw" "$out" "$(cat "$carry/COMMIT" 2>/dev/null || echo unknown)" \
  "bench/run.sh $1" "$clients"
tar -czf "$out/raw.tar.gz" -C "$raw" .
cat "$out/RESULTS.md"
