#!/usr/bin/env bash
# Unpacks Debian's QEMU (qemu-system-x86 and the libraries it needs that this system
# lacks) into a folder of its own, installing nothing: for a machine where installing
# it would remove or downgrade something (.ci/apt-install.sh refuses that, e.g. Debian's
# qemu-system-x86 over a newer qemu-utils from backports).
#
#   tests/vm/unpack-qemu.sh OUTDIR
#
# OUTDIR/qemu-system-x86_64 is a wrapper (libraries, modules and firmware from
# OUTDIR/root) for tests/vm/run-guest.sh --qemu. The packages come from apt's own
# sources (apt-get download, no root needed) and are unpacked with dpkg -x: dpkg's
# database and the system's files are not touched. Reused when OUTDIR already has a
# QEMU that runs. Prints the wrapper's path on the last line.
set -euo pipefail
log() { echo "unpack-qemu.sh: $*" >&2; }
[ $# = 1 ] || { echo "usage: tests/vm/unpack-qemu.sh OUTDIR" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)
wrapper="$out/qemu-system-x86_64"
if [ -x "$wrapper" ] && "$wrapper" --version >/dev/null 2>&1; then
  echo "$wrapper"
  exit 0
fi

# What apt would install for it here (already installed packages are not needed).
plan=$(LC_ALL=C apt-get -s -q --no-install-recommends install qemu-system-x86 2>&1) ||
  { log "apt-get cannot resolve qemu-system-x86:"; sed 's/^/   /' <<<"$plan" >&2; exit 1; }
mapfile -t pkgs < <(sed -n 's/^Inst \([^ ]*\) \(\[[^]]*\] \)\{0,1\}(\([^ ]*\) .*/\1=\3/p' <<<"$plan")
[ ${#pkgs[@]} -gt 0 ] || { log "apt plans to install nothing for qemu-system-x86"; exit 1; }
log "downloading ${#pkgs[@]} packages (apt-get download) to unpack into $out/root, installing nothing"
debs="$out/debs"
rm -rf "$debs" "$out/root"
mkdir -p "$debs" "$out/root"
# apt's download sandbox user cannot write a root-owned folder: let it.
chmod 0777 "$debs"
(cd "$debs" && apt-get download -q "${pkgs[@]}" >"$out/download.log" 2>&1) ||
  { log "apt-get download failed:"; sed 's/^/   /' "$out/download.log" >&2; exit 1; }
for deb in "$debs"/*.deb; do dpkg -x "$deb" "$out/root"; done
rm -rf "$debs"

r="$out/root"
[ -x "$r/usr/bin/qemu-system-x86_64" ] || { log "no usr/bin/qemu-system-x86_64 in the packages"; exit 1; }
# The firmware folder holds absolute links (/usr/share/seabios/...): point them into
# the unpacked root.
find "$r/usr/share/qemu" -type l | while read -r l; do
  t=$(readlink "$l")
  case "$t" in /*) [ -e "$r$t" ] && ln -sfn "$r$t" "$l" ;; esac
done
cat >"$wrapper" <<EOF
#!/bin/sh
# Debian's QEMU unpacked by tests/vm/unpack-qemu.sh (not installed).
export LD_LIBRARY_PATH="$r/usr/lib/x86_64-linux-gnu:$r/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export QEMU_MODULE_DIR="$r/usr/lib/x86_64-linux-gnu/qemu"
exec "$r/usr/bin/qemu-system-x86_64" -L "$r/usr/share/qemu" -L "$r/usr/share/seabios" "\$@"
EOF
chmod 0755 "$wrapper"
"$wrapper" --version >/dev/null || { log "the unpacked QEMU does not run"; exit 1; }
log "$("$wrapper" --version | head -n 1) in $out"
echo "$wrapper"
