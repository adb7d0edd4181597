#!/usr/bin/env bash
# Installs Debian packages for the scripts (.ci/run, tests/run.sh, tests/demo.sh,
# images/build-demo-image.sh), changing the system no more than asked: one line per
# step on stderr, apt's own output kept in a log file and printed when a step fails.
# Root only: anyone else is told what to run.
#
#   .ci/apt-install.sh PACKAGE...
#
# - Recommended packages are not installed (--no-install-recommends).
# - Nothing installed is removed or downgraded: apt's plan (apt-get -s) is read first,
#   and a PACKAGE whose installation would remove or downgrade an installed package
#   (say Debian's qemu-system-x86 over a newer qemu-utils from backports) is skipped,
#   with the reason; what is there stays and is used.
# - The plan, every package to be installed with its version, is printed before
#   anything is installed.
# VMCUDA_APT_DRY_RUN=1 prints the plan and the skipped packages and installs nothing.
# Exit status: 0 all installed, 1 failed, 3 the others installed but some skipped (the
# skipped ones are named on stderr, and on stdout one per line).
#
# The package lists are fetched (apt-get update) when there are none, or when the
# install fails without them fresh. The log: $VMCUDA_APT_LOG, default build/logs/apt.log
# in the checkout (appended to).
set -euo pipefail
[ $# -gt 0 ] || exit 0
root=$(cd "$(dirname "$0")/.." && pwd)
log=${VMCUDA_APT_LOG:-$root/build/logs/apt.log}

if [ "$(id -u)" != 0 ]; then
  echo "apt: installing needs root: sudo apt-get install --no-install-recommends $*" >&2
  exit 1
fi
mkdir -p "$(dirname "$log")"
# No questions and no "unable to initialize frontend" warnings from debconf.
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q --no-install-recommends)

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
update() { step "fetching the package lists (apt-get update)" apt-get update -q; }

# plan PACKAGE...: apt's simulated installation, on stdout; fails as apt-get -s does
# (an unknown package, unmet dependencies).
plan() { LC_ALL=C apt-get -s "${apt_opts[@]}" install "$@" 2>&1; }
# harm PLAN: what the plan would do to installed packages, one line each ("removes
# NAME VERSION", "downgrades NAME from OLD to NEW"); empty when nothing.
harm() {
  local line name old new
  while IFS= read -r line; do
    case "$line" in
      "Remv "*)
        read -r _ name old _ <<<"$line"
        echo "removes $name ${old//[\[\]]/}" ;;
      "Inst "*"["*"]"*)
        # Inst NAME [OLD] (NEW SUITE [ARCH]): an installed package changes version.
        name=$(awk '{ print $2 }' <<<"$line")
        old=$(sed -n 's/^Inst [^ ]* \[\([^]]*\)\].*/\1/p' <<<"$line")
        new=$(sed -n 's/^Inst [^(]*(\([^ ]*\) .*/\1/p' <<<"$line")
        if [ -n "$old" ] && [ -n "$new" ] && dpkg --compare-versions "$new" lt "$old"; then
          echo "downgrades $name from $old to $new"
        fi ;;
    esac
  done <<<"$1"
}
# installs PLAN: "NAME VERSION" of every package the plan installs or upgrades.
installs() { sed -n 's/^Inst \([^ ]*\) \(\[[^]]*\] \)\{0,1\}(\([^ ]*\) .*/\1 \3/p' <<<"$1"; }

if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
  update
fi
out=$(plan "$@") || {
  # Stale or missing lists: fetch them once and plan again.
  update
  out=$(plan "$@") || { echo "apt: apt-get cannot install $*:" >&2; sed 's/^/   /' <<<"$out" >&2; exit 1; }
}

wanted=("$@")
skipped=()
if [ -n "$(harm "$out")" ]; then
  # Which of the packages asked for does it: each alone.
  wanted=()
  for p in "$@"; do
    one=$(plan "$p") || { skipped+=("$p"); echo "apt: skipping $p: apt-get cannot install it" >&2; continue; }
    why=$(harm "$one")
    if [ -n "$why" ]; then
      skipped+=("$p")
      echo "apt: skipping $p: installing it $(paste -sd ';' <<<"$why" | sed 's/;/; /g') (installed packages are never removed or downgraded here)" >&2
    else
      wanted+=("$p")
    fi
  done
  if [ ${#wanted[@]} -gt 0 ]; then
    out=$(plan "${wanted[@]}") || { echo "apt: apt-get cannot install ${wanted[*]}" >&2; exit 1; }
    if [ -n "$(harm "$out")" ]; then
      # Each alone is harmless but together they are not: install none of them.
      echo "apt: skipping ${wanted[*]}: together they $(harm "$out" | paste -sd ';' | sed 's/;/; /g')" >&2
      skipped+=("${wanted[@]}")
      wanted=()
    fi
  fi
fi

if [ ${#wanted[@]} -gt 0 ]; then
  list=$(installs "$out")
  if [ -z "$list" ]; then
    echo "apt: ${wanted[*]}: already installed" >&2
  else
    echo "apt: to install ${wanted[*]}, apt-get install --no-install-recommends will install these $(wc -l <<<"$list") packages (nothing removed or downgraded):" >&2
    # shellcheck disable=SC2001  # one prefix per line
    sed 's/^/   /' <<<"$list" >&2
    if [ "${VMCUDA_APT_DRY_RUN:-0}" = 1 ]; then
      echo "apt: VMCUDA_APT_DRY_RUN=1: nothing installed" >&2
    elif ! retry=1 step "installing ${wanted[*]}" apt-get install "${apt_opts[@]}" "${wanted[@]}"; then
      # Stale lists name versions the mirror no longer has: fetch them, check the new
      # plan the same way, and try again.
      update
      out=$(plan "${wanted[@]}") && [ -z "$(harm "$out")" ] ||
        { echo "apt: with fresh package lists, installing ${wanted[*]} would remove or downgrade packages: not installed" >&2; exit 1; }
      step "installing ${wanted[*]}" apt-get install "${apt_opts[@]}" "${wanted[@]}"
    fi
  fi
fi
if [ ${#skipped[@]} -gt 0 ]; then
  printf '%s\n' "${skipped[@]}"
  exit 3
fi
