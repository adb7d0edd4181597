#!/usr/bin/env bash
# Builds the guest package, vmcuda-guest_VERSION_ARCH.deb, and the same tree as a
# plain tarball with an install script, vmcuda-guest-VERSION.tar.gz:
#   /opt/vmcuda/lib/libcuda.so.1 (+ libcuda.so)         the replacement driver, which holds
#                                                       the code (NVIDIA's runtime and
#                                                       libraries run on it unmodified;
#                                                       vmcuda ships none of its own:
#                                                       docs/guest-stack.md)
#   /opt/vmcuda/lib/libnvidia-ml.so.1                   the guest's NVML (jumps into libcuda.so.1)
#   /opt/vmcuda/driver/libcuda.so.1 (+ libcuda.so,      links to them: the directory that
#     libnvidia-ml.so.1)
#                                                       /etc/ld.so.conf.d/zz-vmcuda-driver.conf
#                                                       names (written when installed, unless
#                                                       another libcuda.so.1 is there:
#                                                       driver-conf.sh)
#   /opt/vmcuda/bin/vmcuda-run        guest-lib/vmcuda-run, when the tree has it
#   /opt/vmcuda/bin/vmcuda            the guest CLI, when a workspace crate has a `vmcuda` binary
#   /lib/systemd/system/vmcuda-guest-ram-broker.service  with it: the guest's RAM broker
#                                     (enabled and started by the postinst under systemd)
#   /opt/vmcuda/sbin/vmcuda-system-wide  guest-lib/vmcuda-system-wide, when the tree has it
#   /usr/bin/vmcuda-run, /usr/bin/vmcuda, /usr/sbin/vmcuda-system-wide: links to those
#   /etc/cdi/vmcuda.json              written when installed by `vmcuda cdi generate`
#                                     (cdi-conf.sh): --device vmcuda.dev/gpu=all for
#                                     containers; not a file of the package
# The driver is system-wide by default (it needs no other vmcuda library, and a VM
# guest has no NVIDIA driver); vmcuda-system-wide puts the whole of /opt/vmcuda/lib in
# the cache instead. A program built with `nvcc -cudart shared` needs NVIDIA's
# libcudart.so.13 (pip install 'nvidia-cuda-runtime==13.*', or the CUDA toolkit).
#
#   images/guest-deb/build.sh [OUTDIR] [--profile release|debug] [--no-build]
#                             [--guest-lib DIR] [--version V]
#
# OUTDIR defaults to build/pkg. Without --no-build, guest-lib/build-libs.sh and the
# `vmcuda` binary (if any) are built for --profile (default release, or
# $VMCUDA_BUILD_PROFILE). With --no-build, the library comes from --guest-lib (default
# build/guest/lib) and the CLI from target/PROFILE/vmcuda when it is there.
# PKG_COMPRESS=gzip|none makes a faster .deb (tests). Prints the .deb's and the
# tarball's paths on the last two lines. Needs dpkg-deb, objdump, strip, tar, gzip.
# The package's postinst and prerm, and the tarball's install.sh, register and remove
# the driver with driver-conf.sh and the CDI spec with cdi-conf.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
PKG_TOOL=guest-deb/build.sh
# shellcheck source=images/pkg-lib.sh
. "$here/../pkg-lib.sh"
usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

out=""; profile=${VMCUDA_BUILD_PROFILE:-release}; build=1; version=""; guest_lib=""
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --guest-lib) guest_lib=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "$PKG_TOOL: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || usage; out=$1; shift ;;
  esac
done
case "$profile" in release|debug) ;; *) pkg_die "--profile must be release or debug" ;; esac
for tool in dpkg-deb dpkg objdump strip tar gzip python3; do
  command -v "$tool" >/dev/null || pkg_die "needs $tool"
done
[ "$build" = 0 ] || [ -z "$guest_lib" ] || pkg_die "--guest-lib goes with --no-build"
out=${out:-$repo/build/pkg}
version=${version:-$(pkg_workspace_version "$repo")}
pkg_source_date "$repo"
arch=$(dpkg --print-architecture)
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "$out/.guest-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# The `vmcuda` CLI: whichever workspace package has a binary target of that name.
cli_pkg=$(cd "$repo" && cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if any(t["name"] == "vmcuda" and "bin" in t["kind"] for t in p["targets"]):
        print(p["name"]); break')
target_dir=${CARGO_TARGET_DIR:-$repo/target}
if [ "$build" = 1 ]; then
  guest_lib="$stage/built-lib"
  VMCUDA_BUILD_PROFILE=$profile bash "$repo/guest-lib/build-libs.sh" "$guest_lib" >/dev/null
  if [ -n "$cli_pkg" ]; then
    flag=(); [ "$profile" = release ] && flag=(--release)
    (cd "$repo" && cargo build "${flag[@]}" -p "$cli_pkg" --bin vmcuda) >&2
  fi
fi
guest_lib=${guest_lib:-$repo/build/guest/lib}
# libcuda.so.1 holds the code libnvidia-ml.so.1 jumps to.
[ -f "$guest_lib/libcuda.so.1" ] || pkg_die "no libcuda.so.1 in $guest_lib (guest-lib/build-libs.sh, or drop --no-build)"

# The tree under /opt/vmcuda, shared by the .deb and the tarball.
tree="$stage/tree"
mkdir -p "$tree/lib" "$tree/driver" "$tree/bin" "$tree/sbin"
included=()
# The driver (which holds the code) and NVML beside it (libnvidia-ml.so.1 NEEDs
# libcuda.so.1, found through its $ORIGIN run path). No runtime, cuBLAS, cuBLASLt or
# cuDNN: NVIDIA's run on the guest driver, and a replacement an older build left in
# the library directory is not packaged.
for l in libnvidia-ml.so.1 libcuda.so.1; do
  if [ -f "$guest_lib/$l" ]; then
    install -m 0644 "$guest_lib/$l" "$tree/lib/"
    strip --strip-debug "$tree/lib/$l"
    ln -s "$l" "$tree/lib/${l%.so.*}.so"
    included+=("lib/$l")
  else
    pkg_log "note: no $l in $guest_lib; the package has none"
  fi
done
if [ -f "$repo/guest-lib/vmcuda-run" ]; then
  install -m 0755 "$repo/guest-lib/vmcuda-run" "$tree/bin/"; included+=(bin/vmcuda-run)
else
  pkg_log "note: guest-lib/vmcuda-run is not in this tree; the package has no vmcuda-run"
fi
if [ -n "$cli_pkg" ] && [ -x "$target_dir/$profile/vmcuda" ]; then
  install -m 0755 "$target_dir/$profile/vmcuda" "$tree/bin/"
  strip --strip-debug "$tree/bin/vmcuda"; included+=(bin/vmcuda)
else
  pkg_log "note: no vmcuda CLI binary${cli_pkg:+ in $target_dir/$profile}; the package has none"
fi
if [ -f "$repo/guest-lib/vmcuda-system-wide" ]; then
  install -m 0755 "$repo/guest-lib/vmcuda-system-wide" "$tree/sbin/"; included+=(sbin/vmcuda-system-wide)
else
  pkg_log "note: guest-lib/vmcuda-system-wide is not in this tree; the package has no system-wide switch"
fi
# The driver alone, for the loader's cache: a link, so that it is the same file (and
# the loader the same object) as the one the other libraries find beside them.
ln -s ../lib/libcuda.so.1 "$tree/driver/libcuda.so.1"
ln -s libcuda.so.1 "$tree/driver/libcuda.so"
included+=(driver/libcuda.so.1)
# NVML beside it, as NVIDIA's driver puts it: monitoring tools and NCCL load it by name.
if [ -f "$tree/lib/libnvidia-ml.so.1" ]; then
  ln -s ../lib/libnvidia-ml.so.1 "$tree/driver/libnvidia-ml.so.1"
  included+=(driver/libnvidia-ml.so.1)
fi
rmdir "$tree/bin" "$tree/sbin" 2>/dev/null || true

elfs=()
for f in "$tree/lib/libcuda.so.1" "$tree/bin/vmcuda"; do
  if [ -f "$f" ]; then elfs+=("$f"); fi
done
depends=$(pkg_elf_depends "${elfs[@]}")

# --- the .deb -------------------------------------------------------------------------
root="$stage/deb"
mkdir -p "$root/DEBIAN" "$root/opt"
cp -a "$tree" "$root/opt/vmcuda"
for f in "${included[@]}"; do
  case "$f" in
    bin/*) mkdir -p "$root/usr/bin"; ln -s "../../opt/vmcuda/$f" "$root/usr/bin/${f#bin/}" ;;
    sbin/*) mkdir -p "$root/usr/sbin"; ln -s "../../opt/vmcuda/$f" "$root/usr/sbin/${f#sbin/}" ;;
  esac
done
# The guest's RAM broker, where the CLI that runs it is in the package.
if [ -f "$tree/bin/vmcuda" ]; then
  install -D -m 0644 "$here/vmcuda-guest-ram-broker.service" \
    "$root/lib/systemd/system/vmcuda-guest-ram-broker.service"
fi
pkg_doc_files "$root" vmcuda-guest "$version" "$repo"
installed_kb=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: vmcuda-guest
Version: $version
Architecture: $arch
Maintainer: $(pkg_maintainer)
Installed-Size: $installed_kb
Depends: $depends
Section: libs
Priority: optional
Description: vmcuda guest driver: CUDA programs in a VM, run on the host's GPU
 vmcuda runs unmodified CUDA programs inside VM guests that have no GPU: its
 libcuda.so.1, the CUDA driver, forwards every driver call to vmcuda-host on the
 GPU host, over virtio-vsock (or TCP/TLS). NVIDIA's own runtime and libraries
 (libcudart, cuBLAS, cuDNN, NCCL, torch's and JAX's wheels) run on it unmodified;
 a program built with nvcc -cudart shared needs NVIDIA's libcudart.so.13
 (pip install nvidia-cuda-runtime, or the CUDA toolkit).
 .
 The driver and NVML are installed in /opt/vmcuda/lib. The driver is made the
 system's CUDA driver (/etc/ld.so.conf.d/zz-vmcuda-driver.conf), so that programs
 and containers find it; not where another libcuda.so.1 (an NVIDIA driver) is
 already installed. vmcuda-run preloads it (for programs that find their CUDA
 libraries through DT_RPATH, such as torch).
 .
 A CDI spec, /etc/cdi/vmcuda.json, gives containers the libraries and vmcuda-run's
 environment: podman run --device vmcuda.dev/gpu=all (or Docker with CDI on).
EOF
# The driver's ld.so.conf.d file and the CDI spec: written at every configure
# (dpkg-reconfigure vmcuda-guest looks again for another driver, and writes the spec
# anew from the configuration in /etc/vmcuda), removed by the prerm, before the files
# they name (no postrm: the package leaves nothing behind for a purge).
{
  echo '#!/bin/sh'
  echo "# vmcuda-guest postinst: vmcuda's libcuda.so.1 in the loader's cache, unless another is,"
  echo "# and the CDI spec for containers."
  echo 'set -e'
  echo 'vmcuda_driver_who=vmcuda-guest'
  cat "$here/driver-conf.sh" "$here/cdi-conf.sh"
  cat <<'EOF'
case "$1" in
  configure|abort-remove)
    vmcuda_driver_register /opt/vmcuda || true
    vmcuda_cdi_register /opt/vmcuda || true
    # The guest's RAM broker, where systemd runs the machine.
    if [ -f /lib/systemd/system/vmcuda-guest-ram-broker.service ] && [ -d /run/systemd/system ]; then
      systemctl daemon-reload || true
      systemctl enable --now vmcuda-guest-ram-broker.service || true
    fi
    ;;
esac
exit 0
EOF
} >"$root/DEBIAN/postinst"
{
  echo '#!/bin/sh'
  echo '# vmcuda-guest prerm: a system-wide mode turned on, the driver in the loader'"'"'s'
  echo '# cache, and the CDI spec must not outlive the library.'
  echo 'set -e'
  echo 'vmcuda_driver_who=vmcuda-guest'
  cat "$here/driver-conf.sh" "$here/cdi-conf.sh"
  cat <<'EOF'
if [ "$1" = remove ]; then
  if [ -d /run/systemd/system ]; then
    systemctl disable --now vmcuda-guest-ram-broker.service 2>/dev/null || true
  fi
  if [ -x /opt/vmcuda/sbin/vmcuda-system-wide ]; then
    /opt/vmcuda/sbin/vmcuda-system-wide disable || \
      echo "vmcuda-guest: 'vmcuda-system-wide disable' failed; undo the system-wide mode by hand" >&2
  fi
  vmcuda_driver_unregister /opt/vmcuda
  vmcuda_cdi_unregister /opt/vmcuda
fi
exit 0
EOF
} >"$root/DEBIAN/prerm"
chmod 0755 "$root/DEBIAN/prerm" "$root/DEBIAN/postinst"
deb="$out/vmcuda-guest_${version}_${arch}.deb"
pkg_build_deb "$root" "$deb"

# --- the tarball ----------------------------------------------------------------------
name="vmcuda-guest-$version"
tdir="$stage/tar/$name"
mkdir -p "$tdir"
cp -a "$tree"/. "$tdir/"
install -m 0755 "$here/install.sh" "$tdir/install.sh"
install -m 0644 "$here/driver-conf.sh" "$tdir/driver-conf.sh"
install -m 0644 "$here/cdi-conf.sh" "$tdir/cdi-conf.sh"
cat >"$tdir/README" <<EOF
vmcuda guest driver $version ($arch): the replacement libcuda.so.1 (and NVML) and its tools.
NVIDIA's runtime and libraries run on it; a program built with nvcc -cudart shared needs
NVIDIA's libcudart.so.13: pip install 'nvidia-cuda-runtime==13.*' (or the CUDA toolkit).

  sudo ./install.sh                   # into /opt/vmcuda, links in /usr/local/bin and /usr/local/sbin,
                                      # and libcuda.so.1 in the loader's cache (driver/)
  sudo ./install.sh --no-driver       # the same, but libcuda.so.1 only through vmcuda-run
  sudo ./install.sh --no-cdi          # the same, without /etc/cdi/vmcuda.json (containers)
  sudo ./install.sh --prefix DIR      # elsewhere
  sudo ./install.sh --system-wide     # and turn on the system-wide mode (vmcuda-system-wide)
  sudo ./install.sh --uninstall       # remove what install.sh installed (same --prefix)

Then: vmcuda-run ./my_cuda_app (or LD_LIBRARY_PATH=/opt/vmcuda/lib ./my_cuda_app);
in a container: podman run --device vmcuda.dev/gpu=all IMAGE my_cuda_app.
Contents: $(printf '%s ' "${included[@]}")
EOF
tarball="$out/$name.tar.gz"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
  -C "$stage/tar" -cf - "$name" | gzip -9n >"$tarball.tmp"
mv -f "$tarball.tmp" "$tarball"
pkg_log "wrote $deb ($(du -k "$deb" | cut -f1) KiB) and $tarball ($(du -k "$tarball" | cut -f1) KiB): ${included[*]}"
echo "$deb"
echo "$tarball"
