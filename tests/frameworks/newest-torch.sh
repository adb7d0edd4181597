#!/usr/bin/env bash
# tests/frameworks/newest-torch.sh: the newest torch wheel from PyPI (a CUDA 13.x build
# newer than the host's driver, as NVIDIA's minor-version compatibility allows) under
# the default guest install (`vmcuda-run`, NVIDIA's runtime and libraries over vmcuda's
# libcuda.so.1), against the host-memory test double: import, device, allocations,
# copies, streams and events, each step timed (tests/frameworks/newest_torch_check.py).
# Not part of tests/run.sh: the wheels are about 4 GB.
#   VMCUDA_TORCH_VENV  venv to use or make (default: $HOME/.cache/vmcuda/torch-newest)
#   VMCUDA_TORCH_SPEC  what to pip install (default: torch, the newest)
# Needs target/release/vmcuda-host and build/guest/lib (tests/demo.sh builds both).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
venv=${VMCUDA_TORCH_VENV:-$HOME/.cache/vmcuda/torch-newest}
spec=${VMCUDA_TORCH_SPEC:-torch}
host_bin=${VMCUDA_HOST_BIN:-target/release/vmcuda-host}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import torch' 2>/dev/null || "$venv/bin/pip" install -q "$spec" numpy
work=$(mktemp -d)
# The clean-up keeps the script's exit status (under set -e a bare `wait` for the
# killed daemon would make it 143).
trap 'rc=$?; kill $host_pid 2>/dev/null || true; wait $host_pid 2>/dev/null || true; rm -rf "$work"; exit $rc' EXIT
"$host_bin" serve --unix "$work/vmcuda.sock" --executor host-memory --state-dir "$work/state" \
  2>"$work/host.log" &
host_pid=$!
for _ in $(seq 100); do [ -S "$work/vmcuda.sock" ] && break; sleep 0.1; done
start=$(date +%s.%N)
VMCUDA_SERVER="unix:$work/vmcuda.sock" timeout 600 guest-lib/vmcuda-run \
  "$venv/bin/python" tests/frameworks/newest_torch_check.py
echo "newest-torch: passed in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s (host-memory test double)"
