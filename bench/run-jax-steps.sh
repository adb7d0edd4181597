#!/usr/bin/env bash
# bench/run-jax-steps.sh CARRYDIR: JAX training steps (bench/jax_steps.py: an MLP with
# optax's Adam, a CNN on cuDNN) natively and through vmcuda's libcuda.so.1 in the same
# run, alternating, through bench/run-torch-steps.sh's harness (its variables apply).
# Both sides cap JAX's preallocation at the same fraction of the GPU
# (XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.3). Writes $OUT/RESULTS-JAX-STEPS.md.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.3}"
VMCUDA_TORCH_PYTHON="${VMCUDA_JAX_PYTHON:-$(command -v python3)}" VMCUDA_STEPS_SCRIPT=bench/jax_steps.py \
  VMCUDA_STEPS_RESULTS=RESULTS-JAX-STEPS.md exec bash "$here/run-torch-steps.sh" "$@"
