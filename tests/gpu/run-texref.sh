#!/usr/bin/env bash
# tests/gpu/run-texref.sh [CARRYDIR]: on the GPU machine, tests/gpu/texref_memops.cu
# (stream memory operation batches and their graph nodes, texture and surface
# references of a PTX module, cuMemGetAccess, cuMemMapArrayAsync) natively and bridged
# through vmcuda's CUDA executor, the bridged run with the GPU hidden
# (tests/gpu/hide-gpu.sh). vmcuda's binaries and the program come from CARRYDIR
# (tests/gpu/carry.sh's; default .carry/gpu): CARRYDIR/bin/vmcuda-host,
# CARRYDIR/guest/lib, CARRYDIR/texref_memops, CARRYDIR/COMMIT. Each check is one line
# of the program ("PASS name: detail" / "FAIL name: detail"); the table puts the two
# runs' lines side by side: a check passes when both runs pass it and name the same
# codes. Results: the table on stdout and tests/gpu/results/RESULTS-TEXREF.md (date,
# commit, command, GPU, table; VMCUDA_TEXREF_RESULTS names another file, and
# VMCUDA_TEXREF_EXECUTOR another executor, for trying the script off the GPU machine);
# exit 0 only when every check passed in both runs.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry="${1:-.carry/gpu}"
prog="$carry/texref_memops"
[ -x "$prog" ] || { echo "run-texref.sh: no $prog (build it with tests/gpu/carry.sh)" >&2; exit 2; }
real_cudart=${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}
results=${VMCUDA_TEXREF_RESULTS:-tests/gpu/results/RESULTS-TEXREF.md}
mkdir -p "$(dirname "$results")"
work=$(mktemp -d)
"$carry/bin/vmcuda-host" serve --unix "$work/host.sock" --executor "${VMCUDA_TEXREF_EXECUTOR:-cuda}" \
  --state-dir "$work/state" \
  2>"$work/host.log" &
host=$!
trap 'kill $host 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 200); do [ -S "$work/host.sock" ] && break; sleep 0.1; done

# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"

timeout -k 5 120 env LD_LIBRARY_PATH="$real_cudart" "$prog" >"$work/native.out" 2>&1
native_rc=$?
${isolate[@]+"${isolate[@]}"} timeout -k 5 120 \
  env LD_LIBRARY_PATH="$carry/guest/lib:$real_cudart" VMCUDA_SERVER="unix:$work/host.sock" \
  "$prog" >"$work/bridged.out" 2>&1
bridged_rc=$?

# One row per check, in the native run's order, then any only the bridged run printed.
table() {
  python3 - "$work/native.out" "$work/bridged.out" <<'PY'
import re, sys
def checks(path):
    out = {}
    for line in open(path, errors="replace"):
        m = re.match(r"(PASS|FAIL) (.+?): (.*)$", line.rstrip("\n"))
        if m:
            out.setdefault(m.group(2), (m.group(1), m.group(3)))
    return out
native, bridged = checks(sys.argv[1]), checks(sys.argv[2])
failed = 0
for name in list(native) + [n for n in bridged if n not in native]:
    n, b = native.get(name, ("-", "not run")), bridged.get(name, ("-", "not run"))
    ok = n[0] == "PASS" and b[0] == "PASS" and n[1] == b[1]
    if not ok and n[0] == "PASS" and b[0] == "PASS":
        verdict = "PASS (details differ)"
        ok = True
    else:
        verdict = "PASS" if ok else "FAIL"
    failed += not ok
    print(f"| {name} | {n[0]} {n[1]} | {b[0]} {b[1]} | {verdict} |")
sys.exit(1 if failed or not native else 0)
PY
}

{
  echo "# vmcuda: stream memory operation batches, texture references, VMM access (native vs bridged)"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $(cat "$carry/COMMIT" 2>/dev/null || echo unknown)"
  echo "- command: \`bash tests/gpu/run-texref.sh $carry\`"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- bridged runs' isolation: $isolation"
  echo "- exit codes: native $native_rc, bridged $bridged_rc"
  echo
  echo "| check | native | bridged | result |"
  echo "| --- | --- | --- | --- |"
  table
  rc=$?
  echo
  echo "Host log lines about refusals:"
  echo
  echo '```'
  grep -h -E "refused|error" "$work/host.log" | sed 's/\x1b\[[0-9;]*m//g' | head -20
  echo '```'
  exit $rc
} | tee "$results"
status=${PIPESTATUS[0]}
[ "$native_rc" -eq 0 ] && [ "$bridged_rc" -eq 0 ] && [ "$status" -eq 0 ]
