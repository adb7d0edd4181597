#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time; fails if any of them finds a crash.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET]     (default 20: five targets, 100 s in all)
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
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

secs=${1:-20}
sanitizer=${FUZZ_SANITIZER:-address}
targets=(frame_decode handshake fatbin vsock_packet dispatch)

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

echo "== building the fuzz targets (sanitizer: $sanitizer)"
start=$(date +%s)
cargo fuzz build "${opts[@]}"
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
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec):' "$log" |
      sed 's/^stat::/  /' | paste -sd ' ' || true
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

if [ "${#crashed[@]}" -gt 0 ]; then
  echo "fuzz: ${#targets[@]} targets, $secs s each, ${#crashed[@]} crashed: ${crashed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, $secs s each, no crash"
