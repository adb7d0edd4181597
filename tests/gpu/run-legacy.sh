#!/usr/bin/env bash
# tests/gpu/run-legacy.sh [CARRYDIR]: on the GPU machine, the driver's older entry points
# (tests/gpu/legacy_driver.cu: the launch ABI before cuLaunchKernel,
# cuLaunchCooperativeKernelMultiDevice, cuCtxAttach/Detach, cuCtxRecordEvent/WaitEvent,
# cuCtxGetExecAffinity, cuDeviceGetLuid, the array copies and cuMemcpy3DPeer) run
# natively and bridged, the bridged run with the GPU hidden (tests/gpu/hide-gpu.sh).
# The program checks itself, one line per check; a row passes when both runs pass it
# with the same detail (the details hold nothing that differs between runs).
#
# vmcuda's binaries come from CARRYDIR (tests/gpu/carry.sh's; default .carry/gpu):
# CARRYDIR/bin/vmcuda-host, CARRYDIR/guest/lib (vmcuda's libcuda.so.1),
# CARRYDIR/legacy_driver (built from tests/gpu/legacy_driver.cu with -cudart shared)
# and CARRYDIR/COMMIT. NVIDIA's runtime is VMCUDA_REAL_CUDART_DIR's (default
# /usr/local/cuda/lib64). Results: the table on stdout,
# tests/gpu/results/RESULTS-LEGACY.md and $OUT/RESULTS-LEGACY.md (default
# build/gpu-results), with both runs' output. Exit status 1 if a row fails.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry="${1:-.carry/gpu}"
prog="${VMCUDA_LEGACY_PROG:-$carry/legacy_driver}"
out="${OUT:-build/gpu-results}"
real_cudart="${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}"
mkdir -p "$out" tests/gpu/results
[ -x "$prog" ] || { echo "run-legacy.sh: no program at $prog" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-legacy.XXXXXX")

"$carry/bin/vmcuda-host" serve --unix "$work/host.sock" --executor "${VMCUDA_LEGACY_EXECUTOR:-cuda}" \
  --state-dir "$work/state" 2>"$work/host.log" &
host=$!
trap 'kill $host 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 200); do
  [ -S "$work/host.sock" ] && break
  sleep 0.1
done

# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"

timeout -k 5 300 env LD_LIBRARY_PATH="$real_cudart" "$prog" >"$work/native.txt" 2>&1
native_rc=$?
${isolate[@]+"${isolate[@]}"} timeout -k 5 300 \
  env LD_LIBRARY_PATH="$carry/guest/lib:$real_cudart" VMCUDA_SERVER="unix:$work/host.sock" \
  "$prog" >"$work/bridged.txt" 2>&1
bridged_rc=$?

# One row per check, in the native run's order (then checks only the bridged run made):
# | check | native | bridged | result |.
table() {
  awk '
    function key(line) { s = substr(line, index(line, " ") + 1); return substr(s, 1, index(s, ": ") - 1) }
    function value(line) { s = substr(line, index(line, " ") + 1); return substr(line, 1, 4) " " substr(s, index(s, ": ") + 2) }
    FNR == 1 { file++ }
    /^(PASS|FAIL) / && index($0, ": ") {
      k = key($0)
      if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      if (file == 1) nat[k] = value($0); else bri[k] = value($0)
    }
    END {
      for (i = 1; i <= n; i++) {
        k = order[i]
        a = (k in nat) ? nat[k] : "(none)"
        b = (k in bri) ? bri[k] : "(none)"
        r = (substr(a, 1, 4) == "PASS" && a == b) ? "PASS" : (substr(a, 1, 4) == "PASS" && substr(b, 1, 4) == "PASS" ? "DIFF" : "FAIL")
        if (r != "PASS") bad++
        gsub(/\|/, "/", a); gsub(/\|/, "/", b)
        printf "| %s | %s | %s | %s |\n", k, a, b, r
      }
      printf "\n%d of %d checks pass in both runs alike\n", n - bad, n
      exit bad > 0
    }' "$work/native.txt" "$work/bridged.txt"
}

{
  echo "# The driver's older entry points on the GPU: native vs vmcuda"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $(cat "$carry/COMMIT" 2>/dev/null || echo unknown)"
  echo "- command: tests/gpu/run-legacy.sh ${1:-}"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- program: tests/gpu/legacy_driver.cu; native exit $native_rc, bridged exit $bridged_rc"
  echo "- bridged runs' isolation: $isolation"
  echo
  echo "| check | native | bridged | result |"
  echo "| --- | --- | --- | --- |"
  table
  rows_rc=$?
  echo
  echo "## Native output"
  echo
  echo '```'
  cat "$work/native.txt"
  echo '```'
  echo
  echo "## Bridged output"
  echo
  echo '```'
  cat "$work/bridged.txt"
  echo '```'
  echo
  echo "Host log lines about failures:"
  echo
  echo '```'
  grep -h -i -E "error|refus|fail" "$work/host.log" | sed 's/\x1b\[[0-9;]*m//g' | head -20
  echo '```'
  exit "$rows_rc"
} | tee "$out/RESULTS-LEGACY.md"
rc=${PIPESTATUS[0]}
cp "$out/RESULTS-LEGACY.md" tests/gpu/results/RESULTS-LEGACY.md
[ "$rc" -eq 0 ] && [ "$native_rc" -eq 0 ] && [ "$bridged_rc" -eq 0 ]
