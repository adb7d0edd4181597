#!/usr/bin/env bash
# tests/gpu/run-reconnect.sh CARRY: on the GPU machine, guests whose connections are cut
# under them come back to their sessions (CUDA executor; docs/survival.md,
# "Reconnect"). Every connection goes through bin/cut-proxy, a Unix relay that cuts
# all the connections it carries every few hundred milliseconds, as a VM's live
# migration resets its vsock connections. A torch training loop
# (tests/gpu/suspend_train.py) bridged through it against a native run's losses, and
# suspend_steps (patterns written, copied and read back each step) for the pause a
# program sees. Then the same over TLS: a second daemon on a loopback TCP port with a
# throwaway certificate (bin/test-pki), the guest speaking `tls:` through `cut-proxy tcp`;
# each return's new connection is relayed by the worker that made its handshake.
# Bridged runs see the machine as a VM guest does (tests/gpu/hide-gpu.sh).
# CARRY: bin/vmcuda-host, bin/cut-proxy, bin/test-pki, guest/lib, suspend_steps, COMMIT
# (tests/gpu/carry-quick.sh makes all of them).
# Results: $OUT/RESULTS-RECONNECT.md and stdout.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=$(cd "${1:?usage: run-reconnect.sh CARRY}" && pwd)
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
host="$carry/bin/vmcuda-host"
"$host" serve --unix "$work/s.sock" --state-dir "$work/state" --executor cuda 2>>"$work/host.log" &
daemon=$!
for _ in $(seq 200); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
proxy=""
tls_daemon=""
trap 'kill $daemon $tls_daemon $proxy 2>/dev/null; wait 2>/dev/null' EXIT
cutting() {
  "$carry/bin/cut-proxy" "$work/p.sock" "$work/s.sock" "$1" >"$work/cuts-$1.log" 2>&1 &
  proxy=$!
  for _ in $(seq 100); do [ -S "$work/p.sock" ] && break; sleep 0.05; done
}
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
bridged() {
  ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$carry/guest/lib/libcuda.so.1" LD_LIBRARY_PATH="$carry/guest/lib" \
    VMCUDA_SERVER="${server:-unix:$work/p.sock}" timeout -k 5 300 "$@"
}
resumes() { grep -c 'guest came back to its session' "${1:-$work/host.log}"; }

env -u VMCUDA_SERVER timeout -k 5 300 "$py" tests/gpu/suspend_train.py 60 0.05 1024 >"$work/native.out" 2>"$work/native.err"
cutting 500
before=$(resumes)
bridged "$py" tests/gpu/suspend_train.py 60 0.05 1024 >"$work/bridged.out" 2>"$work/bridged.err"
rc=$?
kill $proxy; wait $proxy 2>/dev/null
torch_cuts=$(grep -c '^cut' "$work/cuts-500.log")
torch_resumes=$(( $(resumes) - before ))
same=no
cmp -s "$work/native.out" "$work/bridged.out" && same=yes
rm -f "$work/p.sock"
cutting 300
before=$(resumes)
steps=$(bridged "$carry/suspend_steps" 300 10 1024 2>&1)
kill $proxy; wait $proxy 2>/dev/null
steps_cuts=$(grep -c '^cut' "$work/cuts-300.log")
steps_resumes=$(( $(resumes) - before ))
rm -f "$work/p.sock"
# The same program with no cut, for its pause between steps without drops.
cutting 100000000
calm=$(bridged "$carry/suspend_steps" 300 10 1024 2>&1)
kill $proxy; wait $proxy 2>/dev/null

# Over TLS. The token and the certificate are made here, for this run only.
tls_rows=()
if "$carry/bin/test-pki" "$work/pki" 127.0.0.1 >/dev/null 2>"$work/pki.err"; then
  token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf '[tcp]\ntls_cert = "%s"\ntls_key = "%s"\n\n[[vm]]\nname = "tls-guest"\ntcp = true\ntoken = "%s"\n' \
    "$work/pki/cert.pem" "$work/pki/key.pem" "$token" >"$work/tls.toml"
  "$host" serve --config "$work/tls.toml" --tcp "127.0.0.1:$port" --state-dir "$work/tls-state" \
    --executor cuda 2>>"$work/tls-host.log" &
  tls_daemon=$!
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  tls_cutting() {
    "$carry/bin/cut-proxy" tcp "127.0.0.1:$port" "$1" >"$work/tls-cuts-$1.log" 2>&1 &
    proxy=$!
    for _ in $(seq 100); do grep -q '^listening on' "$work/tls-cuts-$1.log" && break; sleep 0.05; done
    server="tls:$(sed -n 's/^listening on //p' "$work/tls-cuts-$1.log")"
  }
  export VMCUDA_TOKEN="$token" VMCUDA_TLS_CA="$work/pki/ca.pem"
  tls_cutting 500
  before=$(resumes "$work/tls-host.log")
  bridged "$py" tests/gpu/suspend_train.py 60 0.05 1024 >"$work/tls-bridged.out" 2>"$work/tls-bridged.err"
  rc=$?
  kill $proxy; wait $proxy 2>/dev/null
  tls_same=no
  cmp -s "$work/native.out" "$work/tls-bridged.out" && tls_same=yes
  tls_rows+=("| torch loop over TLS, cut every 500 ms | exit $rc, $(grep -c '^step' "$work/tls-bridged.out") steps, losses identical to native: **$tls_same**, kept tensor intact: $(sed -n 's/^kept tensor intact: //p' "$work/tls-bridged.out"); $(grep -c '^cut' "$work/tls-cuts-500.log") cuts, $(( $(resumes "$work/tls-host.log") - before )) sessions come back to |")
  tls_cutting 300
  before=$(resumes "$work/tls-host.log")
  steps=$(bridged "$carry/suspend_steps" 300 10 1024 2>&1)
  kill $proxy; wait $proxy 2>/dev/null
  tls_rows+=("| suspend_steps over TLS, cut every 300 ms | $(grep -E '^(PASS|FAIL)' <<<"$steps" | head -1); $(grep -c '^cut' "$work/tls-cuts-300.log") cuts, $(( $(resumes "$work/tls-host.log") - before )) sessions come back to; $(grep 'longest pause' <<<"$steps") |")
  # Every connection a guest comes back on is counted; the session takes the latest of
  # those that arrived while it still served the cut one (calls through the command
  # ring do not see the cut at once), so it may take fewer.
  tls_rows+=("| connections a TLS guest came back on, relayed by the worker that made their handshake | $(grep -c 'relayed=true' "$work/tls-host.log") of $(grep -c 'its connection went to its session' "$work/tls-host.log") |")
  unset server VMCUDA_TOKEN VMCUDA_TLS_CA
else
  tls_rows+=("| over TLS | not run: test-pki failed: $(head -1 "$work/pki.err") |")
fi
{
  echo "# Guests come back to their sessions after their connections are cut"
  echo
  echo "- date: $(date -u +%F) commit: $(head -1 "$carry/COMMIT" 2>/dev/null)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- command: bash tests/gpu/run-reconnect.sh CARRY"
  echo "- bridged process isolation: $isolation"
  echo
  echo "| check | result |"
  echo "| --- | --- |"
  echo "| torch loop (60 steps), every connection cut every 500 ms | exit $rc, $(grep -c '^step' "$work/bridged.out") steps, losses identical to native: **$same**, kept tensor intact: $(sed -n 's/^kept tensor intact: //p' "$work/bridged.out"); $torch_cuts cuts, $torch_resumes sessions come back to |"
  echo "| suspend_steps (300 steps, 1 GiB kept), cut every 300 ms | $(grep -E '^(PASS|FAIL)' <<<"$steps" | head -1); $steps_cuts cuts, $steps_resumes sessions come back to; $(grep 'longest pause' <<<"$steps") |"
  echo "| the same, no cut | $(grep -E '^(PASS|FAIL)' <<<"$calm" | head -1); $(grep 'longest pause' <<<"$calm") |"
  printf '%s\n' "${tls_rows[@]}"
  echo
  echo "Host log lines about the sessions (first 20):"
  echo
  echo '```'
  grep -E 'came back|dropped|refused|lacks' "$work/host.log" | head -20 | cut -c1-200
  echo '```'
  echo
  echo "Torch stderr (bridged, last 5 lines):"
  echo
  echo '```'
  tail -5 "$work/bridged.err"
  echo '```'
  echo
  echo "TLS daemon log lines about the sessions (first 10):"
  echo
  echo '```'
  grep -E 'came back|dropped|refused|lacks|relay' "$work/tls-host.log" 2>/dev/null | head -10 | cut -c1-200
  echo '```'
} | tee "$out/RESULTS-RECONNECT.md"
