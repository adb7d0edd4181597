#!/usr/bin/env bash
# tests/gpu/run-jax.sh: JAX with its CUDA plugin (NVIDIA's cuBLAS, cuDNN, cuFFT,
# cuSOLVER), natively and over vmcuda's libcuda.so.1, in the same run: the checks of
# tests/gpu/jax_check.py (jit, grad, an optax training loop, cuDNN convolutions, FFT,
# linalg, lax.scan and while_loop, donation, RNG, 256 MiB transfers), through the
# harness of run-torch-libs.sh (its variables apply). Both runs cap JAX's preallocation
# at the same fraction of the GPU (XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.3 here).
# Results: $OUT/RESULTS-JAX.md.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.3}"
export VMCUDA_TORCH_PYTHON="${VMCUDA_TORCH_PYTHON:-$(command -v python3)}"
VMCUDA_CHECKS_SCRIPT=tests/gpu/jax_check.py VMCUDA_CHECKS_NAME=JAX \
  VMCUDA_CHECKS_TITLE="JAX over vmcuda's libcuda.so.1" exec bash "$here/run-torch-libs.sh"
