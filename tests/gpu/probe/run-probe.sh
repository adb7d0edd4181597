#!/usr/bin/env bash
# tests/gpu/probe/run-probe.sh: on the GPU machine, natively, what torch's cuFFT and its
# bf16 transformer step do with the driver's export tables (export-probe.c). Logs go to
# $OUT/probe-logs.tar.gz; a line per run says whether the library still computed right.
# PROBE_ONLY: a regular expression choosing the runs by name.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
out="${OUT:-/tmp/probe-out}"
mkdir -p "$out"
dir=$(mktemp -d)
bash "$repo/tests/gpu/probe/build-probe.sh" "$dir" >/dev/null || exit 2
real=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
fft='import torch
g = torch.Generator().manual_seed(0)
x = torch.randn(8, 1024, generator=g)
r = torch.fft.rfft(x.cuda())
ok = torch.allclose(r.cpu(), torch.fft.rfft(x), atol=1e-3) and torch.allclose(torch.fft.irfft(r, n=1024).cpu(), x, atol=1e-4)
y = torch.randn(4, 64, 64, generator=g)
ok = ok and torch.allclose(torch.fft.fft2(y.cuda()).cpu(), torch.fft.fft2(y), atol=1e-2)
print("fft", "PASS" if ok else "FAIL")'
run() { # name, env..., then the python program
  local name=$1; shift
  [[ "$name" =~ ${PROBE_ONLY:-.} ]] || return 0
  env PROBE_REAL="$real" PROBE_LOG="$out/probe-$name.log" LD_PRELOAD="$dir/libcuda.so.1" "$@" >"$out/probe-$name.out" 2>&1
  echo "$name: rc $? $(tail -1 "$out/probe-$name.out")"
}
run fft-pass "$py" -c "$fft"
run fft-keep-all PROBE_KEEP=all "$py" -c "$fft"
run fft-keep-none PROBE_KEEP=1fff "$py" -c "$fft"
run fft-keep-8-10 PROBE_KEEP=8,10 "$py" -c "$fft"
run fft-keep-scuda PROBE_KEEP=0,8,10,18,28,370,480 "$py" -c "$fft"
run fft-keep-none-ab PROBE_KEEP=1fff PROBE_FILL=0xab "$py" -c "$fft"
run fft-calls PROBE_KEEP=all PROBE_DUMP="${PROBE_DUMP:-cuPointerGetAttribute,cuPointerGetAttributes,cuModuleGetGlobal_v2,cuMemGetInfo_v2,cuDevicePrimaryCtxGetState,cuOccupancyMaxActiveBlocksPerMultiprocessor,cuFuncGetAttribute,cuModuleLoadData}" "$py" -c "$fft"
run bf16 "$py" "$repo/tests/gpu/torch_libs_check.py" --only transformer_training_bf16 --json "$out/probe-bf16.json"
run cupy "$py" "$repo/tests/gpu/torch_libs_check.py" --only cupy --json "$out/probe-cupy.json"
tar -C "$out" -czf /tmp/probe-logs.tar.gz . && rm -rf "${out:?}"/* && mv /tmp/probe-logs.tar.gz "$out/"
