#!/usr/bin/env bash
# Regenerates the binary test data in this directory from the .cu sources.
# Needs nvcc 13 (override with NVCC=...), a host C++ compiler and binutils (objcopy,
# readelf). The tests themselves only read the committed outputs and never run nvcc.
set -euo pipefail
cd "$(dirname "$0")"

NVCC=${NVCC:-/opt/nvcc-venv/lib/python3.11/site-packages/nvidia/cu13/bin/nvcc}
CUDA_LIB=${CUDA_LIB:-$(dirname "$NVCC")/../lib}

# Plain cubins (ELF, sm_90) for the cubin tests.
"$NVCC" -cubin -arch=sm_90 params.cu -o params.cubin
"$NVCC" -cubin -arch=sm_90 bigparam.cu -o bigparam.cubin
"$NVCC" -cubin -arch=sm_90 globals.cu -o globals.cubin
"$NVCC" -cubin -arch=sm_90 prints.cu -o prints.cubin
# Relocatable device code: different symbol and section types for the same globals.
"$NVCC" -cubin -arch=sm_90 -rdc=true globals.cu -o globals_rdc.cubin

# Raw fatbinaries (the file starts directly with a container, no wrapper).
#   tiny.fatbin:       sm_90 ELF (uncompressed) + compute_90 PTX (zstd), nvcc's default.
#   tiny_multi.fatbin: sm_80 and sm_90 ELFs + compute_90 PTX.
#   tiny_lz4.fatbin:   everything compressed with LZ4 (compress-mode=speed).
#   tiny_debug.fatbin: -G: zstd-compressed ELF and PTX, entries carry a name and options.
"$NVCC" -fatbin -arch=sm_90 tiny.cu -o tiny.fatbin
"$NVCC" -fatbin -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90,code='[sm_90,compute_90]' tiny.cu -o tiny_multi.fatbin
"$NVCC" -fatbin -arch=sm_90 -Xfatbin -compress-all --compress-mode=speed tiny.cu \
    -o tiny_lz4.fatbin
"$NVCC" -fatbin -arch=sm_90 -G tiny.cu -o tiny_debug.fatbin
# The same module three ways, to measure compressed cubins (cubin tests, and the
# host's quota tests): 64 MiB of zero-initialised globals that take no file space.
#   bigglobals.fatbin:      sm_90 ELF uncompressed (PTX zstd), nvcc's default.
#   bigglobals_lz4.fatbin:  everything LZ4 (raw LZ4 blocks), compress-mode=speed.
#   bigglobals_zstd.fatbin: everything zstd (frames), compress-mode=default.
"$NVCC" -fatbin -arch=sm_90 bigglobals.cu -o bigglobals.fatbin
"$NVCC" -fatbin -arch=sm_90 -Xfatbin -compress-all --compress-mode=speed bigglobals.cu \
    -o bigglobals_lz4.fatbin
"$NVCC" -fatbin -arch=sm_90 -Xfatbin -compress-all --compress-mode=default bigglobals.cu \
    -o bigglobals_zstd.fatbin

# An executable: its .nv_fatbin section holds containers back to back and
# .nvFatBinSegment the wrappers; tiny_exe.txt records the section addresses.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$NVCC" -arch=sm_90 -cudart shared -L"$CUDA_LIB" tiny_main.cu -o "$tmp/tiny_exe"
objcopy -O binary --only-section=.nv_fatbin "$tmp/tiny_exe" tiny_exe.nv_fatbin
objcopy -O binary --only-section=.nvFatBinSegment "$tmp/tiny_exe" tiny_exe.nvFatBinSegment
readelf -SW "$tmp/tiny_exe" |
    awk '$2 == ".nv_fatbin" || $2 == ".nvFatBinSegment" { print $2, "0x" $4 }' >tiny_exe.txt

ls -l ./*.cubin ./*.fatbin tiny_exe.*
