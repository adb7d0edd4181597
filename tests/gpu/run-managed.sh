#!/usr/bin/env bash
# tests/gpu/run-managed.sh CARRY [PART...]: on the GPU machine, managed memory natively
# and through vmcuda in the same run, from artifacts built by tests/gpu/carry.sh:
#   apps     every test app (the managed_* ones among them) on NVIDIA's shared runtime
#            and with nvcc's static runtime, over vmcuda's driver (tests/gpu/run.sh,
#            twice);
#   samples  NVIDIA's public samples (tests/gpu/samples/run.sh; all of them, the managed
#            ones among them), when carried;
#   bench    bench --managed natively, bridged with the shared-memory data path, and
#            bridged with every byte on the socket (VMCUDA_SHARED_MEMORY=0), three
#            times each, interleaved; bench-managed.md has the medians and ratios;
#   pages    tests/c/managed_pages (CARRY/managed_pages, built against the guest
#            library) bridged, on both data paths: the page model's own checks.
# Default: all four. VMCUDA_APPS / VMCUDA_SAMPLES (names, space-separated) narrow the
# apps and samples run (default: all). Writes $OUT (default build/gpu-managed): one directory per part
# with each script's RESULTS*.md, and bench-managed.txt; exits non-zero if a part failed.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=$(cd "${1:?usage: run-managed.sh CARRY [apps|samples|bench]...}" && pwd)
shift
parts=${*:-apps samples bench pages}
out=${OUT:-build/gpu-managed}
mkdir -p "$out"
export VMCUDA_COMMIT_FILE="$carry/COMMIT"
rc=0
common=(VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib")

for part in $parts; do
  case $part in
    apps)
      for variant in shared static; do
        dir=$carry/apps runtime=nvidia
        [ "$variant" = static ] && dir=$carry/apps-static
        echo "== apps ($variant) $(date -u +%T)"
        env "${common[@]}" OUT="$out/apps-$variant" VMCUDA_APPS_DIR="$dir" \
          VMCUDA_BRIDGED_RUNTIME=$runtime bash tests/gpu/run.sh ${VMCUDA_APPS:-} >"$out/apps-$variant.log" 2>&1 || rc=1
        grep -E '^\*\*|^- result|PASS|FAIL' "$out/apps-$variant/RESULTS.md" | grep -E 'managed|result|^\*\*' | head -12
      done
      ;;
    samples)
      [ -e "$carry/samples.tar.xz" ] || { echo "no samples carried"; continue; }
      echo "== samples $(date -u +%T)"
      env "${common[@]}" OUT="$out/samples" VMCUDA_SAMPLES_DEADLINE="${VMCUDA_SAMPLES_DEADLINE:-300}" \
        bash tests/gpu/samples/run.sh "$carry/samples.tar.xz" ${VMCUDA_SAMPLES:-} >"$out/samples.log" 2>&1 || rc=1
      grep -E '^- result|Unified|conjugateGradientUM|NV12|graphMemoryNodes|MultiBlockCG' \
        "$out/samples/RESULTS-SAMPLES.md" | head -12
      ;;
    bench)
      echo "== bench --managed $(date -u +%T)"
      t=$(mktemp -d)
      "$carry/bin/vmcuda-host" serve --unix "$t/s" --executor cuda --state-dir "$t/state" 2>"$t/host.log" &
      host=$!
      for _ in $(seq 100); do [ -S "$t/s" ] && break; sleep 0.1; done
      # shellcheck source=tests/gpu/hide-gpu.sh
      source tests/gpu/hide-gpu.sh
      # Three rounds of the three runs, interleaved, so that a slow spell of the
      # machine does not fall on one side only; the table takes each figure's median.
      {
        echo "# bench --managed, $(date -u '+%F %T') UTC, commit $(cat "$carry/COMMIT")"
        echo "# GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
        echo "# bridged: $isolation"
        for round in 1 2 3; do
          echo "## native (round $round)"
          LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$carry/bench/bench" --managed 2>&1
          echo "## shm (round $round)"
          LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$t/s" \
            "${isolate[@]}" "$carry/bench/bench" --managed 2>&1
          echo "## socket (round $round)"
          LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$t/s" VMCUDA_SHARED_MEMORY=0 \
            "${isolate[@]}" "$carry/bench/bench" --managed 2>&1
        done
      } >"$out/bench-managed.txt" || rc=1
      python3 - "$out/bench-managed.txt" >"$out/bench-managed.md" <<'PY'
import re, statistics, sys
runs, mode = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"## (\w+)", line)
    if m:
        mode = m.group(1)
    m = re.match(r"RESULT (\S+) ([\d.]+) GB/s", line)
    if m and mode:
        runs.setdefault((mode, m.group(1)), []).append(float(m.group(2)))
names = sorted({n for _, n in runs}, key=lambda n: (n.split("_")[1], int(re.sub(r"\D", "", n.split("_")[-1]))))
print("| figure (GB/s, median of 3 runs) | native | shm | shm / native | socket | socket / native |")
print("| --- | --- | --- | --- | --- | --- |")
for n in names:
    med = {k: statistics.median(runs[(k, n)]) for k in ("native", "shm", "socket") if (k, n) in runs}
    if "native" not in med:
        continue
    cell = lambda k: f"{med[k]:.2f}" if k in med else "-"
    ratio = lambda k: f"{med[k] / med['native']:.2f}x" if k in med else "-"
    print(f"| {n} | {cell('native')} | {cell('shm')} | {ratio('shm')} | {cell('socket')} | {ratio('socket')} |")
PY
      kill "$host"
      grep -q FAIL "$out/bench-managed.txt" && rc=1
      cat "$out/bench-managed.md"
      ;;
    pages)
      echo "== managed_pages $(date -u +%T)"
      t=$(mktemp -d)
      "$carry/bin/vmcuda-host" serve --unix "$t/s" --executor cuda --state-dir "$t/state" 2>"$t/host.log" &
      host=$!
      for _ in $(seq 100); do [ -S "$t/s" ] && break; sleep 0.1; done
      # shellcheck source=tests/gpu/hide-gpu.sh
      source tests/gpu/hide-gpu.sh
      for shm in 1 0; do
        echo "## VMCUDA_SHARED_MEMORY=$shm" >>"$out/managed-pages.txt"
        LD_LIBRARY_PATH="$carry/guest/lib" VMCUDA_SERVER="unix:$t/s" VMCUDA_SHARED_MEMORY=$shm \
          "${isolate[@]}" "$carry/managed_pages" >>"$out/managed-pages.txt" 2>&1 || rc=1
      done
      kill "$host"
      grep -E '^(##|FAIL|PASSED|FAILED)' "$out/managed-pages.txt"
      ;;
    *) echo "run-managed.sh: unknown part $part" >&2; rc=2 ;;
  esac
done
exit $rc
