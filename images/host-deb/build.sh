#!/usr/bin/env bash
# Builds the host package, vmcuda-host_VERSION_ARCH.deb, with dpkg-deb:
#   /usr/bin/vmcuda-host, /usr/bin/vmcuda-vhost-vsock      (debug info stripped)
#   /etc/vmcuda/host.toml                                   (conffile: host-backend/etc/host.toml)
#   /etc/default/vmcuda-host                                (conffile: executor, listener arguments)
#   /lib/systemd/system/vmcuda-host.service, vmcuda-vhost@.service
#   /usr/lib/tmpfiles.d/vmcuda.conf                         (/run/vmcuda and its sockets' directories)
#   /usr/share/doc/vmcuda-host/                             (install, configuration, VM, security and admin API docs;
#                                                            examples/: a VM env file, the libvirt hook, slurm/)
#
#   images/host-deb/build.sh [OUTDIR] [--profile release|debug] [--no-build] [--version V]
#
# OUTDIR defaults to build/pkg. --profile picks target/PROFILE (default release, or
# $VMCUDA_BUILD_PROFILE); without --no-build the binaries are built first with cargo.
# --version defaults to the workspace version. PKG_COMPRESS=gzip|none makes a faster
# package (tests). Prints the .deb's path on the last line. Needs dpkg-deb, objdump,
# strip; no root (files are owned by root in the package).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
PKG_TOOL=host-deb/build.sh
# shellcheck source=images/pkg-lib.sh
. "$here/../pkg-lib.sh"
usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

out=""; profile=${VMCUDA_BUILD_PROFILE:-release}; build=1; version=""
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --version) version=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "$PKG_TOOL: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || usage; out=$1; shift ;;
  esac
done
case "$profile" in release|debug) ;; *) pkg_die "--profile must be release or debug" ;; esac
for tool in dpkg-deb dpkg objdump strip gzip; do
  command -v "$tool" >/dev/null || pkg_die "needs $tool"
done
out=${out:-$repo/build/pkg}
version=${version:-$(pkg_workspace_version "$repo")}
pkg_source_date "$repo"
arch=$(dpkg --print-architecture)

if [ "$build" = 1 ]; then
  flag=(); [ "$profile" = release ] && flag=(--release)
  (cd "$repo" && cargo build "${flag[@]}" -p vmcuda-host -p vmcuda-vmm-glue) >&2
fi
target_dir=${CARGO_TARGET_DIR:-$repo/target}
bins=("$target_dir/$profile/vmcuda-host" "$target_dir/$profile/vmcuda-vhost-vsock")
for b in "${bins[@]}"; do
  [ -x "$b" ] || pkg_die "missing $b (cargo build --$profile -p vmcuda-host -p vmcuda-vmm-glue, or drop --no-build)"
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "$out/.host-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/usr/lib/tmpfiles.d" \
  "$root/etc/vmcuda/vhost" "$root/etc/vmcuda/tokens" "$root/etc/vmcuda/tls" "$root/etc/default" \
  "$root/usr/share/doc/vmcuda-host/examples"

for b in "${bins[@]}"; do
  install -m 0755 "$b" "$root/usr/bin/"
  strip --strip-debug "$root/usr/bin/$(basename "$b")"
done
install -m 0644 "$repo/host-backend/etc/host.toml" "$root/etc/vmcuda/host.toml"
install -m 0644 "$here/default" "$root/etc/default/vmcuda-host"
install -m 0644 "$here/vmcuda-host.service" "$here/vmcuda-vhost@.service" "$root/lib/systemd/system/"
install -m 0644 "$here/tmpfiles.conf" "$root/usr/lib/tmpfiles.d/vmcuda.conf"
install -m 0644 "$here/vm-example.env" "$root/usr/share/doc/vmcuda-host/examples/vm1.env"
install -m 0755 "$repo/images/libvirt/qemu-hook" "$root/usr/share/doc/vmcuda-host/examples/libvirt-qemu-hook"
install -d "$root/usr/share/doc/vmcuda-host/examples/slurm"
install -m 0755 "$repo"/images/slurm/{prolog,task-prolog,epilog} "$root/usr/share/doc/vmcuda-host/examples/slurm/"
install -m 0644 "$repo"/images/slurm/{vmcuda-slurm.sh,slurm.env.example} "$root/usr/share/doc/vmcuda-host/examples/slurm/"
for d in install configuration vm-setup security admin-api slurm; do
  if [ -f "$repo/docs/$d.md" ]; then install -m 0644 "$repo/docs/$d.md" "$root/usr/share/doc/vmcuda-host/"; fi
done
pkg_doc_files "$root" vmcuda-host "$version" "$repo"

depends=$(pkg_elf_depends "$root/usr/bin/vmcuda-host" "$root/usr/bin/vmcuda-vhost-vsock")
installed_kb=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: vmcuda-host
Version: $version
Architecture: $arch
Maintainer: $(pkg_maintainer)
Installed-Size: $installed_kb
Depends: $depends, passwd
Recommends: init-system-helpers
Suggests: qemu-system-x86
Section: misc
Priority: optional
Description: vmcuda host backend: CUDA for virtual machines without a GPU
 vmcuda runs unmodified CUDA programs inside VM guests: the guest's replacement
 libcudart.so.13 forwards each CUDA call to this host, which runs it on the real GPU.
 .
 This package holds the host daemon vmcuda-host (one worker process per guest
 connection; vsock, hybrid-vsock, Unix and TCP/TLS listeners), the per-VM vhost-user
 vsock device vmcuda-vhost-vsock, their systemd units (vmcuda-host.service and
 vmcuda-vhost@VM.service) and the default configuration /etc/vmcuda/host.toml, which
 admits no VM until one is added.
EOF
printf '%s\n' /etc/vmcuda/host.toml /etc/default/vmcuda-host >"$root/DEBIAN/conffiles"
install -m 0755 "$here/postinst" "$here/prerm" "$here/postrm" "$root/DEBIAN/"

deb="$out/vmcuda-host_${version}_${arch}.deb"
pkg_build_deb "$root" "$deb"
pkg_log "wrote $deb ($(du -k "$deb" | cut -f1) KiB)"
echo "$deb"
