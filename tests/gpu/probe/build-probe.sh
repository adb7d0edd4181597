#!/usr/bin/env bash
# tests/gpu/probe/build-probe.sh DIR: builds the measuring libcuda.so.1 of
# export-probe.c into DIR. Every export of the real driver
# (guest-lib/exports/libcuda.so.1.txt) is a jump to the real one, resolved at load.
# Run: PROBE_LOG=F LD_PRELOAD=DIR/libcuda.so.1 program (PROBE_REAL: the real driver).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
own='^(cuGetProcAddress|cuGetProcAddress_v2|cuGetExportTable)$'
names=$(grep -v '^#' "$here/../../../guest-lib/exports/libcuda.so.1.txt" | awk 'NF {print $1}' | grep -Ev "$own")
{
  echo ".text"
  for n in $names; do printf '.globl %s\n.type %s,@function\n%s:\n  jmp *probe_real_%s(%%rip)\n' "$n" "$n" "$n" "$n"; done
  echo ".data"
  echo ".section .note.GNU-stack,\"\",@progbits"
  echo ".data"
  for n in $names; do printf '.globl probe_real_%s\n.hidden probe_real_%s\nprobe_real_%s: .quad 0\n' "$n" "$n" "$n"; done
} >"$out/probe-stubs.S"
{
  echo "static const char *probe_names[] = {"
  for n in $names; do echo "  \"$n\","; done
  echo "};"
  for n in $names; do echo "extern void *probe_real_$n __attribute__((visibility(\"hidden\")));"; done
  echo "static void **probe_ptrs[] = {"
  for n in $names; do echo "  &probe_real_$n,"; done
  echo "};"
} >"$out/probe-names.h"
gcc -shared -fPIC -O1 -Wall -I"$out" -o "$out/libcuda.so.1" "$here/export-probe.c" "$out/probe-stubs.S" \
  -ldl -lpthread -Wl,-soname,libcuda.so.1
echo "$out/libcuda.so.1"
