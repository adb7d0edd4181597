#!/usr/bin/env bash
# shellcheck disable=SC2054  # commas separate QEMU sub-options, not array elements
# Packs this machine's QEMU (Debian's qemu-system-x86) so that it runs on a machine
# without a package registry (the H200 machine), for TCG guests with -machine q35.
#
#   tests/vm/pack-qemu.sh OUTDIR [--qemu PATH] [--tar FILE.tar.gz] [--check KERNEL INITRD]
#
# OUTDIR/
#   qemu            wrapper: sets LD_LIBRARY_PATH and QEMU_MODULE_DIR, execs the binary
#                   with -L OUTDIR/firmware (use it as run-guest.sh --qemu OUTDIR/qemu)
#   bin/qemu-system-x86_64
#   lib/            its shared libraries, except glibc's own (the target's glibc is used)
#   modules/        accel-tcg-x86_64.so (QEMU_MODULE_DIR)
#   firmware/       bios-256k.bin, kvmvapic.bin, linuxboot_dma.bin, ... (-L)
#
# The folder is ~47 MB (QEMU 7.2: 18 MB binary, 28 MB of libraries); --tar also writes
# it as one .tar.gz (~15 MB) to carry, unpacked on the target with `tar -xzf FILE -C DIR`.
# --check KERNEL INITRD boots that guest with the packed copy in an empty environment
# (env -i). As root, where `unshare -m` works, QEMU's system data and module
# directories are hidden during the check, so that nothing missing from the pack can
# be found there instead.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" | grep -v shellcheck | sed 's/^# \{0,1\}//' >&2; exit 2; }
log() { echo "pack-qemu.sh: $*" >&2; }

out=""; qemu=$(command -v qemu-system-x86_64 || true); check_kernel=""; check_initrd=""; tarball=""
while [ $# -gt 0 ]; do
  case "$1" in
    --qemu) qemu=$2; shift 2 ;;
    --check) check_kernel=$2; check_initrd=$3; shift 3 ;;
    --tar) tarball=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) log "unknown option $1"; usage ;;
    *) [ -z "$out" ] || usage; out=$1; shift ;;
  esac
done
[ -n "$out" ] || usage
if [ -z "$qemu" ] || [ ! -x "$qemu" ]; then log "no qemu-system-x86_64 (apt-get install qemu-system-x86)"; exit 1; fi
qemu=$(readlink -f "$qemu")

# Where this QEMU looks for modules and firmware (Debian: /usr/lib/x86_64-linux-gnu/qemu,
# /usr/share/qemu, /usr/share/seabios, /usr/lib/ipxe/qemu).
moddir=""
for d in /usr/lib/x86_64-linux-gnu/qemu /usr/lib/qemu /usr/lib64/qemu; do
  [ -d "$d" ] && { moddir=$d; break; }
done
mapfile -t datadirs < <("$qemu" -L help 2>/dev/null | grep '^/' || true)
[ "${#datadirs[@]}" -gt 0 ] || datadirs=(/usr/share/qemu /usr/share/seabios /usr/lib/ipxe/qemu)

rm -rf "$out"
mkdir -p "$out"/{bin,lib,modules,firmware}
out=$(cd "$out" && pwd)
cp "$qemu" "$out/bin/qemu-system-x86_64"

# glibc's own libraries come from the target machine.
is_glibc() {
  case "$1" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|libutil.so.*|\
    libanl.so.*|libnsl.so.*|libmvec.so.*|ld-linux*|linux-vdso*) return 0 ;;
  esac
  return 1
}
copy_deps() {
  local name path
  while read -r name _ path _; do
    is_glibc "$name" && continue
    case "$path" in /*) ;; *) log "warning: $1 needs $name, not found"; continue ;; esac
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done < <(ldd "$1" | grep '=>')
}
copy_deps "$qemu"

# The TCG accelerator is a module in Debian's modular build.
if [ -n "$moddir" ] && [ -f "$moddir/accel-tcg-x86_64.so" ]; then
  cp "$moddir/accel-tcg-x86_64.so" "$out/modules/"
  copy_deps "$moddir/accel-tcg-x86_64.so"
else
  log "no accel-tcg-x86_64.so module: assuming TCG is built into the binary"
fi

# Firmware: SeaBIOS, the kernel loader option ROMs, the APIC patcher, virtio-net's
# option ROM (loaded for virtio-net-pci unless romfile= is cleared) and VGA/e1000e ROMs
# for runs without -nodefaults.
fw_needed="bios-256k.bin kvmvapic.bin linuxboot_dma.bin"
fw_optional="linuxboot.bin multiboot_dma.bin pvh.bin efi-virtio.rom efi-e1000e.rom vgabios-stdvga.bin"
for f in $fw_needed $fw_optional; do
  src=""
  for d in "${datadirs[@]}"; do
    [ -e "$d/$f" ] && { src="$d/$f"; break; }
  done
  if [ -n "$src" ]; then
    cp -L "$src" "$out/firmware/$f"
  else
    case " $fw_needed " in *" $f "*) log "missing firmware $f in ${datadirs[*]}"; exit 1 ;; esac
    log "note: no $f here; left out"
  fi
done

cat >"$out/qemu" <<'EOF'
#!/bin/sh
# Packed qemu-system-x86_64 (tests/vm/pack-qemu.sh): own libraries, modules, firmware.
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
QEMU_MODULE_DIR="$here/modules"
export LD_LIBRARY_PATH QEMU_MODULE_DIR
exec "$here/bin/qemu-system-x86_64" -L "$here/firmware" "$@"
EOF
chmod +x "$out/qemu"
"$qemu" --version | head -n1 >"$out/VERSION"

log "packed $(head -n1 "$out/VERSION") into $out: $(du -sb "$out" | awk '{ printf "%.1f MB", $1 / 1e6 }')"
if [ -n "$tarball" ]; then
  tar -C "$out" -czf "$tarball.tmp" . && mv -f "$tarball.tmp" "$tarball"
  log "wrote $tarball: $(wc -c <"$tarball" | awk '{ printf "%.1f MB", $1 / 1e6 }')"
fi

if [ -n "$check_kernel" ]; then
  log "check: booting $check_kernel with the packed QEMU (env -i)"
  check_args=(-accel tcg -machine q35 -m 256M -nodefaults -no-reboot -display none -serial stdio
    -netdev user,id=n0 -device virtio-net-pci,netdev=n0
    -kernel "$check_kernel" -initrd "$check_initrd"
    -append "console=ttyS0 quiet loglevel=1 panic=-1 vmcuda.net=1 vmcuda.apps=none")
  hide=""
  if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    for d in "${datadirs[@]}" $moddir; do
      case "$out" in "$d"|"$d"/*) continue ;; esac
      [ -d "$d" ] && hide+="mount -t tmpfs none '$d' && "
    done
  fi
  run=( env -i timeout 120 "$out/qemu" "${check_args[@]}" )
  if [ -n "$hide" ]; then
    log "check: hiding ${datadirs[*]} $moddir"
    console=$(unshare -m sh -c "${hide}exec \"\$@\"" sh "${run[@]}" </dev/null 2>&1) || true
  else
    console=$("${run[@]}" </dev/null 2>&1) || true
  fi
  if printf '%s\n' "$console" | grep -q '^=== VMCUDA-GUEST-DONE'; then
    log "check: OK (guest booted and finished)"
  else
    printf '%s\n' "$console" | tail -n 20 >&2
    log "check: FAILED"
    exit 1
  fi
fi
