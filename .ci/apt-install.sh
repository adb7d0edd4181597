#!/usr/bin/env bash
# Installs Debian packages for the scripts (.ci/run, tests/run.sh, tests/demo.sh,
# images/build-demo-image.sh): one line per step on stderr, apt's own output kept in a
# log file and printed when a step fails. Root only: anyone else is told what to run.
#
#   .ci/apt-install.sh PACKAGE...
#
# The package lists are fetched (apt-get update) when there are none, or when the
# install fails without them fresh. The log: $VMCUDA_APT_LOG, default build/logs/apt.log
# in the checkout (appended to).
set -euo pipefail
[ $# -gt 0 ] || exit 0
root=$(cd "$(dirname "$0")/.." && pwd)
log=${VMCUDA_APT_LOG:-$root/build/logs/apt.log}

if [ "$(id -u)" != 0 ]; then
  echo "apt: installing needs root: sudo apt-get install $*" >&2
  exit 1
fi
mkdir -p "$(dirname "$log")"
# No questions and no "unable to initialize frontend" warnings from debconf.
export DEBIAN_FRONTEND=noninteractive

# step DESCRIPTION COMMAND...: one line, the output to the log, all of it shown on
# failure.
step() {
  local what=$1 out status=0
  shift
  out=$(mktemp)
  echo "apt: $what (log: $log)" >&2
  "$@" >"$out" 2>&1 || status=$?
  { echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $*"; cat "$out"; } >>"$log"
  if [ "$status" != 0 ] && [ "${retry:-0}" = 1 ]; then
    echo "apt: $what failed (exit $status); trying again with fresh package lists" >&2
  elif [ "$status" != 0 ]; then
    echo "apt: $what failed (exit $status); its output:" >&2
    sed 's/^/   /' "$out" >&2
  fi
  rm -f "$out"
  return "$status"
}

install() { step "installing $*" apt-get install -y -q "$@"; }
update() { step "fetching the package lists (apt-get update)" apt-get update -q; }

if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
  update
  install "$@"
elif ! retry=1 install "$@"; then
  # Stale lists name versions the mirror no longer has: fetch them and try again.
  update
  install "$@"
fi
