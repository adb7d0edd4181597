#!/usr/bin/env bash
# Two builds of vmcuda against each other and native, in one run on the GPU machine:
# is a change slower than what it replaced?
#
#   bench/compare.sh BASE_CARRY NEW_CARRY [ROUNDS]
#   (VMCUDA_COMPARE_NEW_CONFIG=host.toml: a configuration for the new build's host)
#
# Each carry (tests/gpu/carry.sh) brings bin/vmcuda-host, guest/lib and bench/bench.
# Each round runs bench/bench natively, then through each build's own host and guest
# library on a Unix socket (the default same-host path: shared memory, polling), the
# two builds alternating so that drift of the machine hits both alike. The table
# gives each measurement's median over the rounds and new / base (times: above 1.0 is
# slower; bandwidths: below 1.0 is slower). Writes $OUT/COMPARE.md (default
# build/bench-results).
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
base=$(cd "${1:?usage: bench/compare.sh BASE_CARRY NEW_CARRY [ROUNDS]}" && pwd)
new=$(cd "${2:?usage: bench/compare.sh BASE_CARRY NEW_CARRY [ROUNDS]}" && pwd)
rounds=${3:-3}
out=${OUT:-$repo/build/bench-results}
real_cudart=${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}
raw=$(mktemp -d)
mkdir -p "$out"

start_host() { # NAME CARRY [CONFIG]: a host for that build, on $raw/NAME.sock
  # Its stdout must not be the caller's $(...) pipe, or that waits for the host to end.
  "$2/bin/vmcuda-host" serve ${3:+--config "$3"} --unix "$raw/$1.sock" --executor cuda \
    --state-dir "$raw/$1-state" >/dev/null 2>"$raw/$1-host.log" &
  echo $!
}
base_host=$(start_host base "$base")
# VMCUDA_COMPARE_NEW_CONFIG: a host.toml for the new build's host (to see what one
# of its settings costs, e.g. `[jail] enable = false`).
new_host=$(start_host new "$new" "${VMCUDA_COMPARE_NEW_CONFIG:-}")
# The raw outputs and host logs come along, also when a run is cut short.
trap 'kill $base_host $new_host 2>/dev/null; wait 2>/dev/null; tar -czf "$out/compare-raw.tar.gz" -C "$raw" .' EXIT
limit=${VMCUDA_COMPARE_RUN_LIMIT:-240}
for _ in $(seq 200); do [ -S "$raw/base.sock" ] && [ -S "$raw/new.sock" ] && break; sleep 0.1; done

for r in $(seq "$rounds"); do
  echo "== round $r of $rounds"
  echo "   native ($(date -u +%T))"
  LD_LIBRARY_PATH="$real_cudart" timeout "$limit" "$new/bench/bench" >"$raw/native.$r.txt"
  for build in base new; do
    carry=$base
    [ "$build" = new ] && carry=$new
    echo "   $build ($(date -u +%T))"
    LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$raw/$build.sock" \
      timeout "$limit" "$carry/bench/bench" >"$raw/$build.$r.txt" 2>"$raw/$build.$r.err" ||
      echo "compare.sh: $build round $r failed: $(tail -2 "$raw/$build.$r.err")" >&2
  done
done

python3 - "$raw" "$rounds" "$(cat "$base/COMMIT" 2>/dev/null)" "$(cat "$new/COMMIT" 2>/dev/null)" \
  "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)" \
  >"$out/COMPARE.md" <<'PY'
import statistics, sys, datetime
raw, rounds, base_commit, new_commit, gpu = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
def load(name):
    got = {}
    for r in range(1, rounds + 1):
        try:
            lines = open(f"{raw}/{name}.{r}.txt").read().splitlines()
        except OSError:
            continue
        for line in lines:
            p = line.split()
            if len(p) == 4 and p[0] == "RESULT":
                got.setdefault(p[1], ([], p[3]))[0].append(float(p[2]))
    return {k: (statistics.median(v), unit, len(v)) for k, (v, unit) in got.items()}
native, base, new = load("native"), load("base"), load("new")
print("# vmcuda: this build against the one before, same run\n")
print(f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}")
print(f"- base: {base_commit}; new: {new_commit}")
print(f"- GPU: {gpu}")
print(f"- command: `bench/compare.sh BASE NEW {rounds}`; medians of {rounds} rounds, builds alternating")
print("- bridged = bench/bench on the build's own guest library, to its own vmcuda-host (CUDA executor) on a Unix socket with the shared-memory data path\n")
print("| measurement | unit | native | base | new | new / base | verdict |")
print("| --- | --- | --- | --- | --- | --- | --- |")
worse = 0
for name in native:
    n, unit, _ = native[name]
    if name not in base or name not in new:
        print(f"| {name} | {unit} | {n:.2f} | {'-' if name not in base else f'{base[name][0]:.2f}'} | {'-' if name not in new else f'{new[name][0]:.2f}'} | | missing |")
        continue
    b, nw = base[name][0], new[name][0]
    ratio = nw / b if b else float("nan")
    higher_is_better = unit.startswith("GB/s") or unit.startswith("TFLOP")
    slower = ratio < 0.95 if higher_is_better else ratio > 1.05
    worse += slower
    print(f"| {name} | {unit} | {n:.2f} | {b:.2f} | {nw:.2f} | {ratio:.2f} | {'slower (>5%)' if slower else 'same or faster'} |")
print(f"\n{worse} measurement(s) more than 5% slower than the base build.")
PY
cat "$out/COMPARE.md"
