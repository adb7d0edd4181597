#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted programs (awk, bash -c, dpkg-query formats) expand later
# Installs the vmcuda packages into a container-like root and checks them: a
# copy-on-write overlay of this machine's own root (a Debian system: dpkg, coreutils,
# passwd, systemd-analyze) over a tmpfs, in a private mount namespace, entered with
# chroot. Nothing outside the namespace changes; the overlay goes when it ends.
#
#   tests/install/packages.sh --host-deb DEB --guest-deb DEB --guest-tarball TGZ --app PROGRAM
#                             --static-app PROGRAM --cudart DIR [--repo DIR]
#
# --repo DIR: the local apt repository images/build-repo.sh wrote (the same packages):
# its checksums are checked, and the host and guest packages are first installed from it
# with apt-get (offline: the root's apt sees that repository only, as a user's
# `deb [trusted=yes] file:DIR ./` line), as a user installs them; without it, dpkg -i.
#
# PROGRAM is a CUDA test program (tests/apps, e.g. vector_add, built with -cudart
# shared) that a local user runs through the packaged daemon, on NVIDIA's
# libcudart.so.13 from DIR, put where the CUDA toolkit installs it
# (/usr/local/cuda/lib64, where vmcuda-run finds it); --static-app the same built with
# NVIDIA's static runtime (VMCUDA_APPS_CUDART=static), which loads libcuda.so.1 itself. Checks, each printed as
# `ok - ...` or `not ok - ...`:
#   host package: dpkg -i runs its postinst in the root; the files, conffiles and
#     dependencies; the vmcuda user and groups; the configuration's permissions; the
#     run-time directories (tmpfiles); the service enabled; `systemd-analyze verify` of
#     both units; the units' own ExecStart/ExecReload (tests/install/unit-exec.py: their
#     user, groups, umask and environment, without systemd's sandbox) start the daemon
#     and a vhost-user device with the right socket owners and modes, reload checks the
#     configuration and refuses a broken one, SIGTERM stops the daemon; a local user in
#     group vmcuda-users runs PROGRAM through it and one outside is refused; an edited
#     conffile and an administrator's `systemctl disable` survive a reinstall; remove
#     and purge clean up.
#   guest tarball: install.sh into /opt/vmcuda with links in /usr/local, PROGRAM runs
#     from it, the driver alone (/opt/vmcuda/driver) is in the linker's cache so that
#     the static PROGRAM runs without vmcuda-run, the CDI spec (/etc/cdi/vmcuda.json) is
#     written, --uninstall removes exactly that.
#   guest package: dpkg -i puts the driver and NVML in /opt/vmcuda/lib (no runtime or
#     cuBLAS of vmcuda's; NVIDIA's runtime is not in the linker's cache) and the driver
#     in the cache (/etc/ld.so.conf.d/zz-vmcuda-driver.conf),
#     the postinst writes the CDI spec (its mounts exist, its environment is what the
#     installed vmcuda-run sets, /dev/vsock), install.sh refuses to write over it, dpkg
#     -r removes it, the driver's file and the spec.
#   another libcuda.so.1 (a stand-in for NVIDIA's in /usr/lib/x86_64-linux-gnu): one
#     installed later comes first, the postinst then steps aside; the package and the
#     tarball installed over one leave the loader's cache alone.
# Exit status: 0 all passed, 1 a check failed, 2 usage, 77 skipped (not root, or no
# overlayfs / mount namespaces here).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" | grep -v shellcheck | sed 's/^# \{0,1\}//' >&2; exit 2; }

host_deb=""; guest_deb=""; guest_tgz=""; app=""; static_app=""; cudart=""; repo_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --host-deb) host_deb=$2; shift 2 ;;
    --guest-deb) guest_deb=$2; shift 2 ;;
    --guest-tarball) guest_tgz=$2; shift 2 ;;
    --app) app=$2; shift 2 ;;
    --static-app) static_app=$2; shift 2 ;;
    --cudart) cudart=$2; shift 2 ;;
    --repo) repo_dir=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "packages.sh: unknown argument $1" >&2; usage ;;
  esac
done
for f in "$host_deb" "$guest_deb" "$guest_tgz" "$app" "$static_app" "$cudart/libcudart.so.13"; do
  [ -n "$f" ] || usage
  [ -f "$f" ] || { echo "packages.sh: no such file: $f" >&2; exit 2; }
done
if [ -n "$repo_dir" ]; then
  [ -f "$repo_dir/Packages" ] || { echo "packages.sh: no apt repository (Packages) in $repo_dir" >&2; exit 2; }
  repo_dir=$(cd "$repo_dir" && pwd)
fi

if [ "$(id -u)" != 0 ]; then
  echo "packages.sh: SKIPPED: needs root (a mount namespace and an overlay of /)" >&2
  exit 77
fi
if [ -z "${VMCUDA_PKG_TEST_NS:-}" ]; then
  # Everything below runs in a private mount namespace: its mounts vanish with it.
  if ! unshare -m true 2>/dev/null || ! grep -qw overlay /proc/filesystems; then
    modprobe overlay 2>/dev/null || true
    if ! unshare -m true 2>/dev/null || ! grep -qw overlay /proc/filesystems; then
      echo "packages.sh: SKIPPED: no mount namespaces or no overlayfs on this machine" >&2
      exit 77
    fi
  fi
  exec env VMCUDA_PKG_TEST_NS=1 unshare -m --propagation private bash "${BASH_SOURCE[0]}" \
    --host-deb "$host_deb" --guest-deb "$guest_deb" --guest-tarball "$guest_tgz" --app "$app" \
    --static-app "$static_app" --cudart "$cudart" ${repo_dir:+--repo "$repo_dir"}
fi

t0=$(date +%s.%N)
work=$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-pkgroot.XXXXXX")
pids=()
cleanup() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill -9 "$p" 2>/dev/null || true; done
  umount -R "$work" 2>/dev/null || umount -lR "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mount -t tmpfs -o mode=0755 tmpfs "$work"
mkdir "$work/upper" "$work/ovl" "$work/root"
r="$work/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$work/upper,workdir=$work/ovl" "$r"
mount -t proc proc "$r/proc"
mount --bind /dev "$r/dev"
# No /run/systemd/system in here: the maintainer scripts see no running systemd.
mount -t tmpfs -o mode=0755 tmpfs "$r/run"
mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
cp "$host_deb" "$r/tmp/host.deb"
cp "$guest_deb" "$r/tmp/guest.deb"
cp "$guest_tgz" "$r/tmp/guest.tar.gz"
cp "$app" "$r/tmp/app"
cp "$static_app" "$r/tmp/static-app"
# NVIDIA's runtime where the CUDA toolkit puts it (not in the loader's cache).
mkdir -p "$r/usr/local/cuda/lib64"
cp -L "$cudart/libcudart.so.13" "$r/usr/local/cuda/lib64/libcudart.so.13"
cp "$here/unit-exec.py" "$work/unit-exec.py"
if [ -n "$repo_dir" ]; then
  cp -r "$repo_dir" "$r/tmp/repo"
  echo "deb [trusted=yes] file:/tmp/repo ./" >"$r/tmp/vmcuda-repo.list"
  mkdir -p "$r/tmp/apt-lists/partial"
  # apt's download sandbox user reads the repository.
  chmod -R a+rX "$r/tmp/repo" "$r/tmp/apt-lists"
fi

passed=0; failed=0
indent() { sed 's/^/#   /'; }
ok() { echo "ok - $*"; passed=$((passed + 1)); }
bad() { echo "not ok - $*"; failed=$((failed + 1)); }
# check DESCRIPTION COMMAND...: the command's success is the check; its output is
# shown only when it fails.
check() {
  local what=$1; shift
  if "$@" >"$work/check.out" 2>&1; then ok "$what"; else bad "$what"; indent <"$work/check.out"; fi
}
in_root() { chroot "$r" "$@"; }
# Mode and owner of a path in the root, resolved with the root's own names.
stat_of() { in_root stat -c '%a %U:%G' "$1" 2>/dev/null || echo "missing"; }
expect_stat() {  # expect_stat PATH "MODE USER:GROUP"
  local got; got=$(stat_of "$1")
  if [ "$got" = "$2" ]; then ok "$1 is $2"; else bad "$1 is $2 (got: $got)"; fi
}
unit_exec() { python3 "$work/unit-exec.py" "$r" "$r/lib/systemd/system/$1" "$2" ${3:+"$3"}; }
wait_socket() {  # wait_socket PATH PID: up to 15 s
  for _ in $(seq 150); do
    [ -S "$r$1" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# Ends PID with SIGTERM (what systemd sends) and says whether it exited within 5 s.
stops_on_term() {
  kill -TERM "$1" 2>/dev/null || return 1
  for _ in $(seq 50); do
    kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  return 1
}

# The root's apt, seeing only the local repository (no network, none of the system's
# sources): what `deb [trusted=yes] file:DIR ./` gives a user.
apt_in_root() {
  in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o Dir::Etc::SourceList=/tmp/vmcuda-repo.list \
    -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=/tmp/apt-lists "$@"
}
# The version apt would install from the repository, and the package's own.
repo_candidate() { apt_in_root -s install "$1" 2>/dev/null | sed -n "s/^Inst $1 .*(\([^ ]*\) .*/\1/p"; }

if [ -n "$repo_dir" ]; then
  echo "# the apt repository"
  check "SHA256SUMS of the repository match (sha256sum -c)" bash -c "cd '$repo_dir' && sha256sum -c --quiet SHA256SUMS"
  check "the index lists vmcuda-host and vmcuda-guest" \
    bash -c '[ "$(grep "^Package: " "$1/Packages" | sort | tr "\n" " ")" = "Package: vmcuda-guest Package: vmcuda-host " ]' _ "$repo_dir"
  check "apt-get update reads the repository (file:/tmp/repo ./)" apt_in_root update
  host_version=$(dpkg-deb -f "$host_deb" Version)
  check "apt offers vmcuda-host $host_version from it" test "$(repo_candidate vmcuda-host)" = "$host_version"
fi

echo "# host package"
if [ -n "$repo_dir" ]; then
  host_install="apt-get install --no-install-recommends vmcuda-host (from the repository)"
  apt_in_root install -y --no-install-recommends vmcuda-host >"$work/dpkg-i.log" 2>&1 && rc=0 || rc=$?
else
  host_install="dpkg -i vmcuda-host"
  in_root dpkg -i /tmp/host.deb >"$work/dpkg-i.log" 2>&1 && rc=0 || rc=$?
fi
if [ "$rc" = 0 ]; then
  ok "$host_install (postinst ran in the root)"
else
  bad "$host_install"; indent <"$work/dpkg-i.log"
  echo "install checks: $passed passed, $((failed + 1)) failed (cannot go on)"; exit 1
fi
check "package state is installed" \
  test "$(in_root dpkg-query -W -f '${Status}' vmcuda-host)" = "install ok installed"
for f in /usr/bin/vmcuda-host /usr/bin/vmcuda-vhost-vsock; do
  expect_stat "$f" "755 root:root"
done
check "vmcuda-host --version runs in the root" in_root /usr/bin/vmcuda-host --version
check "vmcuda-vhost-vsock --version runs in the root" in_root /usr/bin/vmcuda-vhost-vsock --version
for f in /lib/systemd/system/vmcuda-host.service /lib/systemd/system/vmcuda-vhost@.service \
  /usr/lib/tmpfiles.d/vmcuda.conf /etc/default/vmcuda-host /usr/share/doc/vmcuda-host/copyright; do
  check "$f is installed" test -f "$r$f"
done
check "/etc/vmcuda/host.toml is host-backend/etc/host.toml" cmp -s "$r/etc/vmcuda/host.toml" "$repo/host-backend/etc/host.toml"
conffiles=$(in_root dpkg-query -W -f '${Conffiles}' vmcuda-host | awk 'NF { print $1 }' | sort | tr '\n' ' ')
check "conffiles are host.toml and /etc/default/vmcuda-host ($conffiles)" \
  test "$conffiles" = "/etc/default/vmcuda-host /etc/vmcuda/host.toml "
depends=$(in_root dpkg-query -W -f '${Depends}' vmcuda-host)
check "depends on libc6 with a version ($depends)" grep -q 'libc6 (>= 2\.[0-9]*)' <<<"$depends"

pw=$(in_root getent passwd vmcuda || true)
check "user vmcuda: system uid, home /var/lib/vmcuda, no login ($pw)" \
  awk -F: '$3 < 1000 && $6 == "/var/lib/vmcuda" && $7 ~ /nologin$/ { f = 1 } END { exit !f }' <<<"$pw"
for g in vmcuda vmcuda-users vmcuda-vmm; do
  check "group $g exists" in_root getent group "$g"
done
check "user vmcuda's primary group is vmcuda" test "$(in_root id -gn vmcuda)" = vmcuda
if in_root getent group video >/dev/null; then
  check "user vmcuda is in group video (GPU device nodes)" grep -qw video <<<"$(in_root id -nG vmcuda)"
fi
expect_stat /etc/vmcuda/host.toml "640 root:vmcuda"
expect_stat /etc/vmcuda/tokens "750 root:vmcuda"
expect_stat /etc/vmcuda/tls "750 root:vmcuda"
expect_stat /run/vmcuda "755 vmcuda:vmcuda-users"
expect_stat /run/vmcuda/ledger "700 vmcuda:vmcuda-users"
expect_stat /run/vmcuda/vhost "750 vmcuda:vmcuda-vmm"
expect_stat /run/vmcuda/hybrid "3770 vmcuda:vmcuda-vmm"
wants=/etc/systemd/system/multi-user.target.wants/vmcuda-host.service
check "vmcuda-host.service is enabled ($wants)" \
  test "$(readlink "$r$wants")" = /lib/systemd/system/vmcuda-host.service
check "no vmcuda-vhost@ instance is enabled by the package" \
  bash -c "! ls '$r'/etc/systemd/system/*.wants/vmcuda-vhost@* >/dev/null 2>&1"

for u in vmcuda-host.service vmcuda-vhost@.service; do
  if out=$(in_root systemd-analyze verify "/lib/systemd/system/$u" 2>&1) && [ -z "$out" ]; then
    ok "systemd-analyze verify $u: clean"
  else
    bad "systemd-analyze verify $u"; indent <<<"$out"
  fi
done

# The cgroup device allowlist is not something a root without systemd can exercise:
# the units must not set one, directly or through an option that implies one.
for u in vmcuda-host.service vmcuda-vhost@.service; do
  check "$u leaves the GPU device nodes reachable (no device allowlist)" \
    bash -c '! grep -nE "^(PrivateDevices=(yes|true|1)|DevicePolicy=(closed|strict)|DeviceAllow=|ProtectClock=(yes|true|1))" "$1"' _ "$r/lib/systemd/system/$u"
done

echo "# the units' commands, as their user"
# The test double executor (no GPU here), set the way an administrator would.
sed -i 's/^VMCUDA_EXECUTOR=.*/VMCUDA_EXECUTOR=host-memory/' "$r/etc/default/vmcuda-host"
out=$(unit_exec vmcuda-host.service ExecReload 2>&1) && rc=0 || rc=$?
check "reload (ExecReload) passes the shipped configuration, read as user vmcuda" \
  bash -c '[ "$1" = 0 ] && grep -q "^ok$" <<<"$2"' _ "$rc" "$out"
[ "$rc" = 0 ] || indent <<<"$out"
out=$(chroot --userspec=65534:65534 "$r" /usr/bin/vmcuda-host check-config --config /etc/vmcuda/host.toml 2>&1) && rc=0 || rc=$?
check "others cannot read the configuration" bash -c '[ "$1" != 0 ] && grep -q "Permission denied" <<<"$2"' _ "$rc" "$out"

# Started directly (not through a shell function), so that $! is the daemon itself.
python3 "$work/unit-exec.py" "$r" "$r/lib/systemd/system/vmcuda-host.service" ExecStart >"$work/daemon.log" 2>&1 &
daemon=$!; pids+=("$daemon")
if wait_socket /run/vmcuda/vmcuda.sock "$daemon"; then
  ok "ExecStart: the daemon listens on /run/vmcuda/vmcuda.sock"
  expect_stat /run/vmcuda/vmcuda.sock "770 vmcuda:vmcuda-users"
  check "the daemon runs as user vmcuda" \
    test "$(awk '$1 == "Uid:" { print $2 }' "/proc/$daemon/status")" = "$(in_root id -u vmcuda)"
  check "the daemon took VMCUDA_EXECUTOR from /etc/default/vmcuda-host" \
    grep -q -- "--executor host-memory " <<<"$(tr '\0' ' ' <"/proc/$daemon/cmdline")"
else
  bad "ExecStart: the daemon listens on /run/vmcuda/vmcuda.sock"; indent <"$work/daemon.log"
fi

# Local programs: a member of vmcuda-users gets in, anyone else does not.
in_root useradd --create-home --groups vmcuda-users pkgtest-in
in_root useradd --create-home pkgtest-out
# run_app_as USER LAUNCHER [PROGRAM]: the program's (default /tmp/app) stdout+stderr,
# then rc=N. LAUNCHER is a vmcuda-run, a library directory for LD_LIBRARY_PATH (NVIDIA's
# runtime after it), or `system`: neither, the loader finds what its cache has.
run_app_as() {
  local start=(env "LD_LIBRARY_PATH=$2:/usr/local/cuda/lib64")
  case "$2" in */vmcuda-run) start=("$2") ;; system) start=() ;; esac
  chroot --userspec="$(in_root id -u "$1"):$(in_root id -g "$1")" --groups="$(in_root id -G "$1" | tr ' ' ',')" \
    "$r" env -i PATH=/usr/bin:/bin VMCUDA_SERVER=unix:/run/vmcuda/vmcuda.sock ${start[@]+"${start[@]}"} "${3:-/tmp/app}" 2>&1 \
    && echo "rc=0" || echo "rc=$?"
}
# The driver: its ld.so.conf.d file, and the libcuda.so.1 the root's loader hands out
# (the first in its cache).
driver_conf=/etc/ld.so.conf.d/zz-vmcuda-driver.conf
cache_libcuda() { in_root ldconfig -p | awk '$1 == "libcuda.so.1" { print $NF; exit }'; }
conf_lists() { test -f "$r$driver_conf" && test "$(grep -v '^#' "$r$driver_conf")" = "$1"; }
# A stand-in for NVIDIA's driver where its packages put it (a copy of vmcuda's: only
# its name and place matter to the loader's cache).
other_driver=/usr/lib/x86_64-linux-gnu/libcuda.so.1
# Whether the loader hands out that one (under whichever name: with /lib a link to
# usr/lib, the cache says /lib/x86_64-linux-gnu).
cache_is_other() {
  local got; got=$(cache_libcuda)
  [ -n "$got" ] && [ "$(in_root readlink -f "$got")" = "$(in_root readlink -f "$other_driver")" ]
}
other_warning='WARNING: the loader already finds libcuda.so.1 at [^ ]*/x86_64-linux-gnu/libcuda.so.1'
# The CDI spec for containers: written by the installation's `vmcuda` command, when
# the build has one.
cdi_spec=/etc/cdi/vmcuda.json
# cdi_spec_is_for PREFIX: the spec is a CDI spec of kind vmcuda.dev/gpu with a device
# `all` whose mounts exist in the root, with /dev/vsock (no host is configured here),
# and whose environment is what PREFIX's vmcuda-run sets (run in the root).
cdi_spec_is_for() {
  local run_env
  run_env=$(chroot "$r" env -i PATH=/usr/bin:/bin "$1/bin/vmcuda-run" env) || return 1
  python3 - "$r" "$r$cdi_spec" "$1" "$run_env" <<'PY'
import json, os, sys
root, path, prefix, run_env = sys.argv[1:]
spec = json.load(open(path))
assert spec["cdiVersion"] == "0.5.0" and spec["kind"] == "vmcuda.dev/gpu", spec
devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
assert list(devices) == ["all"], devices
edits = devices["all"]
for m in edits["mounts"]:
    assert m["hostPath"] == m["containerPath"], m
    assert os.path.exists(root + m["hostPath"]), f"no {m['hostPath']} in the root"
assert edits["mounts"][0]["hostPath"] == prefix + "/lib", edits["mounts"]
assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/vsock"], edits
env = dict(e.split("=", 1) for e in edits["env"])
want = dict(l.split("=", 1) for l in run_env.splitlines() if l.startswith("LD_"))
assert {k: env.get(k) for k in want} == want and want["LD_LIBRARY_PATH"] == prefix + "/lib", (env, want)
PY
}
# How programs start from an installation: its vmcuda-run when it has one.
launcher() { if [ -e "$r$1" ] || [ -L "$r$1" ]; then echo "$1"; else echo "$2"; fi; }

echo "# guest tarball (install.sh) in the root"
in_root tar -xzf /tmp/guest.tar.gz -C /tmp
tdir=$(find "$r/tmp" -maxdepth 1 -name 'vmcuda-guest-*' -type d -printf '%f\n' | head -n1)
check "the tarball unpacks to vmcuda-guest-VERSION with install.sh" test -x "$r/tmp/$tdir/install.sh"
check "install.sh installs into /opt/vmcuda" in_root sh "/tmp/$tdir/install.sh"
check "install.sh: the driver is /opt/vmcuda/lib/libcuda.so.1" test -f "$r/opt/vmcuda/lib/libcuda.so.1"
check "install.sh: libcuda.so links to libcuda.so.1" test "$(readlink "$r/opt/vmcuda/lib/libcuda.so")" = libcuda.so.1
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
  check "install.sh: no $l of vmcuda's (NVIDIA's runs on the guest driver)" test ! -e "$r/opt/vmcuda/lib/$l"
done
check "install.sh: no cuDNN of vmcuda's (NVIDIA's runs on the guest driver)" test ! -e "$r/opt/vmcuda/lib/libcudnn.so.9"
for p in "$r/tmp/$tdir"/bin/*; do
  [ -e "$p" ] || continue
  n=$(basename "$p")
  check "install.sh: /usr/local/bin/$n links to /opt/vmcuda/bin/$n" test "$(readlink "$r/usr/local/bin/$n")" = "/opt/vmcuda/bin/$n"
done
how=$(launcher /usr/local/bin/vmcuda-run /opt/vmcuda/lib)
out=$(run_app_as pkgtest-in "$how")
check "a member of vmcuda-users runs the program through the packaged daemon ($how)" \
  bash -c 'grep -q "^done$" <<<"$1" && grep -q "^rc=0$" <<<"$1"' _ "$out"
grep -q "^rc=0$" <<<"$out" || indent <<<"$out"
out=$(run_app_as pkgtest-out "$how")
check "a user outside vmcuda-users is refused (socket permissions)" \
  bash -c 'grep -q "Permission denied" <<<"$1" && ! grep -q "^rc=0$" <<<"$1"' _ "$out"
check "install.sh: /opt/vmcuda/driver/libcuda.so.1 links to ../lib/libcuda.so.1" \
  test "$(readlink "$r/opt/vmcuda/driver/libcuda.so.1")" = ../lib/libcuda.so.1
check "install.sh: $driver_conf lists /opt/vmcuda/driver" conf_lists /opt/vmcuda/driver
check "install.sh: the loader's libcuda.so.1 is /opt/vmcuda/driver/libcuda.so.1" \
  test "$(cache_libcuda)" = /opt/vmcuda/driver/libcuda.so.1
if [ -x "$r/opt/vmcuda/bin/vmcuda" ]; then
  check "install.sh: the CDI spec $cdi_spec is /opt/vmcuda's" cdi_spec_is_for /opt/vmcuda
fi
check "install.sh: only the driver is system-wide: libcudart is not in the linker's cache" \
  bash -c "! chroot '$r' ldconfig -p | grep -q libcudart"
out=$(run_app_as pkgtest-in system /tmp/static-app)
check "the static-runtime program runs without vmcuda-run or LD_LIBRARY_PATH (tarball)" \
  bash -c 'grep -q "^done$" <<<"$1" && grep -q "^rc=0$" <<<"$1"' _ "$out"
grep -q "^rc=0$" <<<"$out" || indent <<<"$out"
check "install.sh --uninstall" in_root sh "/tmp/$tdir/install.sh" --uninstall
check "install.sh --uninstall left no /opt/vmcuda" test ! -e "$r/opt/vmcuda"
check "install.sh --uninstall removed $driver_conf and libcuda.so.1 from the linker's cache" \
  bash -c '[ ! -e "$1" ] && [ -z "$2" ]' _ "$r$driver_conf" "$(cache_libcuda)"
check "install.sh --uninstall removed $cdi_spec" test ! -e "$r$cdi_spec"
check "install.sh --no-driver --no-cdi leaves the linker's cache and $cdi_spec alone" \
  bash -c "chroot '$r' sh '/tmp/$tdir/install.sh' --no-driver --no-cdi >/dev/null && [ ! -e '$r$driver_conf' ] && [ ! -e '$r$cdi_spec' ] && ! chroot '$r' ldconfig -p | grep -q libcuda"
out=$(run_app_as pkgtest-in system /tmp/static-app)
check "... where the static-runtime program finds no driver by itself" \
  bash -c '! grep -q "^rc=0$" <<<"$1"' _ "$out"
how=$(launcher /usr/local/bin/vmcuda-run /opt/vmcuda/lib)
if [ "$how" = /usr/local/bin/vmcuda-run ]; then
  out=$(run_app_as pkgtest-in "$how" /tmp/static-app)
  check "... and runs with vmcuda-run" bash -c 'grep -q "^done$" <<<"$1" && grep -q "^rc=0$" <<<"$1"' _ "$out"
  grep -q "^rc=0$" <<<"$out" || indent <<<"$out"
fi
check "... and --uninstall" bash -c "chroot '$r' sh '/tmp/$tdir/install.sh' --uninstall >/dev/null && [ ! -e '$r/opt/vmcuda' ]"
check "install.sh --uninstall left no links in /usr/local" \
  bash -c "! find '$r/usr/local' -lname '/opt/vmcuda/*' | grep -q ."

echo "# guest package"
if [ -n "$repo_dir" ]; then
  guest_version=$(dpkg-deb -f "$guest_deb" Version)
  check "apt offers vmcuda-guest $guest_version from the repository" test "$(repo_candidate vmcuda-guest)" = "$guest_version"
  apt_guest_install() { apt_in_root install -y --no-install-recommends vmcuda-guest; }
  check "apt-get install --no-install-recommends vmcuda-guest (from the repository)" apt_guest_install
else
  check "dpkg -i vmcuda-guest" bash -c "chroot '$r' dpkg -i /tmp/guest.deb >/dev/null 2>&1"
fi
check "the driver is /opt/vmcuda/lib/libcuda.so.1" test -f "$r/opt/vmcuda/lib/libcuda.so.1"
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
  check "the package has no $l of vmcuda's" bash -c '! grep -q "/$2" <<<"$1"' _ "$(in_root dpkg-query -L vmcuda-guest)" "$l"
done
check "nothing system-wide: libcudart is not in the linker's cache" \
  bash -c "! chroot '$r' ldconfig -p | grep -q libcudart"
check "the package has /opt/vmcuda/driver/libcuda.so.1, a link to ../lib/libcuda.so.1" \
  bash -c 'grep -qx /opt/vmcuda/driver/libcuda.so.1 <<<"$1" && [ "$2" = ../lib/libcuda.so.1 ]' _ \
  "$(in_root dpkg-query -L vmcuda-guest)" "$(readlink "$r/opt/vmcuda/driver/libcuda.so.1")"
check "/opt/vmcuda/driver holds the driver and NVML alone (libcuda.so -> libcuda.so.1)" \
  bash -c '[ "$(ls "$1" | tr "\n" " ")" = "libcuda.so libcuda.so.1 libnvidia-ml.so.1 " ] && [ "$(readlink "$1/libcuda.so")" = libcuda.so.1 ]' _ "$r/opt/vmcuda/driver"
check "the package has /opt/vmcuda/lib/libnvidia-ml.so.1, and the driver directory a link to it" \
  bash -c '[ -f "$1/lib/libnvidia-ml.so.1" ] && [ "$(readlink "$1/driver/libnvidia-ml.so.1")" = ../lib/libnvidia-ml.so.1 ]' _ "$r/opt/vmcuda"
check "postinst: $driver_conf lists /opt/vmcuda/driver" conf_lists /opt/vmcuda/driver
check "the loader's libcuda.so.1 is /opt/vmcuda/driver/libcuda.so.1" \
  test "$(cache_libcuda)" = /opt/vmcuda/driver/libcuda.so.1
for f in $(in_root dpkg-query -L vmcuda-guest | grep -E '^/usr/s?bin/.' || true); do
  check "$f resolves into /opt/vmcuda" bash -c "case \$(chroot '$r' readlink -f '$f') in /opt/vmcuda/*) ;; *) exit 1 ;; esac"
done
if [ -x "$r/opt/vmcuda/bin/vmcuda" ]; then
  check "postinst: the CDI spec $cdi_spec is /opt/vmcuda's" cdi_spec_is_for /opt/vmcuda
fi
check "install.sh refuses to write over the package's /opt/vmcuda" \
  bash -c "! chroot '$r' sh '/tmp/$tdir/install.sh' >/dev/null 2>&1"
how=$(launcher /usr/bin/vmcuda-run /opt/vmcuda/lib)
out=$(run_app_as pkgtest-in "$how")
check "the program runs from the package ($how)" \
  bash -c 'grep -q "^done$" <<<"$1" && grep -q "^rc=0$" <<<"$1"' _ "$out"
grep -q "^rc=0$" <<<"$out" || indent <<<"$out"
out=$(run_app_as pkgtest-in system /tmp/static-app)
check "the static-runtime program runs without vmcuda-run or LD_LIBRARY_PATH (package)" \
  bash -c 'grep -q "^done$" <<<"$1" && grep -q "^rc=0$" <<<"$1"' _ "$out"
grep -q "^rc=0$" <<<"$out" || indent <<<"$out"
check "install.sh --prefix elsewhere works beside the package" \
  bash -c "chroot '$r' sh '/tmp/$tdir/install.sh' --prefix /opt/vmcuda-alt --bindir /opt/vmcuda-alt/links >/dev/null && chroot '$r' sh '/tmp/$tdir/install.sh' --uninstall --prefix /opt/vmcuda-alt >/dev/null && test ! -e '$r/opt/vmcuda-alt'"
check "... and leaves the package's driver in the linker's cache" \
  bash -c '[ "$1" = /opt/vmcuda/driver/libcuda.so.1 ]' _ "$(cache_libcuda)"
check "... and its $driver_conf" conf_lists /opt/vmcuda/driver
if [ -x "$r/opt/vmcuda/bin/vmcuda" ]; then
  check "... and its CDI spec" cdi_spec_is_for /opt/vmcuda
fi

echo "# another libcuda.so.1 (a stand-in for NVIDIA's driver)"
cp "$r/tmp/$tdir/lib/libcuda.so.1" "$r$other_driver"
in_root ldconfig
check "one installed later comes first ($driver_conf sorts after x86_64-linux-gnu.conf)" \
  cache_is_other
out=$(in_root /var/lib/dpkg/info/vmcuda-guest.postinst configure 2>&1) || true
check "the postinst then (dpkg-reconfigure) removes $driver_conf, saying why" \
  bash -c '[ ! -e "$1" ] && grep -q "$2" <<<"$3"' _ "$r$driver_conf" "$other_warning" "$out"
check "... and the loader keeps the other one" cache_is_other
rm -f "$r$other_driver"
in_root ldconfig
in_root /var/lib/dpkg/info/vmcuda-guest.postinst configure >/dev/null 2>&1 || true
check "once it is gone, the postinst (dpkg-reconfigure) puts vmcuda's back" \
  bash -c '[ "$1" = /opt/vmcuda/driver/libcuda.so.1 ]' _ "$(cache_libcuda)"

check "dpkg -r vmcuda-guest" bash -c "chroot '$r' dpkg -r vmcuda-guest >/dev/null 2>&1"
check "remove: /opt/vmcuda is gone" test ! -e "$r/opt/vmcuda"
check "remove: $driver_conf is gone" test ! -e "$r$driver_conf"
check "remove: $cdi_spec is gone" test ! -e "$r$cdi_spec"
check "remove: no libcuda.so.1 in the linker's cache" test -z "$(cache_libcuda)"
check "remove: nothing left for a purge (no config-files state)" \
  bash -c '! chroot "$1" dpkg-query -W -f "\${Status}" vmcuda-guest 2>/dev/null | grep -q config-files' _ "$r"

cp "$r/tmp/$tdir/lib/libcuda.so.1" "$r$other_driver"
in_root ldconfig
in_root dpkg -i /tmp/guest.deb >"$work/dpkg-i.log" 2>&1 || true
check "dpkg -i over another libcuda.so.1: installed, with a warning" \
  bash -c '[ "$(chroot "$1" dpkg-query -W -f "\${Status}" vmcuda-guest)" = "install ok installed" ] && grep -q "$2" "$3"' _ "$r" "$other_warning" "$work/dpkg-i.log"
no_conf_keeps_other() { [ ! -e "$r$driver_conf" ] && cache_is_other; }
check "... and no $driver_conf: the loader keeps the other one" no_conf_keeps_other
dpkg_r_keeps_other() {
  in_root dpkg -r vmcuda-guest >/dev/null 2>&1 && [ ! -e "$r/opt/vmcuda" ] && cache_is_other
}
check "... and dpkg -r leaves it" dpkg_r_keeps_other
out=$(in_root sh "/tmp/$tdir/install.sh" 2>&1) || true
check "install.sh over another libcuda.so.1: installed, with a warning, no $driver_conf" \
  bash -c '[ -f "$1/opt/vmcuda/lib/libcuda.so.1" ] && [ ! -e "$1$2" ] && grep -q "$3" <<<"$4"' _ "$r" "$driver_conf" "$other_warning" "$out"
[ -f "$r/opt/vmcuda/lib/libcuda.so.1" ] || indent <<<"$out"
check "... and --uninstall leaves the other one" \
  bash -c "chroot '$r' sh '/tmp/$tdir/install.sh' --uninstall >/dev/null && [ ! -e '$r/opt/vmcuda' ] && [ -f '$r$other_driver' ]"
rm -f "$r$other_driver"
in_root ldconfig

echo "# reload and stop"
cp "$r/etc/vmcuda/host.toml" "$work/host.toml.orig"
printf '[[vm]]\nname = "broken"\ntcp = true\n' >>"$r/etc/vmcuda/host.toml"
out=$(unit_exec vmcuda-host.service ExecReload 2>&1) && rc=0 || rc=$?
check "reload refuses a broken configuration, saying why" \
  bash -c '[ "$1" != 0 ] && grep -q "needs a token" <<<"$2"' _ "$rc" "$out"
cp "$work/host.toml.orig" "$r/etc/vmcuda/host.toml"
check "the daemon keeps running through a failed reload" kill -0 "$daemon"
check "SIGTERM stops the daemon within 5 s" stops_on_term "$daemon"

echo "# vmcuda-vhost@vm1"
printf 'GUEST_CID=3\n' >"$r/etc/vmcuda/vhost/vm1.env"
python3 "$work/unit-exec.py" "$r" "$r/lib/systemd/system/vmcuda-vhost@.service" ExecStart vm1 >"$work/vhost.log" 2>&1 &
vhost=$!; pids+=("$vhost")
if wait_socket /run/vmcuda/vhost/vm1.sock "$vhost"; then
  ok "ExecStart of vmcuda-vhost@vm1: the device listens on /run/vmcuda/vhost/vm1.sock"
  expect_stat /run/vmcuda/vhost/vm1.sock "770 vmcuda:vmcuda-vmm"
  check "the device is VM vm1 with guest CID 3" grep -q 'vm=vm1 cid=3' "$work/vhost.log"
else
  bad "ExecStart of vmcuda-vhost@vm1"; indent <"$work/vhost.log"
fi
check "SIGTERM stops the vhost-user device within 5 s" stops_on_term "$vhost"
rm -f "$r/etc/vmcuda/vhost/vm1.env"

echo "# reinstall, disable, remove, purge"
echo "# a local edit" >>"$r/etc/vmcuda/host.toml"
in_root systemctl disable vmcuda-host.service >/dev/null 2>&1 || true
check "systemctl disable (offline) removed the enablement" test ! -e "$r$wants"
check "dpkg -i again (reinstall)" bash -c "chroot '$r' dpkg -i /tmp/host.deb >/dev/null 2>&1"
check "the edited conffile is kept" grep -q "^# a local edit$" "$r/etc/vmcuda/host.toml"
expect_stat /etc/vmcuda/host.toml "640 root:vmcuda"
check "the administrator's disable is kept" test ! -e "$r$wants"
check "dpkg -r vmcuda-host" bash -c "chroot '$r' dpkg -r vmcuda-host >/dev/null 2>&1"
check "remove: the binaries are gone" test ! -e "$r/usr/bin/vmcuda-host" -a ! -e "$r/usr/bin/vmcuda-vhost-vsock"
check "remove: the units are gone" test ! -e "$r/lib/systemd/system/vmcuda-host.service"
check "remove: the configuration stays" test -f "$r/etc/vmcuda/host.toml"
check "dpkg -P vmcuda-host" bash -c "chroot '$r' dpkg -P vmcuda-host >/dev/null 2>&1"
check "purge: the configuration is gone" test ! -e "$r/etc/vmcuda/host.toml" -a ! -e "$r/etc/default/vmcuda-host"
check "purge: the state and run-time directories are gone" test ! -e "$r/var/lib/vmcuda" -a ! -e "$r/run/vmcuda"
check "purge: no enablement is left" bash -c "! ls '$r'/etc/systemd/system/*.wants/vmcuda-* >/dev/null 2>&1"

echo "install checks: $passed passed, $failed failed ($(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s)"
[ "$failed" = 0 ]
