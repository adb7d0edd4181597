#!/usr/bin/env bash
# Back-to-back launches (bench/launch_kinds.cu), natively and bridged in one run: the
# bridge as it is (runs of posted launches sent as one graph launch) and with
# VMCUDA_BATCH_LAUNCHES=0 (each launch sent as it comes), native before and after.
#
#   bench/run-launch-batch.sh CARRYDIR
#
# CARRYDIR: bin/vmcuda-host, guest/lib, bench/launch_kinds (nvcc -cudart shared), COMMIT.
# Writes $OUT (or build/bench-results)/RESULTS-LAUNCH-BATCH.md.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 2
carry=$(cd "${1:?usage: bench/run-launch-batch.sh CARRYDIR}" && pwd)
out=${OUT:-$repo/build/bench-results}
raw=$(mktemp -d)
mkdir -p "$out"
real_cudart=${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}
prog="$carry/bench/launch_kinds"

"$carry/bin/vmcuda-host" serve --unix "$raw/on.sock" --executor cuda --state-dir "$raw/on-state" 2>"$raw/host.log" &
on=$!
VMCUDA_BATCH_LAUNCHES=0 "$carry/bin/vmcuda-host" serve --unix "$raw/off.sock" --executor cuda --state-dir "$raw/off-state" \
  --state-dir "$raw/off-state" 2>"$raw/host_off.log" &
off=$!
trap 'kill $on $off 2>/dev/null; wait $on $off 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$raw/on.sock" ] && [ -S "$raw/off.sock" ] && break; sleep 0.1; done
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
bridged() { LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$1" "${isolate[@]}" "$prog"; }
LD_LIBRARY_PATH="$real_cudart" "$prog" >"$raw/native1.txt"
bridged "$raw/on.sock" >"$raw/batched.txt"
bridged "$raw/off.sock" >"$raw/single.txt"
LD_LIBRARY_PATH="$real_cudart" "$prog" >"$raw/native2.txt"

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
python3 - "$raw" "$out/RESULTS-LAUNCH-BATCH.md" "$(cat "$carry/COMMIT" 2>/dev/null || echo unknown)" "$gpu" "$isolation" <<'PY'
import sys, datetime
raw, dest, commit, gpu, isolation = sys.argv[1:6]
def read(name):
    vals = {}
    for line in open(f"{raw}/{name}.txt"):
        if line.startswith("RESULT "):
            _, key, v, _unit = line.split()
            vals[key] = float(v)
    return vals
n1, n2, b, s = (read(x) for x in ("native1", "native2", "batched", "single"))
rows = []
for key in n1:
    native = (n1[key] + n2[key]) / 2
    rows.append(f"| {key} | {n1[key]:.2f} | {n2[key]:.2f} | {b[key]:.2f} | {b[key] / native:.2f}x | {s[key]:.2f} | {s[key] / native:.2f}x |")
with open(dest, "w") as f:
    f.write(f"""# Back-to-back launches: runs of posted launches as one graph launch

- date (UTC): {datetime.datetime.utcnow():%Y-%m-%d %H:%M:%S}
- commit: {commit}
- GPU: {gpu}
- command: `bench/run-launch-batch.sh CARRYDIR` (program: bench/launch_kinds.cu)
- bridged: Unix socket, shared memory and command ring; GPU hidden from the bridged run: {isolation}
- figures: us a launch, median of 7 runs of 20000 launches and a synchronize ("_burst":
  the time to submit 200 launches, not waiting for them); ratios against the mean of
  the two native runs

| launches | native (before) | native (after) | bridged | ratio | bridged, each sent as it comes | ratio |
| --- | --- | --- | --- | --- | --- | --- |
""" + "\n".join(rows) + "\n")
PY
cat "$out/RESULTS-LAUNCH-BATCH.md"
