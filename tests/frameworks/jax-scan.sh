#!/usr/bin/env bash
# tests/frameworks/jax-scan.sh: JAX's lax.scan and while_loop, each jitted function run
# twice, under the default guest install (`vmcuda-run`, NVIDIA's libraries from the JAX
# wheels over vmcuda's libcuda.so.1), against the host-memory test double
# (tests/frameworks/jax_scan_check.py). The second run updates the executable graph
# XLA made, through nodes of child graphs moved into their nodes, which the host
# refused ("Failed to set memcpy D2D node params: CUDA_ERROR_INVALID_VALUE", issue 33).
# Not part of tests/run.sh: the wheels are about 3.5 GB.
#   VMCUDA_JAX_VENV  venv to use or make (default: $HOME/.cache/vmcuda/jax)
#   VMCUDA_JAX_SPEC  what to pip install (default: jax[cuda13], the newest)
#   VMCUDA_HOST_BIN  the daemon (default: target/release/vmcuda-host)
# Needs the daemon and build/guest/lib (tests/demo.sh builds both; or
# `cargo build -p vmcuda-host` and `VMCUDA_BUILD_PROFILE=debug guest-lib/build-libs.sh`).
#
# Set for the double, and why:
# - XLA_FLAGS=--xla_gpu_autotune_level=0: autotuning times kernels, which the double
#   does not run (and its buffers span several mapped chunks of XLA's virtual memory,
#   which the double's memsets do not cross).
# - JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1: the plugin's start-up check asks CUPTI for its
#   version, and the newest CUPTI (13.5) fails that (error 999) without a private
#   export table of the driver's that vmcuda does not provide.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
venv=${VMCUDA_JAX_VENV:-$HOME/.cache/vmcuda/jax}
spec=${VMCUDA_JAX_SPEC:-jax[cuda13]}
. tests/frameworks/double.sh
venv_with "$venv" jax "$spec"
start_double
if ! VMCUDA_SERVER="$server" XLA_FLAGS=--xla_gpu_autotune_level=0 \
  JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 timeout 900 \
  guest-lib/vmcuda-run "$venv/bin/python" tests/frameworks/jax_scan_check.py; then
  grep -E 'WARN|refused' "$work/host.log" | grep -v 'TEST EXECUTOR' | tail -20 >&2 || true
  echo "jax-scan: FAILED" >&2
  exit 1
fi
echo "jax-scan: passed in $(seconds_since_start) s (host-memory test double)"
