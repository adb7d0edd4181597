#!/usr/bin/env bash
# tests/gpu/run-extra.sh EXTRADIR [CARRYDIR]: on the GPU machine, run the samples
# tests/gpu/carry-extra.sh built into EXTRADIR (nvJPEG, nvJPEG_encoder, simpleCUBLASXT),
# natively and bridged with the GPU hidden, through tests/gpu/samples/run.sh (its
# table: sample, native exit, bridged exit, self-check, stdout same/DIFF, result).
# vmcuda's binaries come from CARRYDIR (tests/gpu/carry.sh's; default .carry/gpu):
# CARRYDIR/bin/vmcuda-host and CARRYDIR/guest/lib. The carried libnvjpeg.so.13 is
# searched first; cuBLAS (libcublas.so.13, cuBLASXt inside) is the machine's.
# Results: $OUT (default build/gpu-results-extra) as samples/run.sh writes them, and
# tests/gpu/results/RESULTS-EXTRA.md, the same Markdown (date, commit, command, table).
# Each run is limited to VMCUDA_SAMPLE_TIMEOUT (default here 90 s); three samples, two
# runs each, end well inside 8 minutes.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
[ "$#" -ge 1 ] || { echo "usage: run-extra.sh EXTRADIR [CARRYDIR]" >&2; exit 2; }
extra="$(cd "$1" && pwd)" || exit 2
carry="${2:-.carry/gpu}"
out="${OUT:-build/gpu-results-extra}"
mkdir -p "$out" tests/gpu/results
libs="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-extra-lib.XXXXXX")"
trap 'rm -rf "$libs"' EXIT
tar -xf "$extra/lib.tar.xz" -C "$libs" || exit 2
OUT="$out" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
  VMCUDA_COMMIT_FILE="$carry/COMMIT" VMCUDA_SAMPLE_TIMEOUT="${VMCUDA_SAMPLE_TIMEOUT:-90}" \
  VMCUDA_SAMPLES_DEADLINE="${VMCUDA_SAMPLES_DEADLINE:-360}" \
  VMCUDA_SAMPLES_LIB_DIRS="$libs/lib${VMCUDA_SAMPLES_LIB_DIRS:+:$VMCUDA_SAMPLES_LIB_DIRS}" \
  bash tests/gpu/samples/run.sh "$extra/samples.tar.xz"
rc=$?
if [ -f "$out/RESULTS-SAMPLES.md" ]; then
  { sed '1s/.*/# vmcuda: issue 33 extra samples (nvJPEG, cuBLASXt), native vs bridged/' "$out/RESULTS-SAMPLES.md"
    echo
    echo "- extra carry: $extra (built at commit $(head -n 1 "$extra/COMMIT" 2>/dev/null || echo unknown))"
    echo "- wrapper: \`bash tests/gpu/run-extra.sh $*\`"
  } >tests/gpu/results/RESULTS-EXTRA.md
fi
exit "$rc"
