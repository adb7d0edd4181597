#!/usr/bin/env bash
# tests/gpu/probe/run-answers.sh PTX: on the GPU machine, natively, how NVIDIA's driver
# answers what driver_answers.c asks (PTX loads by each entry point, cuMemGetAttribute
# and cuMemGetAttribute_v2 called with scratch arguments), and the machine code of those
# two exports. PTX: e.g. the PTX text of cuda-samples' matrixMulDynlinkJIT.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin=$(mktemp -d)/driver_answers
nvcc -o "$bin" "$here/driver_answers.c" -lcuda -ldl
"$bin" "$1"
lib=$(readlink -f "$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')")
echo "driver library: $lib"
for s in cuMemGetAttribute cuMemGetAttribute_v2; do
  a=$(nm -D "$lib" | awk -v s="$s" '$3==s{print $1}')
  objdump -d --no-show-raw-insn "$lib" --start-address="0x$a" \
    --stop-address="$(printf '0x%x' $((0x$a + 8)))" | grep -E '^ +[0-9a-f]+:'
done
