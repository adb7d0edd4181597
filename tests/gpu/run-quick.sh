#!/usr/bin/env bash
# tests/gpu/run-quick.sh CARRY: on the GPU machine, the checks a change to the guest
# library or the worker needs first, in one go (about 4 minutes): every test app
# natively and bridged (run.sh), the JAX training steps (bench/run-jax-steps.sh, 3
# rounds), one profiled bridged run of the JAX MLP steps, and the frameworks rows whose
# time is waits and synchronizes (bench/run-frameworks.sh: launch_sync, cupy_rawkernel,
# graph_replay, nccl_allreduce). CARRY from tests/gpu/carry-quick.sh. Writes at most 8
# files under $OUT (apps/, jax/, profile/, frameworks/) and prints a short table last.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=$(cd "${1:?usage: run-quick.sh CARRY}" && pwd)
out=${OUT:-build/gpu-results}
mkdir -p "$out/apps" "$out/jax" "$out/profile" "$out/frameworks"
export VMCUDA_COMMIT_FILE="$carry/COMMIT"
log=$(mktemp -d)

OUT="$out/apps" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
  VMCUDA_APPS_DIR="$carry/apps" timeout 150 bash tests/gpu/run.sh >"$log/apps.out" 2>&1
echo "apps: exit $?"
rm -f "$out/apps/host.log"

OUT="$out/jax" timeout 200 bash bench/run-jax-steps.sh "$carry" >"$log/jax.out" 2>&1
echo "jax steps: exit $?"

# The profile's path is fixed before the command: in `OUT=x VAR=$OUT/...` the second
# assignment already sees the new OUT (the harness's scratch folder here).
profile="$out/profile/jax-mlp-%p.txt"
OUT="$log/profile-run" VMCUDA_BENCH_ROUNDS=1 VMCUDA_BENCH_STEPS=mlp VMCUDA_PROFILE="$profile" \
  timeout 60 bash bench/run-jax-steps.sh "$carry" >"$log/profile.out" 2>&1
echo "jax profile: exit $?"

OUT="$out/frameworks" VMCUDA_BENCH_ROWS="launch_sync cupy_rawkernel graph_replay nccl_allreduce" \
  VMCUDA_BENCH_PROFILE=0 timeout 240 bash bench/run-frameworks.sh "$carry" >"$log/frameworks.out" 2>&1
echo "frameworks: exit $?"

echo
echo "| check | result |"
echo "| --- | --- |"
echo "| apps | $(grep -m1 '^- result:' "$out/apps/RESULTS.md" 2>/dev/null | sed 's/^- result: //') |"
grep -E '^\| jax_' "$out/jax/RESULTS-JAX-STEPS.md" 2>/dev/null | awk -F'|' '{print "| " $2 " |" $4 "/" $3 "=" $5 " |"}'
grep -E '^\| (launch_sync|cupy|graph_replay|nccl)' "$out/frameworks/RESULTS-FRAMEWORKS.md" 2>/dev/null |
  cut -d'|' -f1-6
ls "$out/profile"
