#!/bin/sh
# Installs the vmcuda guest driver (libcuda.so.1, NVML, tools) from this unpacked
# tarball, or removes it.
#
#   ./install.sh [--prefix DIR] [--bindir DIR] [--sbindir DIR] [--system-wide] [--no-driver]
#                [--no-cdi]
#   ./install.sh --uninstall [--prefix DIR]
#
#   --prefix DIR   where lib/, driver/, bin/ and sbin/ go (default /opt/vmcuda)
#   --bindir DIR   links to the programs in bin/ (default /usr/local/bin)
#   --sbindir DIR  link to vmcuda-system-wide (default /usr/local/sbin)
#   --system-wide  then turn on the system-wide mode: `vmcuda-system-wide enable`
#                  (every program loads vmcuda's libraries without vmcuda-run)
#   --no-driver    leave the loader's cache alone: vmcuda's libcuda.so.1 only through
#                  vmcuda-run. By default /etc/ld.so.conf.d/zz-vmcuda-driver.conf names
#                  PREFIX/driver (libcuda.so.1 alone) and ldconfig runs, so that programs
#                  with NVIDIA's static runtime find it; not where the loader already
#                  has another libcuda.so.1 (an NVIDIA driver): see driver-conf.sh
#   --no-cdi       write no CDI spec. By default PREFIX/bin/vmcuda writes
#                  /etc/cdi/vmcuda.json (`vmcuda cdi generate`), so that containers
#                  started with --device vmcuda.dev/gpu=all get the libraries and
#                  vmcuda-run's environment; not over another installation's: see
#                  cdi-conf.sh
#   --uninstall    turn the system-wide mode off if this copy has the switch, remove the
#                  driver's ld.so.conf.d file if it names PREFIX/driver and the CDI spec
#                  if it names PREFIX/lib, and remove exactly the files and links an
#                  earlier install.sh recorded in PREFIX/.vmcuda-install.list
#
# Nothing outside PREFIX, BINDIR and SBINDIR is touched, except those two files and by
# vmcuda-system-wide.
# POSIX sh: runs under busybox too.
set -eu

src=$(cd "$(dirname "$0")" && pwd)
prefix=/opt/vmcuda
bindir=/usr/local/bin
sbindir=/usr/local/sbin
system_wide=0
uninstall=0
driver=1
cdi=1
die() { echo "install.sh: $*" >&2; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
    --bindir) [ $# -ge 2 ] || usage; bindir=$2; shift 2 ;;
    --sbindir) [ $# -ge 2 ] || usage; sbindir=$2; shift 2 ;;
    --system-wide) system_wide=1; shift ;;
    --no-driver) driver=0; shift ;;
    --no-cdi) cdi=0; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) usage ;;
    *) echo "install.sh: unknown argument $1" >&2; usage ;;
  esac
done
case "$prefix" in /*) ;; *) die "--prefix must be an absolute path" ;; esac
prefix=${prefix%/}
[ -n "$prefix" ] || die "--prefix / is not a place for this"
list="$prefix/.vmcuda-install.list"
[ -f "$src/driver-conf.sh" ] || die "run me from the unpacked tarball (no driver-conf.sh next to me)"
vmcuda_driver_who=install.sh
# shellcheck source=images/guest-deb/driver-conf.sh
. "$src/driver-conf.sh"
[ -f "$src/cdi-conf.sh" ] || die "run me from the unpacked tarball (no cdi-conf.sh next to me)"
# shellcheck source=images/guest-deb/cdi-conf.sh
. "$src/cdi-conf.sh"

if [ "$uninstall" = 1 ]; then
  [ -f "$list" ] || die "no $list: nothing installed by install.sh under $prefix"
  if [ -x "$prefix/sbin/vmcuda-system-wide" ]; then
    "$prefix/sbin/vmcuda-system-wide" disable || die "'vmcuda-system-wide disable' failed; nothing removed"
  fi
  # The driver's file only if it is still this installation's.
  vmcuda_driver_unregister "$prefix"
  vmcuda_cdi_unregister "$prefix"
  # Files and links first, then the directories they leave empty (deepest first).
  while IFS= read -r p; do
    [ "$p" != "$vmcuda_driver_conf" ] || continue
    [ "$p" != "$vmcuda_cdi_spec" ] || continue
    if [ -L "$p" ] || [ -f "$p" ]; then rm -f "$p"; fi
  done <"$list"
  sort -r "$list" | while IFS= read -r p; do
    if [ -d "$p" ] && [ ! -L "$p" ]; then rmdir "$p" 2>/dev/null || true; fi
  done
  rm -f "$list"
  rmdir "$prefix" 2>/dev/null || true
  echo "install.sh: removed vmcuda from $prefix"
  exit 0
fi

[ -f "$src/lib/libcuda.so.1" ] || die "run me from the unpacked tarball (no lib/libcuda.so.1 next to me)"
if [ "$system_wide" = 1 ] && [ ! -f "$src/sbin/vmcuda-system-wide" ]; then
  die "--system-wide: this build has no vmcuda-system-wide; nothing installed"
fi
if [ "$prefix" = /opt/vmcuda ] && [ -f /var/lib/dpkg/info/vmcuda-guest.list ]; then
  die "the vmcuda-guest package owns /opt/vmcuda: remove it first, or pick another --prefix"
fi

mkdir -p "$prefix"
new="$list.new"
: >"$new"
record() { echo "$1" >>"$new"; }
# Directories are recorded too, so that --uninstall removes those it made and left empty.
for d in lib driver bin sbin; do
  [ -d "$src/$d" ] || continue
  mkdir -p "$prefix/$d"; record "$prefix/$d"
  for f in "$src/$d"/*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    dest="$prefix/$d/$(basename "$f")"
    rm -f "$dest"
    cp -P "$f" "$dest"
    record "$dest"
  done
done
link() {  # link DIR FILE: DIR/NAME -> FILE
  if [ ! -d "$1" ]; then mkdir -p "$1"; record "$1"; fi
  dest="$1/$(basename "$2")"
  if [ -e "$dest" ] && [ ! -L "$dest" ]; then
    die "$dest exists and is not a link; not replacing it"
  fi
  ln -sf "$2" "$dest"
  record "$dest"
}
for f in "$prefix"/bin/*; do
  if [ -f "$f" ]; then link "$bindir" "$f"; fi
done
for f in "$prefix"/sbin/*; do
  if [ -f "$f" ]; then link "$sbindir" "$f"; fi
done
# The driver in the loader's cache (after the files: ldconfig reads them).
if [ "$driver" = 1 ]; then
  vmcuda_driver_register "$prefix" || true
else
  vmcuda_driver_unregister "$prefix"  # an earlier install's, without --no-driver
fi
driver_note=""
if [ "$(vmcuda_driver_listed)" = "$prefix/driver" ]; then
  record "$vmcuda_driver_conf"
  driver_note=", libcuda.so.1 in the loader's cache ($vmcuda_driver_conf)"
fi
# The CDI spec, once the vmcuda command is in place (it writes it).
cdi_note=""
if [ "$cdi" = 1 ]; then
  vmcuda_cdi_register "$prefix" || true
else
  vmcuda_cdi_unregister "$prefix"  # an earlier install's, without --no-cdi
fi
if [ "$(vmcuda_cdi_listed)" = "$prefix/lib" ]; then
  record "$vmcuda_cdi_spec"
  cdi_note=", containers with --device vmcuda.dev/gpu=all ($vmcuda_cdi_spec)"
fi
# An earlier install's entries that this one no longer has are kept, so that
# --uninstall still finds them.
if [ -f "$list" ]; then cat "$list" >>"$new"; fi
sort -u "$new" >"$list"
rm -f "$new"
echo "install.sh: installed vmcuda in $prefix (programs linked in $bindir$driver_note$cdi_note)"

if [ "$system_wide" = 1 ]; then
  "$prefix/sbin/vmcuda-system-wide" enable
fi
