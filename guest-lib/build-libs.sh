#!/usr/bin/env bash
# Build the guest libraries: the Rust static library, linked into libcudart.so.13 with
# the libcudart.so.13 symbol-version node (rustc's own cdylib link applies an anonymous
# version script, which cannot be combined with a named one).
#   guest-lib/build-libs.sh [OUTDIR]   (default: build/guest/lib)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/guest/lib}
profile=${VMCUDA_PROFILE:-release}
cd "$root"
if [ "$profile" = release ]; then
  cargo build --release -p vmcuda-guest
else
  cargo build -p vmcuda-guest
fi
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
archive="$target_dir/$profile/libvmcuda_guest.a"
mkdir -p "$out"
cc -shared -o "$out/libcudart.so.13" \
  -Wl,-soname,libcudart.so.13 \
  -Wl,--version-script="$root/guest-lib/cudart.map" \
  -Wl,--whole-archive "$archive" -Wl,--no-whole-archive \
  -Wl,--gc-sections -Wl,-z,defs \
  -lpthread -ldl -lm -lgcc_s -lc
ln -sf libcudart.so.13 "$out/libcudart.so"
echo "$out/libcudart.so.13"
