#!/usr/bin/env bash
# bench/run-frameworks.sh CARRYDIR: small work and start-up through the frameworks
# (bench/frameworks.py: torch launch + synchronize, a CuPy RawKernel, a Triton kernel,
# CUDA-graph replay, a torch.compile'd call, cudnn.benchmark, NCCL world size 1, the
# time from `import torch` to the first result, cuBLAS/cuFFT/cuDNN first use, JAX's
# first jit and a jitted step), natively and through vmcuda in the same run, alternating,
# each row in a fresh process; the bridged process preloads vmcuda's libcuda.so.1 only
# (NVIDIA's libraries over the guest driver) and has the GPU hidden
# (tests/gpu/hide-gpu.sh). Then one more bridged run of each row with VMCUDA_PROFILE,
# whose summaries (where the time went, round trips per call) are digested into the
# results and kept whole in frameworks-profiles.tar.gz.
#   VMCUDA_TORCH_PYTHON (/opt/torch/.venv/bin/python), VMCUDA_JAX_PYTHON (python3)
#   VMCUDA_BENCH_ROUNDS (2), VMCUDA_BENCH_ROWS (all), VMCUDA_BENCH_PROFILE (1; 0: none)
# CARRYDIR: bin/vmcuda-host, guest/lib, COMMIT. Writes $OUT (default
# build/bench-results)/RESULTS-FRAMEWORKS.md.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 2
carry=$(cd "${1:?usage: bench/run-frameworks.sh CARRYDIR}" && pwd)
torch_py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
jax_py="${VMCUDA_JAX_PYTHON:-$(command -v python3)}"
out=${OUT:-$repo/build/bench-results}
mkdir -p "$out"
raw=$(mktemp -d)
mkdir -p "$raw/profiles"
sock="$raw/vmcuda.sock"
"$carry/bin/vmcuda-host" serve --unix "$sock" --executor cuda --state-dir "$raw/state" >"$raw/host.log" 2>&1 &
host_pid=$!
trap 'kill $host_pid 2>/dev/null; wait $host_pid 2>/dev/null' EXIT
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.3}"
rounds=${VMCUDA_BENCH_ROUNDS:-2}
lib="$carry/guest/lib"
rows=${VMCUDA_BENCH_ROWS:-"$("$torch_py" bench/frameworks.py --list) $("$torch_py" bench/frameworks.py --list --jax)"}
py_for() { case "$1" in jax_*) echo "$jax_py" ;; *) echo "$torch_py" ;; esac; }
native() {
    env -u VMCUDA_SERVER VMCUDA_BENCH_T0="$(date +%s%N)" timeout -k 5 150 "$(py_for "$1")" bench/frameworks.py --only "$1"
}
# bridged ROW [VAR=VALUE...]
bridged() {
    local row=$1
    shift
    ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$lib/libcuda.so.1" TRITON_LIBCUDA_PATH="$lib" \
        LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" VMCUDA_SERVER="unix:$sock" \
        "$@" VMCUDA_BENCH_T0="$(date +%s%N)" timeout -k 5 150 "$(py_for "$row")" bench/frameworks.py --only "$row"
}
for round in $(seq 1 "$rounds"); do
    for row in $rows; do
        native "$row" >>"$raw/native.$round.txt" 2>>"$raw/native.err" || echo "FAILED $row $?" >>"$raw/native.$round.txt"
        bridged "$row" >>"$raw/bridged.$round.txt" 2>>"$raw/bridged.err" || echo "FAILED $row $?" >>"$raw/bridged.$round.txt"
    done
done
if [ "${VMCUDA_BENCH_PROFILE:-1}" != 0 ]; then
    for row in $rows; do
        bridged "$row" VMCUDA_PROFILE="$raw/profiles/$row.txt" >/dev/null 2>>"$raw/profiled.err" || true
    done
fi
"$torch_py" - "$raw" "$rounds" "$(cat "$carry/COMMIT" 2>/dev/null || git rev-parse HEAD)" "$isolation" "$rows" \
    >"$out/RESULTS-FRAMEWORKS.md" <<'PY'
import datetime, glob, os, statistics, sys
raw, rounds, commit, isolation, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split()
def results(side):
    d, failed = {}, []
    for r in range(1, rounds + 1):
        path = f"{raw}/{side}.{r}.txt"
        for line in open(path) if os.path.exists(path) else []:
            w = line.split()
            if w[:1] == ["RESULT"]:
                d.setdefault(w[1], []).append((float(w[2]), w[3]))
            elif w[:1] == ["FAILED"]:
                failed.append(f"{w[1]} (exit {w[2]}, round {r})")
    return d, failed
(n, nf), (b, bf) = results("native"), results("bridged")
# The issue's targets: start-up and launch + synchronize 1.1x, the other small-work rows 1.2x.
tight = {"launch_sync", "import_torch_to_first_result", "cublas_first_use", "cufft_first_use",
         "cudnn_first_use", "jax_first_jit", "jax_process_to_first_result", "cudnn_benchmark_first_step"}
print("# Small work and start-up through the frameworks, native and through vmcuda\n")
print(f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}")
print(f"- commit: {commit}")
print("- command: `bench/run-frameworks.sh CARRYDIR` (bench/frameworks.py), each row in a fresh process, "
      f"native and bridged alternating, {rounds} rounds; bridged: vmcuda's libcuda.so.1 preloaded, "
      "NVIDIA's libraries as the frameworks ship them, vmcuda-host with the CUDA executor over a Unix socket")
print(f"- bridged process isolation: {isolation}\n")
print("| row | native (median of rounds) | bridged | ratio | target | met |")
print("| --- | --- | --- | --- | --- | --- |")
for k in sorted(set(n) | set(b), key=lambda k: (k not in tight, k)):
    nv, bv = [v for v, _ in n.get(k, [])], [v for v, _ in b.get(k, [])]
    unit = (n.get(k) or b.get(k))[0][1]
    target = 1.1 if k in tight else 1.2
    if not nv or not bv:
        print(f"| {k} | {nv} {unit} | {bv} {unit} | - | {target}x | - |")
        continue
    mn, mb = statistics.median(nv), statistics.median(bv)
    print(f"| {k} | {mn:.3f} {unit} | {mb:.3f} {unit} | {mb / mn:.2f}x | {target}x | {'yes' if mb <= target * mn else 'NO'} |")
for side, f in (("native", nf), ("bridged", bf)):
    if f:
        print(f"\n{side} failures: {', '.join(f)}")
profiles = sorted(glob.glob(f"{raw}/profiles/*.txt"))
if profiles:
    print("\n## Where the bridged time went (VMCUDA_PROFILE, one more bridged run per row)\n")
    for p in profiles:
        lines = open(p).read().splitlines()
        print(f"### {os.path.basename(p)[:-4]}\n\n```")
        # The totals, the five driver calls with most time, the five ops with most wait.
        calls_at = next((i for i, l in enumerate(lines) if l.startswith("driver call")), None)
        ops_at = next((i for i, l in enumerate(lines) if l.startswith("op on the connection")), None)
        keep = lines[:calls_at] if calls_at is not None else lines[:2]
        if calls_at is not None:
            keep += lines[calls_at:calls_at + 9]
        if ops_at is not None:
            keep += lines[ops_at:ops_at + 7]
        print("\n".join(keep))
        print("```\n")
PY
tar -C "$raw" -czf "$out/frameworks-raw.tar.gz" --exclude=state --exclude=vmcuda.sock . 2>/dev/null
cat "$out/RESULTS-FRAMEWORKS.md"
