# shellcheck shell=bash
# Shared by images/host-deb/build.sh and images/guest-deb/build.sh (sourced, not run):
# the package version, the maintainer line, the binaries' dependencies and the
# Debian boilerplate files.

pkg_die() { echo "${PKG_TOOL:-pkg}: $*" >&2; exit 1; }
pkg_log() { echo "${PKG_TOOL:-pkg}: $*" >&2; }

# The workspace version (Cargo.toml [workspace.package] version).
pkg_workspace_version() {
  local v
  v=$(awk '/^\[workspace\.package\]/ { p = 1; next } /^\[/ { p = 0 }
           p && $1 == "version" { gsub(/"/, "", $3); print $3; exit }' "$1/Cargo.toml")
  [ -n "$v" ] || pkg_die "no [workspace.package] version in $1/Cargo.toml"
  echo "$v"
}

# SOURCE_DATE_EPOCH, when not set, from the source tree's last commit: file times in
# the packages (dpkg-deb and tar clamp them to it) and the changelog's date follow the
# commit, not the build.
pkg_source_date() {
  if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git -C "$1" log -1 --format=%ct 2>/dev/null || date +%s)
  fi
  export SOURCE_DATE_EPOCH
}

# Maintainer: DEBFULLNAME/DEBEMAIL as Debian's tools take them, else a fixed line.
pkg_maintainer() {
  if [ -n "${DEBEMAIL:-}" ]; then
    echo "${DEBFULLNAME:-vmcuda maintainers} <$DEBEMAIL>"
  else
    echo "vmcuda maintainers <vmcuda@localhost.invalid>"
  fi
}

# The Debian dependencies of ELF files: libc6 at the newest GLIBC_ symbol version
# they use, libgcc-s1 when one needs libgcc_s. Any other library is an error here, so
# that a new dependency is added on purpose (NEEDED entries, not ldd: only what the
# binaries themselves name).
pkg_elf_depends() {
  local f needed glibc="" v deps=() lib own=" "
  # Libraries the package ships itself (libnvidia-ml.so.1 needs the libcuda.so.1 beside
  # it) need no other package.
  for f in "$@"; do own+="$(basename "$f") "; done
  for f in "$@"; do
    needed=$(objdump -p "$f" | awk '$1 == "NEEDED" { print $2 }')
    for lib in $needed; do
      if [[ "$own" == *" $lib "* ]]; then continue; fi
      case "$lib" in
        libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|ld-linux-x86-64.so.2) ;;
        libgcc_s.so.1) deps+=("libgcc-s1") ;;
        *) pkg_die "$(basename "$f") needs $lib: add its package to pkg_elf_depends in images/pkg-lib.sh" ;;
      esac
    done
    v=$(objdump -T "$f" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1 || true)
    if [ -n "$v" ] && { [ -z "$glibc" ] || [ "$(printf '%s\n%s\n' "$glibc" "$v" | sort -V | tail -n1)" = "$v" ]; }; then
      glibc=$v
    fi
  done
  deps=("libc6 (>= ${glibc:-2.17})" ${deps[@]+"${deps[@]}"})
  printf '%s\n' "${deps[@]}" | awk '!seen[$0]++' | paste -sd, - | sed 's/,/, /g'
}

# usr/share/doc/PKG/{copyright,changelog.Debian.gz} under ROOT.
pkg_doc_files() {
  local root=$1 pkg=$2 version=$3 repo=$4 doc
  doc="$root/usr/share/doc/$pkg"
  mkdir -p "$doc"
  cat >"$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: vmcuda
Comment: Built from the vmcuda source tree by images/$pkg-deb/build.sh
 (the Rust crates' third-party dependencies are linked statically; their licenses are
 listed in the source tree's Cargo.lock).

Files: *
Copyright: vmcuda contributors
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 can be found in
 /usr/share/common-licenses/Apache-2.0.
EOF
  {
    echo "$pkg ($version) unstable; urgency=medium"
    echo
    echo "  * Built from the vmcuda source tree at $(git -C "$repo" describe --always --dirty 2>/dev/null || echo 'an unknown commit')."
    echo
    echo " -- $(pkg_maintainer)  $(date -R -u -d "@$SOURCE_DATE_EPOCH")"
  } | gzip -9n >"$doc/changelog.Debian.gz"
}

# Build ROOT (with ROOT/DEBIAN) into OUT with dpkg-deb: files owned by root, xz by
# default (PKG_COMPRESS=gzip|none for faster test builds).
pkg_build_deb() {
  local root=$1 out=$2
  find "$root" -path "$root/DEBIAN" -prune -o -type d -exec chmod 0755 {} +
  dpkg-deb --root-owner-group -Z"${PKG_COMPRESS:-xz}" --build "$root" "$out" >/dev/null
}
