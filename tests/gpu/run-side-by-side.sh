#!/usr/bin/env bash
# tests/gpu/run-side-by-side.sh CARRYDIR: how often per_thread_stream's "two threads'
# default streams run side by side" holds, natively and bridged (the GPU hidden from the
# bridged process), over RUNS runs (default 16). With BASELINE_HOST set to another
# vmcuda-host binary, the bridged runs alternate between the two hosts, so a change to
# the host is measured against the one before in the same run.
# CARRYDIR: bin/vmcuda-host, guest/lib, apps/per_thread_stream.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 2
c=$(cd "${1:?usage: run-side-by-side.sh CARRYDIR}" && pwd)
t=$(mktemp -d)
hosts=(new)
"$c/bin/vmcuda-host" serve --unix "$t/new.sock" --executor cuda --state-dir "$t/st-new" 2>"$t/new.log" &
pids=($!)
if [ -n "${BASELINE_HOST:-}" ]; then
  "$BASELINE_HOST" serve --unix "$t/old.sock" --executor cuda --state-dir "$t/st-old" 2>"$t/old.log" &
  pids+=($!)
  hosts=(old new)
fi
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 100); do
  ready=1
  for h in "${hosts[@]}"; do [ -S "$t/$h.sock" ] || ready=0; done
  [ "$ready" = 1 ] && break
  sleep 0.1
done
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
yes() { grep -q "side by side: yes"; }
n=${RUNS:-16}
declare -A count=([old]=0 [new]=0)
for _ in $(seq "$n"); do
  for h in "${hosts[@]}"; do
    LD_LIBRARY_PATH="$c/guest/lib" VMCUDA_SERVER="unix:$t/$h.sock" "${isolate[@]}" \
      "$c/apps/per_thread_stream" | yes && count[$h]=$((count[$h] + 1))
  done
done
native=0
for _ in 1 2 3 4; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$c/apps/per_thread_stream" | yes && native=$((native + 1))
done
line="side by side yes: native $native/4, bridged $(cat "$c/COMMIT" 2>/dev/null | cut -c1-7) ${count[new]}/$n"
[ -n "${BASELINE_HOST:-}" ] && line="$line, bridged baseline host ${count[old]}/$n"
echo "$line"
