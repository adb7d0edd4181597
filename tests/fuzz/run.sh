#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time; fails if any of them finds a crash.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET]       (default 20: eight targets fuzzed, under
#                                                 3 min in all)
#   tests/fuzz/run.sh --long [MINUTES_PER_TARGET] [--no-coverage]
#                                        (default 10 min each, then the coverage summary)
#   tests/fuzz/run.sh --coverage [SECONDS_PER_TARGET]
#   FUZZ_TARGETS="session dispatch" tests/fuzz/run.sh ...   (only these targets)
#
# The targets are built with AddressSanitizer: besides memory errors in unsafe code,
# its allocator lets libFuzzer catch a single oversized allocation (a guest asking the
# host for gigabytes), which plain builds only notice once the pages are touched.
# -Zsanitizer is a nightly flag; on the stable toolchain this script sets
# RUSTC_BOOTSTRAP=1 for the fuzz builds only. FUZZ_SANITIZER=none builds without a
# sanitizer instead (no unstable flag at all; about three times the executions per
# second). Debug assertions and overflow checks are on either way.
#
# Each target reads the committed seeds in tests/fuzz/corpus/<target>/ and writes what
# it discovers to tests/fuzz/target/corpus/<target>/ (ignored by git), so later runs on
# the same checkout start from there. Crashes land in tests/fuzz/artifacts/<target>/.
#
# Every run prints, per target, libFuzzer's own figures: executions, executions per
# second, and `cov` (coverage points, edges of the instrumented code) and `ft`
# (features) reached. --coverage (the default with --long) also replays each target's
# whole corpus through a source-coverage build (`cargo fuzz coverage`) and prints the
# lines and regions of vmcuda's crates (wire, host-backend, vmm-glue) it executed (out
# of those linked into the target), from
# `llvm-cov report` of rustup's llvm-tools component (installed if missing). Each
# target's per-file report lands in tests/fuzz/target/coverage-<target>.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

secs=20
coverage=0
while [ $# -gt 0 ]; do
  case "$1" in
    --long)
      coverage=1
      minutes=10
      if [ $# -gt 1 ] && [[ "$2" =~ ^[0-9]+$ ]]; then
        minutes=$2
        shift
      fi
      secs=$((minutes * 60))
      ;;
    --coverage) coverage=1 ;;
    --no-coverage) coverage=0 ;;
    [0-9]*) secs=$1 ;;
    *)
      echo "usage: $0 [SECONDS] | --long [MINUTES] [--no-coverage] | --coverage [SECONDS]" >&2
      exit 2
      ;;
  esac
  shift
done
# libFuzzer reads -max_total_time=0 as "no limit".
if [ "$secs" -lt 1 ]; then
  echo "$0: the time per target must be at least one second (or minute)" >&2
  exit 2
fi
sanitizer=${FUZZ_SANITIZER:-address}
# `session` is a whole session fed random op sequences, the quota checked after every
# step; its committed corpus holds the inputs of the quota faults it found, fixed since
# (docs/security.md, "Quota: known gaps"). Like every target, it starts from there.
# `peer` is the daemon's peer-link broker, fed workers' messages and other daemons'
# transfers.
default_targets="frame_decode handshake fatbin vsock_packet dispatch session ring peer"
read -r -a targets <<<"${FUZZ_TARGETS:-$default_targets}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# One target dir per sanitizer, so switching does not rebuild everything.
opts=(--fuzz-dir tests/fuzz -s "$sanitizer" --target-dir "tests/fuzz/target/$sanitizer")
env_prefix=
if [ "$sanitizer" != none ] && ! rustc --version | grep -q nightly; then
  export RUSTC_BOOTSTRAP=1
  env_prefix="RUSTC_BOOTSTRAP=1 "
fi

echo "== building the fuzz targets (sanitizer: $sanitizer; cargo: errors and warnings only)"
start=$(date +%s)
CARGO_TERM_QUIET=true cargo fuzz build "${opts[@]}"
echo "fuzz build: $(($(date +%s) - start)) s"

crashed=()
for t in "${targets[@]}"; do
  echo "== fuzzing $t for $secs s"
  work="tests/fuzz/target/corpus/$t"
  mkdir -p "$work" "tests/fuzz/artifacts/$t"
  log=$(mktemp)
  # -rss_limit_mb (and with ASan the per-allocation limit, which defaults to it): a
  # runaway allocation is a finding, not a reason to swap. -timeout: 10 s is a hang.
  if cargo fuzz run "${opts[@]}" "$t" "$work" "tests/fuzz/corpus/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    # libFuzzer's last status line ("#N DONE cov: C ft: F ...") has its coverage.
    cov=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 |
      sed -n 's/.*\(cov: [0-9]*\) \(ft: [0-9]*\).*/\1 \2/p')
    stats=$(grep -E '^stat::(number_of_executed_units|average_exec_per_sec):' "$log" |
      sed 's/^stat::/  /' | paste -sd ' ' || true)
    echo "$stats${cov:+  $cov}"
  else
    tail -n 60 "$log"
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    echo "fuzz: $t FOUND A CRASH: ${artifact:-see the log above}" >&2
    if [ -n "$artifact" ]; then
      echo "  reproduce: ${env_prefix}cargo fuzz run ${opts[*]} $t $artifact" >&2
    fi
    crashed+=("$t")
  fi
  rm -f "$log"
done

if [ "$coverage" -eq 1 ]; then
  sysroot=$(rustc --print sysroot)
  host=$(rustc -vV | sed -n 's/^host: //p')
  bin="$sysroot/lib/rustlib/$host/bin"
  if [ ! -x "$bin/llvm-cov" ]; then
    echo "== installing rustup's llvm-tools (llvm-cov, llvm-profdata)"
    rustup component add llvm-tools || rustup component add llvm-tools-preview
  fi
  echo "== coverage of each target's corpus (lines and regions of wire, host-backend, vmm-glue)"
  covopts=(--fuzz-dir tests/fuzz --target-dir tests/fuzz/target/coverage)
  empty=tests/fuzz/target/coverage-empty
  mkdir -p "$empty"
  : >"$empty/empty"
  for t in "${targets[@]}"; do
    log=$(mktemp)
    # cargo fuzz replays a corpus in one process, which a crashing input stops: let it
    # build the coverage binary on the empty input only, and replay here, one input
    # per process, leaving crashes out.
    if ! cargo fuzz coverage "${covopts[@]}" "$t" "$empty" >"$log" 2>&1; then
      tail -n 20 "$log"
      echo "coverage: $t: the coverage build failed" >&2
      rm -f "$log"
      continue
    fi
    rm -f "$log"
    exe=$(find tests/fuzz/target/coverage -path "*/release/$t" -type f -perm -u+x | head -n 1)
    raw="tests/fuzz/target/coverage-raw/$t"
    rm -rf "$raw"
    mkdir -p "$raw"
    replayed=0
    left_out=0
    while IFS= read -r -d '' input; do
      if LLVM_PROFILE_FILE="$raw/%p.profraw" "$exe" -runs=1 "$input" >/dev/null 2>&1; then
        replayed=$((replayed + 1))
      else
        left_out=$((left_out + 1))
      fi
    done < <(find "tests/fuzz/corpus/$t" "tests/fuzz/target/corpus/$t" -type f -print0 2>/dev/null)
    profdata="$raw.profdata"
    find "$raw" -name '*.profraw' -print >"$raw.list"
    "$bin/llvm-profdata" merge -sparse -f "$raw.list" -o "$profdata"
    report="tests/fuzz/target/coverage-$t.txt"
    # Only vmcuda's own crates count: not the standard library, dependencies or the
    # fuzz harness itself.
    "$bin/llvm-cov" report "$exe" -instr-profile="$profdata" \
      -ignore-filename-regex='(/\.cargo/|/rustc/|/\.rustup/|tests/fuzz/)' >"$report"
    # TOTAL columns: regions, missed, cover, functions, missed, executed, lines, missed,
    # cover, branches, missed, cover.
    awk -v t="$t" -v n="$replayed" -v x="$left_out" '/^TOTAL/ {
        printf "coverage: %-13s lines %d/%d (%s), regions %d/%d (%s); %d inputs",
          t, $8 - $9, $8, $10, $2 - $3, $2, $4, n
        if (x > 0) printf ", %d more left out (they crash)", x
        printf "\n" }' "$report"
  done
fi

if [ "${#crashed[@]}" -gt 0 ]; then
  echo "fuzz: ${#targets[@]} targets, $secs s each, ${#crashed[@]} crashed: ${crashed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, $secs s each, no crash"
