#!/usr/bin/env bash
# tests/gpu/run-extra.sh EXTRADIR [CARRYDIR]: on the GPU machine, run what
# tests/gpu/carry-extra.sh built into EXTRADIR, natively and bridged with the GPU hidden,
# through tests/gpu/samples/run.sh (its table: sample, native exit, bridged exit,
# self-check, stdout same/DIFF, result):
#   1. samples.tar.xz: nvJPEG, nvJPEG_encoder, simpleCUBLASXT, libNVVM's simple, uvmlite
#      and device-side-launch, the NPP samples and vmcuda's NPP check
#      -> tests/gpu/results/RESULTS-EXTRA.md
#   2. cuda12.tar.xz: the CUDA 12 guest programs -> tests/gpu/results/RESULTS-CUDA12.md
# vmcuda's binaries come from CARRYDIR (tests/gpu/carry.sh's; default .carry/gpu):
# CARRYDIR/bin/vmcuda-host and CARRYDIR/guest/lib. The carried libraries (lib.tar.xz,
# cuda12-lib.tar.xz) are searched first; cuBLAS (libcublas.so.13, cuBLASXt inside), NPP
# and libNVVM are the machine's (its CUDA toolkit, as samples/run.sh finds it). Raw results: $OUT (default build/gpu-results-extra)/{extra,cuda12}.
# Each run is limited to VMCUDA_SAMPLE_TIMEOUT (default here 90 s); each set stops
# starting samples after VMCUDA_SAMPLES_DEADLINE (default 200 s).
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
[ "$#" -ge 1 ] || { echo "usage: run-extra.sh EXTRADIR [CARRYDIR]" >&2; exit 2; }
cmdline="$*"
extra="$(cd "$1" && pwd)" || exit 2
carry="${2:-.carry/gpu}"
out="${OUT:-build/gpu-results-extra}"
mkdir -p "$out" tests/gpu/results
libs="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-extra-lib.XXXXXX")"
trap 'rm -rf "$libs"' EXIT
rc=0
# run_set ARCHIVE LIBARCHIVE NAME TITLE: one set through samples/run.sh, its Markdown
# copied to tests/gpu/results/RESULTS-NAME.md with TITLE.
run_set() {
  local archive="$1" libarchive="$2" name="$3" title="$4" lib="$libs/$3"
  [ -f "$archive" ] || { echo "run-extra.sh: $archive missing, $name skipped" >&2; return; }
  mkdir -p "$lib" "$out/$name"
  tar -xf "$libarchive" -C "$lib" || { rc=2; return; }
  # Wheels carried as PyPI has them (ARCHIVE's name with -*.whl): their libraries too.
  for whl in "${archive%.tar.xz}"-*.whl; do
    [ -f "$whl" ] || continue
    python3 - "$whl" "$lib/lib" <<'PY' || { rc=2; return; }
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if "/lib/" in name and ".so" in name:
            with open(os.path.join(sys.argv[2], os.path.basename(name)), "wb") as f:
                f.write(z.read(name))
PY
  done
  OUT="$out/$name" VMCUDA_HOST_BIN="$carry/bin/vmcuda-host" VMCUDA_GUEST_LIB="$carry/guest/lib" \
    VMCUDA_COMMIT_FILE="$carry/COMMIT" VMCUDA_SAMPLE_TIMEOUT="${VMCUDA_SAMPLE_TIMEOUT:-90}" \
    VMCUDA_SAMPLES_DEADLINE="${VMCUDA_SAMPLES_DEADLINE:-200}" \
    VMCUDA_SAMPLES_LIB_DIRS="$lib/lib${VMCUDA_SAMPLES_LIB_DIRS:+:$VMCUDA_SAMPLES_LIB_DIRS}" \
    bash tests/gpu/samples/run.sh "$archive" || rc=1
  if [ -f "$out/$name/RESULTS-SAMPLES.md" ]; then
    { sed "1s/.*/# vmcuda: $title, native vs bridged/" "$out/$name/RESULTS-SAMPLES.md"
      echo
      echo "- extra carry: $extra (built at commit $(head -n 1 "$extra/COMMIT" 2>/dev/null || echo unknown))"
      echo "- wrapper: \`bash tests/gpu/run-extra.sh $cmdline\`"
    } >"tests/gpu/results/RESULTS-${name^^}.md"
  fi
}
run_set "$extra/samples.tar.xz" "$extra/lib.tar.xz" extra \
  "issue 33 extra samples (nvJPEG, cuBLASXt, libNVVM, NPP)"
run_set "$extra/cuda12.tar.xz" "$extra/cuda12-lib.tar.xz" cuda12 \
  "issue 33 CUDA 12 guest programs (CUDA 12.9 runtime, nvJPEG 12, NVRTC 12.4)"
exit "$rc"
