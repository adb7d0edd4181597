#!/usr/bin/env bash
# tests/gpu/run-admin.sh CARRY: on the GPU machine, a guest granted at run time through
# the daemon's admin API (CUDA executor; docs/admin-api.md): a torch training loop
# (tests/gpu/suspend_train.py) over TCP with the grant's token, under its quota, against
# a native run's losses; a second grant promising more than the GPU has, refused; the
# first revoked under a running guest: its work ends and its GPU memory comes back.
# Bridged runs see the machine as a VM guest does (tests/gpu/hide-gpu.sh). CARRY:
# bin/vmcuda-host, guest/lib, COMMIT. Results: $OUT/RESULTS-ADMIN.md and stdout.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=${1:?usage: run-admin.sh CARRY}
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
host="$carry/bin/vmcuda-host"
port=$((20000 + RANDOM % 20000))
"$host" serve --unix "$work/s.sock" --tcp "127.0.0.1:$port" --state-dir "$work/state" --executor cuda 2>"$work/host.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
admin() { "$host" admin "$@" --state-dir "$work/state"; }
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
bridged() {
  ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$carry/guest/lib/libcuda.so.1" LD_LIBRARY_PATH="$carry/guest/lib" \
    VMCUDA_SERVER="tcp:127.0.0.1:$port" VMCUDA_TOKEN="$token" timeout -k 5 300 "$@"
}
baseline=$(used)
token=$(admin grant job-a --generate-token --memory-quota 8GiB 2>"$work/grant.err")
grant_rc=$?
env -u VMCUDA_SERVER timeout -k 5 300 "$py" tests/gpu/suspend_train.py 20 0 1024 >"$work/native.out" 2>"$work/native.err"
bridged "$py" tests/gpu/suspend_train.py 20 0 1024 >"$work/bridged.out" 2>"$work/bridged.err"
rc=$?
same=no
cmp -s "$work/native.out" "$work/bridged.out" && same=yes
admin grant job-b --generate-token --memory-quota 200GiB >/dev/null 2>"$work/over.err"
over_rc=$?
# A long loop, revoked at step 5.
bridged "$py" tests/gpu/suspend_train.py 400 0.05 1024 >"$work/long.out" 2>"$work/long.err" &
g=$!
for _ in $(seq 3000); do grep -q '^step 5 ' "$work/long.out" 2>/dev/null && break; sleep 0.02; done
during=$(used)
admin revoke job-a >"$work/revoke.out" 2>&1
revoke_rc=$?
wait $g
long_rc=$?
sleep 2
after=$(used)
{
  echo "# A guest granted at run time through the admin API"
  echo
  echo "- date: $(date -u +%F) commit: $(head -1 "$carry/COMMIT" 2>/dev/null)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- command: bash tests/gpu/run-admin.sh CARRY"
  echo "- bridged process isolation: $isolation"
  echo
  echo "| check | result |"
  echo "| --- | --- |"
  echo "| \`admin grant job-a --generate-token --memory-quota 8GiB\` | exit $grant_rc, token of ${#token} characters |"
  echo "| torch loop (20 steps) over TCP with that token | exit $rc, $(grep -c '^step' "$work/bridged.out") steps, losses identical to native: **$same** |"
  echo "| a second grant of 200 GiB (more than the GPU) | exit $over_rc: $(head -1 "$work/over.err") |"
  echo "| revoke under a running loop (at step 5) | revoke exit $revoke_rc ($(head -1 "$work/revoke.out")); the loop exited $long_rc after $(grep -c '^step' "$work/long.out") steps |"
  echo "| GPU memory used (MiB): before, during the loop, 2 s after the revoke | $baseline, $during, $after |"
  echo
  echo "The revoked loop's last lines:"
  echo
  echo '```'
  tail -3 "$work/long.err"
  echo '```'
} | tee "$out/RESULTS-ADMIN.md"
