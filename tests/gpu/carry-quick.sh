#!/usr/bin/env bash
# tests/gpu/carry-quick.sh [DIR]: the small carry for tests/gpu/run-quick.sh (default
# .carry/quick, a few MiB): the release vmcuda-host (stripped), the guest libraries
# (debug info stripped), the test apps (shared runtime), what tests/gpu/run-reconnect.sh
# needs besides (bin/cut-proxy, bin/test-pki, suspend_steps) and COMMIT. The full set is
# tests/gpu/carry.sh's.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
dir=${1:-.carry/quick}
rm -rf "$dir" && mkdir -p "$dir/bin"
cu13=$(bash .ci/install-nvcc.sh | tail -1)
cargo build --release -p vmcuda-host -p vmcuda-tests --bin vmcuda-host --bin cut-proxy --bin test-pki \
  --features vmcuda-tests/pki
cp target/release/vmcuda-host target/release/cut-proxy target/release/test-pki "$dir/bin/"
strip "$dir"/bin/*
bash guest-lib/build-libs.sh "$dir/guest/lib" >/dev/null
strip --strip-debug "$dir"/guest/lib/*.so.*
cc -O2 -o "$dir/suspend_steps" tests/c/suspend_steps.c -L"$dir/guest/lib" -l:libcuda.so.1
NVCC="$cu13/bin/nvcc" bash tests/apps/build.sh "$dir/apps"
rm -f "$dir"/apps/*.build.log
git rev-parse HEAD >"$dir/COMMIT"
git diff --quiet HEAD || echo "uncommitted changes" >>"$dir/COMMIT"
du -sh "$dir"
