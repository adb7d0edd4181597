#!/usr/bin/env bash
# tests/frameworks/nccl-world1.sh: torch's NCCL with world size 1 (init_process_group
# "nccl" from a file store, all_reduce, broadcast, barrier) under the default guest
# install (`vmcuda-run`, NVIDIA's NCCL over vmcuda's libcuda.so.1 and NVML), against the
# host-memory test double (tests/frameworks/nccl_world1_check.py). NCCL reads the
# guest's /sys at the PCI address the driver gives: the communicator's initialisation
# failed where that address is another device of the guest (issue 33; guest-lib's
# pci_place module). Not part of tests/run.sh: the wheels are about 4 GB.
#   VMCUDA_TORCH_VENV  venv to use or make (default: $HOME/.cache/vmcuda/torch-newest)
#   VMCUDA_TORCH_SPEC  what to pip install (default: torch, the newest)
#   VMCUDA_HOST_BIN    the daemon (default: target/release/vmcuda-host)
# Needs the daemon and build/guest/lib (tests/demo.sh builds both; or
# `cargo build -p vmcuda-host` and `VMCUDA_BUILD_PROFILE=debug guest-lib/build-libs.sh`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
venv=${VMCUDA_TORCH_VENV:-$HOME/.cache/vmcuda/torch-newest}
spec=${VMCUDA_TORCH_SPEC:-torch}
. tests/frameworks/double.sh
venv_with "$venv" torch "$spec" numpy
start_double
# NCCL_DEBUG=WARN: NCCL says why, should its initialisation fail.
VMCUDA_SERVER="$server" NCCL_DEBUG=${NCCL_DEBUG:-WARN} timeout 600 \
  guest-lib/vmcuda-run "$venv/bin/python" tests/frameworks/nccl_world1_check.py
echo "nccl-world1: passed in $(seconds_since_start) s (host-memory test double)"
