#!/usr/bin/env bash
# CUDA IPC's cost to the opening process (bench/ipc_copy.cu), natively and bridged in
# one run: native, bridged, native again; ratios against the mean of the native runs.
#
#   bench/run-ipc.sh CARRYDIR
#
# CARRYDIR: bin/vmcuda-host, guest/lib, bench/ipc_copy (nvcc -cudart shared), COMMIT.
# Writes $OUT (or build/bench-results)/RESULTS-IPC.md.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 2
carry=$(cd "${1:?usage: bench/run-ipc.sh CARRYDIR}" && pwd)
out=${OUT:-$repo/build/bench-results}
raw=${VMCUDA_BENCH_RAW:-$(mktemp -d)}
mkdir -p "$out"
real_cudart=${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}
prog="$carry/bench/ipc_copy"

"$carry/bin/vmcuda-host" serve --unix "$raw/host.sock" --executor "${VMCUDA_BENCH_EXECUTOR:-cuda}" --state-dir "$raw/state" 2>"$raw/host.log" &
host=$!
trap 'kill $host 2>/dev/null; wait $host 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$raw/host.sock" ] && break; sleep 0.1; done
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
LD_LIBRARY_PATH="$real_cudart" "$prog" >"$raw/native1.txt" 2>&1
LD_LIBRARY_PATH="$carry/guest/lib:$real_cudart" VMCUDA_SERVER="unix:$raw/host.sock" "${isolate[@]}" "$prog" \
  >"$raw/bridged.txt" 2>&1
LD_LIBRARY_PATH="$real_cudart" "$prog" >"$raw/native2.txt" 2>&1

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
python3 - "$raw" "$out/RESULTS-IPC.md" "$(cat "$carry/COMMIT" 2>/dev/null || echo unknown)" "$gpu" "$isolation" <<'PY'
import sys, datetime
raw, dest, commit, gpu, isolation = sys.argv[1:6]
def read(name):
    vals, verdict = {}, "no verdict"
    for line in open(f"{raw}/{name}.txt"):
        if line.startswith("RESULT "):
            _, key, v, unit = line.split(maxsplit=3)
            vals[key] = (float(v), unit.strip())
        elif line.endswith("ipc_copy\n") or line.startswith("FAIL"):
            verdict = line.strip()
    return vals, verdict
(n1, v1), (n2, v2), (b, vb) = (read(x) for x in ("native1", "native2", "bridged"))
rows = []
for key, (value, unit) in n1.items():
    if key not in n2 or key not in b:
        continue
    native = (value + n2[key][0]) / 2
    rows.append(f"| {key} ({unit}) | {value:.1f} | {n2[key][0]:.1f} | {b[key][0]:.1f} | {b[key][0] / native:.2f}x |")
with open(dest, "w") as f:
    f.write(f"""# CUDA IPC: opening another process's memory and copying from it

- date (UTC): {datetime.datetime.utcnow():%Y-%m-%d %H:%M:%S}
- commit: {commit}
- GPU: {gpu}
- command: `bench/run-ipc.sh CARRYDIR` (program: bench/ipc_copy.cu, 1 GiB)
- bridged: both processes through one daemon (Unix socket); GPU hidden from the bridged run: {isolation}
- verdicts: native {v1} / {v2}; bridged {vb}
- ratio: bridged over the mean of the two native runs (for GB/s higher is better, for
  us lower is better)

| figure | native (before) | native (after) | bridged | ratio |
| --- | --- | --- | --- | --- |
""" + "\n".join(rows) + "\n")
PY
cat "$out/RESULTS-IPC.md"
