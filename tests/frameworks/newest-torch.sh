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
. tests/frameworks/double.sh
venv_with "$venv" torch "$spec" numpy
start_double
VMCUDA_SERVER="$server" timeout 600 guest-lib/vmcuda-run \
  "$venv/bin/python" tests/frameworks/newest_torch_check.py
echo "newest-torch: passed in $(seconds_since_start) s (host-memory test double)"
