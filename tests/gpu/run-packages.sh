#!/usr/bin/env bash
# tests/gpu/run-packages.sh CARRY: the quick start from the built packages, on the GPU
# machine, without installing anything system-wide: the host .deb unpacked into a
# scratch root (its vmcuda-host, its shipped /etc/vmcuda/host.toml), the guest tarball
# installed with its install.sh into a scratch prefix, then `vmcuda info`, and test
# programs run with `vmcuda-run` and compared with native runs; `vmcuda-host status` and
# the Prometheus endpoint while a guest is connected.
#
# CARRY holds vmcuda-host_*.deb, vmcuda-guest-*.tar.gz, test programs and COMMIT.
# Results: the Markdown on stdout and in $OUT/RESULTS-PACKAGES.md.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry=$(cd "${1:?usage: run-packages.sh CARRY}" && pwd)
out=${OUT:-build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
real_cudart=${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}
rc=0

root="$work/root"
dpkg-deb -x "$carry"/vmcuda-host_*.deb "$root"
tar -xzf "$carry"/vmcuda-guest-*.tar.gz -C "$work"
sh "$work"/vmcuda-guest-*/install.sh --prefix "$work/guest" --bindir "$work/bin" --sbindir "$work/sbin" \
  --no-driver >/dev/null
host="$root/usr/bin/vmcuda-host"
sock="$work/vmcuda.sock"
port=$((20000 + RANDOM % 20000))
"$host" check-config --config "$root/etc/vmcuda/host.toml" >"$work/check-config.txt" 2>&1 || rc=1
"$host" serve --config "$root/etc/vmcuda/host.toml" --unix "$sock" --state-dir "$work/state" \
  --executor "${VMCUDA_PKG_EXECUTOR:-cuda}" --metrics "127.0.0.1:$port" 2>"$work/host.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.1; done
export VMCUDA_SERVER="unix:$sock"

table=""
for app in vector_add matmul; do
  LD_LIBRARY_PATH="$real_cudart" "$carry/$app" >"$work/$app.native" 2>&1
  n=$?
  "$work/bin/vmcuda-run" "$carry/$app" >"$work/$app.bridged" 2>&1
  b=$?
  if [ "$n" = "$b" ] && cmp -s "$work/$app.native" "$work/$app.bridged"; then same=PASS; else same=FAIL; rc=1; fi
  table+="| $app | $n | $b | $same |"$'\n'
done

# A guest that stays connected while status and metrics are read.
fifo="$work/hold"
mkfifo "$fifo"
(LD_LIBRARY_PATH="$work/guest/lib" "$carry/isolation" fill $((64 << 20)) <"$fifo" >"$work/hold.out" 2>&1) &
holder=$!
exec 9>"$fifo"
for _ in $(seq 100); do grep -q filled "$work/hold.out" 2>/dev/null && break; sleep 0.1; done
"$host" status --state-dir "$work/state" >"$work/status.txt" 2>&1 || rc=1
python3 - "$port" >"$work/metrics.txt" 2>&1 <<'EOF' || rc=1
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode())
EOF
exec 9>&-
wait "$holder"

{
  echo "## The quick start from the packages, on the GPU (tests/gpu/run-packages.sh)"
  echo
  echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
  echo "- commit: $(cat "$carry/COMMIT" 2>/dev/null || echo unknown)"
  echo "- command: \`tests/gpu/run-packages.sh $1\`"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- packages: $(cd "$carry" && ls vmcuda-host_*.deb vmcuda-guest-*.tar.gz | tr '\n' ' ')"
  echo
  echo "\`vmcuda-host check-config\` on the shipped /etc/vmcuda/host.toml:"
  echo; echo '```'; cat "$work/check-config.txt"; echo '```'; echo
  echo "\`vmcuda info\` from the installed guest tarball:"
  echo; echo '```'; "$work/bin/vmcuda" info 2>&1; echo '```'; echo
  echo "| program (vmcuda-run) | native exit | bridged exit | output identical |"
  echo "| --- | --- | --- | --- |"
  printf '%s' "$table"
  echo
  echo "\`vmcuda-host status\` with one guest holding 64 MiB:"
  echo; echo '```'; cat "$work/status.txt"; echo '```'; echo
  echo "From \`GET /metrics\` at that moment (the per-VM series for \`local\`):"
  echo; echo '```'; grep -E '^vmcuda_vm_(connections|device_memory_bytes|kernels_launched_total|copied_bytes_total|calls_total)\{vm="local"' "$work/metrics.txt"; echo '```'
} | tee "$out/RESULTS-PACKAGES.md"
exit $rc
