#!/usr/bin/env bash
# Builds the demo guest: a small bootable disk image (qcow2) with the guest package
# installed and CUDA programs in /opt/vmcuda/apps. It boots on its own (SeaBIOS ->
# SYSLINUX on the image -> the Debian cloud kernel), with no -kernel/-initrd:
#
#   qemu-system-x86_64 -m 1G -nographic -drive file=demo.qcow2,if=virtio,snapshot=on
#
#   images/build-demo-image.sh OUT.qcow2 --guest-deb FILE [--apps DIR] [--cudart DIR]
#                              [--cache DIR]
#
#   --guest-deb FILE  the guest package (images/guest-deb/build.sh), installed as dpkg
#                     would unpack it
#   --apps DIR        CUDA programs (executable files), copied to /opt/vmcuda/apps
#   --cudart DIR      NVIDIA's libcudart.so.13 for the `-cudart shared` programs
#                     (default: the nvcc wheels'; see images/build-guest.sh): the
#                     guest package ships only vmcuda's driver, NVIDIA's runtime runs on it
#   --cache DIR       where downloaded .deb files are kept (as images/build-guest.sh)
#
# The image: an MBR with SYSLINUX's boot code and one FAT partition holding SYSLINUX,
# its configuration, the kernel and the busybox initramfs that images/build-guest.sh
# builds (which is the root file system: it lives in RAM, nothing persists). Boot menu
# on the serial console (and VGA), 2 s:
#   vmcuda (default)  run every program in /opt/vmcuda/apps with vmcuda-run, then a
#                     shell on the serial console (`exit` powers off)
#   shell             just the shell
# Both take the options of images/guest/init from QEMU's firmware configuration too,
# after their own: `-fw_cfg name=opt/vmcuda/cmdline,file=F` with F holding, say,
# `vmcuda.apps=vector_add vmcuda.shell=0` runs that program and powers off (what
# tests/demo.sh and tests/vm/run-guest.sh --disk do).
#
# Also writes OUT's name without .qcow2 + .manifest.txt (what went in). Needs what
# build-guest.sh needs plus syslinux (the mtools flavour, Debian's `syslinux`),
# syslinux-common, mtools and qemu-img (qemu-utils); as root, missing ones are
# installed with apt-get. No root needed otherwise. Reproducible: a second build of the
# same inputs is byte-identical (fixed file times and volume serial).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PKG_TOOL=build-demo-image.sh
# shellcheck source=images/pkg-lib.sh
. "$here/pkg-lib.sh"
usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
log() { pkg_log "$@"; }
die() { pkg_die "$@"; }

out=""; guest_deb=""; apps=""; cache_args=(); cudart_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --guest-deb) guest_deb=$2; shift 2 ;;
    --apps) apps=$2; shift 2 ;;
    --cache) cache_args=(--cache "$2"); shift 2 ;;
    --cudart) cudart_args=(--cudart "$2"); shift 2 ;;
    -h|--help) usage ;;
    -*) log "unknown option $1"; usage ;;
    *) [ -z "$out" ] || usage; out=$1; shift ;;
  esac
done
if [ -z "$out" ] || [ -z "$guest_deb" ]; then usage; fi
case "$out" in *.qcow2) ;; *) die "OUT must end in .qcow2: $out" ;; esac
[ -f "$guest_deb" ] || die "no such file: $guest_deb"

mbr_bin=/usr/lib/syslinux/mbr/mbr.bin
missing=()
command -v syslinux >/dev/null || missing+=(syslinux)
[ -f "$mbr_bin" ] || missing+=(syslinux-common)
command -v mformat >/dev/null || missing+=(mtools)
command -v qemu-img >/dev/null || missing+=(qemu-utils)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    bash "$here/../.ci/apt-install.sh" "${missing[@]}" || die "could not install ${missing[*]}"
  else
    die "needs the packages ${missing[*]} (apt-get install ${missing[*]})"
  fi
fi

mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
manifest=${out%.qcow2}.manifest.txt
work=$(mktemp -d "${out%.qcow2}.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
# File times in the FAT file system follow the last commit (mtools reads
# SOURCE_DATE_EPOCH for the files it makes itself, e.g. ldlinux.sys).
pkg_source_date "$here/.."

# --- 1. kernel and root file system: the packaged test guest ---------------------------
app_args=(); [ -z "$apps" ] || app_args=(--apps "$apps")
bash "$here/build-guest.sh" "$work/guest" --guest-deb "$guest_deb" ${app_args[@]+"${app_args[@]}"} \
  ${cudart_args[@]+"${cudart_args[@]}"} ${cache_args[@]+"${cache_args[@]}"}

# --- 2. the boot partition -----------------------------------------------------------------
fat="$work/fat"
mkdir -p "$fat"
cp "$work/guest/vmlinuz" "$fat/vmlinuz"
cp "$work/guest/initramfs.cpio.gz" "$fat/initrd.gz"
# no_timer_check: a busy host under TCG can fail the kernel's IO-APIC timer check.
# hugepages=40 (80 MiB of 2 MiB pages): the guest library stages copies in huge pages,
# which the vhost-user device reads straight from guest RAM (the guest-RAM data path);
# without them every byte goes over the vsock socket. It needs the kernel's command
# line (reserved at boot), not /init's options.
base="console=ttyS0 quiet loglevel=1 panic=-1 no_timer_check hugepages=40 vmcuda.launcher=vmcuda-run"
cat >"$fat/syslinux.cfg" <<EOF
SERIAL 0 115200
PROMPT 1
TIMEOUT 15
DEFAULT vmcuda
LABEL vmcuda
  KERNEL /vmlinuz
  INITRD /initrd.gz
  APPEND $base vmcuda.shell=1
LABEL shell
  KERNEL /vmlinuz
  INITRD /initrd.gz
  APPEND $base vmcuda.apps=none vmcuda.shell=1
EOF
touch -d "@$SOURCE_DATE_EPOCH" "$fat"/*

# Partition: the contents plus 8 MiB, in whole MiB, at 1 MiB into the disk.
content_kib=$(du -sk "$fat" | cut -f1)
part_mib=$(( (content_kib + 1023) / 1024 + 8 ))
[ "$part_mib" -ge 32 ] || part_mib=32
part="$work/part.img"
# FAT16 (mtools picks it for this size), fixed serial and label: reproducible.
mformat -i "$part" -C -T $((part_mib * 2048)) -h 64 -s 32 -H 2048 -N 564d4355 -v VMCUDA ::
mcopy -i "$part" -m "$fat"/* ::/
syslinux --install "$part"

# --- 3. the disk: MBR boot code, one active partition ------------------------------------
raw="$work/disk.raw"
python3 - "$mbr_bin" "$part" "$raw" "$part_mib" <<'PY'
import struct, sys
mbr_bin, part, raw, part_mib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
start, count = 2048, part_mib * 2048
code = open(mbr_bin, "rb").read()
assert len(code) <= 440, "mbr.bin larger than the MBR's code area"
mbr = bytearray(512)
mbr[: len(code)] = code
mbr[440:444] = struct.pack("<I", 0x564D4355)  # disk signature
# active, CHS fields saturated (LBA is what counts), type 0x0e = FAT16 LBA
mbr[446:462] = struct.pack("<B3sB3sII", 0x80, b"\xfe\xff\xff", 0x0E, b"\xfe\xff\xff", start, count)
mbr[510:512] = b"\x55\xaa"
with open(raw, "wb") as f:
    f.write(mbr)
    f.write(b"\0" * (start * 512 - 512))
    with open(part, "rb") as p:
        while True:
            chunk = p.read(1 << 20)
            if not chunk:
                break
            f.write(chunk)
PY
qemu-img convert -q -c -f raw -O qcow2 "$raw" "$out.tmp"
mv -f "$out.tmp" "$out"

{
  cat "$work/guest/manifest.txt"
  echo "boot: SYSLINUX $(syslinux --version 2>&1 | awk '{ print $2; exit }'), FAT16 partition of ${part_mib} MiB: $(mdir -i "$part" -b :: | sed 's|^::/||' | tr '\n' ' ')"
  echo "boot menu: vmcuda (default): $base vmcuda.shell=1; shell: $base vmcuda.apps=none vmcuda.shell=1"
  echo "image: $(basename "$out"), $(du -k "$out" | cut -f1) KiB (virtual size $((part_mib + 1)) MiB)"
} >"$manifest"
cat "$manifest" >&2
log "wrote $out"
