#!/usr/bin/env bash
# The main job: the host backend plus a sample CUDA program, unmodified, running
# through the bridge. On a machine with an NVIDIA GPU and driver the kernels run on
# the GPU; elsewhere the host-memory test executor stands in, and says so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
sample=${1:-vector_add}

echo "== building vmcuda (host daemon and guest libcudart.so.13)"
cargo build --release -p vmcuda-host
bash guest-lib/build-libs.sh >/dev/null

echo "== building the sample program with nvcc -cudart shared"
cu13=$(bash .ci/install-nvcc.sh | tail -n 1)
mkdir -p build/demo
"$cu13/bin/nvcc" -cudart shared -arch=sm_90 -gencode arch=compute_90,code=[sm_90,compute_90] \
  -O2 -o "build/demo/$sample" "tests/apps/$sample.cu" -L"$cu13/lib"

run=$(mktemp -d)
stop() { kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; rm -rf "$run"; }
trap stop EXIT
./target/release/vmcuda-host serve --unix "$run/vmcuda.sock" --executor auto 2>"$run/host.log" &
host_pid=$!
for _ in $(seq 100); do [ -S "$run/vmcuda.sock" ] && break; sleep 0.1; done
[ -S "$run/vmcuda.sock" ] || { cat "$run/host.log"; echo "vmcuda-host did not start" >&2; exit 1; }

if grep -q "HOST-MEMORY TEST EXECUTOR" "$run/host.log"; then
  cat <<'BANNER'
****************************************************************************
*  NO GPU HERE: the host-memory TEST executor serves this run.             *
*  Memory, copies, streams and events are real; kernels are recorded and   *
*  NOT executed, so kernel results below are not computed.                 *
****************************************************************************
BANNER
else
  echo "== GPU: $(grep -o 'CUDA executor.*' "$run/host.log" | head -n 1)"
fi

echo "== running build/demo/$sample through the bridge"
status=0
LD_LIBRARY_PATH="$root/build/guest/lib" VMCUDA_SERVER="unix:$run/vmcuda.sock" VMCUDA_VERBOSE=1 \
  "build/demo/$sample" || status=$?
echo "== host log"
sed 's/^/   /' "$run/host.log"
exit $status
