#!/usr/bin/env bash
# Builds the host and guest packages into one folder that is also a local apt
# repository (a flat one: the packages and their index side by side):
#
#   images/build-repo.sh [OUTDIR] [--profile release|debug] [--no-build] [--guest-lib DIR]
#
# OUTDIR (default dist/ in the checkout) then holds
#   vmcuda-host_VERSION_amd64.deb     images/host-deb/build.sh
#   vmcuda-guest_VERSION_amd64.deb    images/guest-deb/build.sh
#   vmcuda-guest-VERSION.tar.gz       the guest tarball (install.sh), for guests without dpkg
#   Packages, Packages.gz             the index (dpkg-scanpackages, from dpkg-dev)
#   Release                           the index's checksums
#   SHA256SUMS                        every file above (sha256sum -c SHA256SUMS)
# and apt installs from it with
#   echo "deb [trusted=yes] file:/path/to/OUTDIR ./" >/etc/apt/sources.list.d/vmcuda.list
#   apt update && apt install vmcuda-host        # or vmcuda-guest, in a VM
# (trusted=yes: the repository is not signed; it is your own build.)
#
# The options go to both package builds (see them). Old packages in OUTDIR are removed
# first, so that the index names one version of each. Needs what the package builds need
# plus dpkg-scanpackages; no root. Prints OUTDIR on the last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
PKG_TOOL=build-repo.sh
# shellcheck source=images/pkg-lib.sh
. "$here/pkg-lib.sh"
usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

out=""; common=(); guest_only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) common+=(--profile "$2"); shift 2 ;;
    --no-build) common+=(--no-build); shift ;;
    --guest-lib) guest_only+=(--guest-lib "$2"); shift 2 ;;
    -h|--help) usage ;;
    -*) echo "$PKG_TOOL: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || usage; out=$1; shift ;;
  esac
done
[ -n "$out" ] || out="$repo/dist"
command -v dpkg-scanpackages >/dev/null ||
  pkg_die "needs dpkg-scanpackages (apt-get install --no-install-recommends dpkg-dev)"
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/vmcuda-host_*.deb "$out"/vmcuda-guest_*.deb "$out"/vmcuda-guest-*.tar.gz \
  "$out"/Packages "$out"/Packages.gz "$out"/Release "$out"/SHA256SUMS

pkg_log "the host package"
bash "$here/host-deb/build.sh" "$out" ${common[@]+"${common[@]}"} >/dev/null
pkg_log "the guest package and tarball"
bash "$here/guest-deb/build.sh" "$out" ${common[@]+"${common[@]}"} ${guest_only[@]+"${guest_only[@]}"} >/dev/null

pkg_source_date "$repo"
cd "$out"
# Paths in the index are relative to the folder: the `./` of the sources line.
dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages
[ "$(grep -c '^Package: ' Packages)" = 2 ] || pkg_die "the index does not list both packages:
$(cat Packages)"
gzip -9nc Packages >Packages.gz
{
  echo "Origin: vmcuda"
  echo "Label: vmcuda"
  echo "Architectures: amd64"
  echo "Date: $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
  echo "SHA256:"
  for f in Packages Packages.gz; do
    printf ' %s %s %s\n' "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"
  done
} >Release
sha256sum vmcuda-host_*.deb vmcuda-guest_*.deb vmcuda-guest-*.tar.gz Packages Packages.gz Release >SHA256SUMS
sed 's/^/  /' SHA256SUMS >&2
pkg_log "apt repository in $out: deb [trusted=yes] file:$out ./"
echo "$out"
