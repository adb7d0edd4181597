# shellcheck shell=sh
# vmcuda's libcuda.so.1 as the machine's CUDA driver: a file in /etc/ld.so.conf.d names
# PREFIX/driver, which holds libcuda.so.1 (a link into PREFIX/lib) and nothing of the
# runtime, and ldconfig puts it in the dynamic loader's cache. Programs that load
# libcuda.so.1 themselves (NVIDIA's runtime linked in statically, driver-API programs,
# containers) then find it without vmcuda-run. vmcuda's libcuda.so.1 needs no other
# vmcuda library, so nothing else becomes system-wide.
#
# Shared by the guest package's maintainer scripts (images/guest-deb/build.sh pastes it
# in) and the tarball's install.sh (which sources it). POSIX sh; only functions and
# variables named vmcuda_*.
#
# Never over another driver: when the loader's cache already has a libcuda.so.1 from
# outside PREFIX (NVIDIA's, for a GPU passed through to this VM), nothing is written and
# a warning says so. The file's name sorts after the distribution's own
# (x86_64-linux-gnu.conf names /usr/lib/x86_64-linux-gnu, where NVIDIA's packages and
# the container toolkit put libcuda.so.1), and the cache hands out the library of the
# directory listed first: a driver installed later still wins.

vmcuda_driver_conf=/etc/ld.so.conf.d/zz-vmcuda-driver.conf
vmcuda_driver_who=${vmcuda_driver_who:-vmcuda}

vmcuda_driver_say() { printf '%s: %s\n' "$vmcuda_driver_who" "$*" >&2; }

# The ldconfig command (root's PATH has it; a plain user's may not).
vmcuda_ldconfig() {
  for vmcuda_c in "$(command -v ldconfig 2>/dev/null || true)" /sbin/ldconfig /usr/sbin/ldconfig; do
    if [ -n "$vmcuda_c" ] && [ -x "$vmcuda_c" ]; then
      printf '%s\n' "$vmcuda_c"
      return 0
    fi
  done
  return 1
}

# The directory the driver file lists, or nothing.
vmcuda_driver_listed() {
  if [ -f "$vmcuda_driver_conf" ]; then grep -v '^#' "$vmcuda_driver_conf" | head -n 1; fi
}

# vmcuda_driver_register PREFIX: makes PREFIX/driver/libcuda.so.1 the loader's
# libcuda.so.1. Status 0 when done; 1 when left alone, saying why on stderr (then the
# driver is reached through vmcuda-run only).
vmcuda_driver_register() {
  vmcuda_dir="$1/driver"
  if ! vmcuda_ldc=$(vmcuda_ldconfig); then
    vmcuda_driver_say "no ldconfig on this machine: vmcuda's libcuda.so.1 is not made system-wide (use vmcuda-run)"
    return 1
  fi
  vmcuda_listed=$(vmcuda_driver_listed)
  if [ -n "$vmcuda_listed" ] && [ "$vmcuda_listed" != "$vmcuda_dir" ]; then
    vmcuda_driver_say "$vmcuda_driver_conf lists $vmcuda_listed (another vmcuda installation's driver); left as is"
    return 1
  fi
  # A libcuda.so.1 outside PREFIX (the cache may also list PREFIX/driver from an earlier
  # install, and PREFIX/lib in the system-wide mode: those are this one).
  vmcuda_other=$("$vmcuda_ldc" -p 2>/dev/null |
    awk -v p="$1/" '$1 == "libcuda.so.1" && index($NF, p) != 1 { print $NF; exit }')
  if [ -n "$vmcuda_other" ]; then
    vmcuda_driver_say "WARNING: the loader already finds libcuda.so.1 at $vmcuda_other (an NVIDIA driver, or another vmcuda installation's): vmcuda's is not made system-wide, and programs reach vmcuda through vmcuda-run only"
    if [ -n "$vmcuda_listed" ]; then
      # This installation's, from before that driver came: step aside.
      rm -f "$vmcuda_driver_conf" && "$vmcuda_ldc" || vmcuda_driver_say "could not remove $vmcuda_driver_conf"
    fi
    return 1
  fi
  if ! mkdir -p "${vmcuda_driver_conf%/*}" || ! {
    printf '# vmcuda'"'"'s CUDA driver (libcuda.so.1 only), written when it was installed.\n'
    printf '# Removing vmcuda removes this file.\n'
    printf '%s\n' "$vmcuda_dir"
  } >"$vmcuda_driver_conf.tmp" || ! mv -f "$vmcuda_driver_conf.tmp" "$vmcuda_driver_conf"; then
    rm -f "$vmcuda_driver_conf.tmp"
    vmcuda_driver_say "cannot write $vmcuda_driver_conf (run as root): vmcuda's libcuda.so.1 is not made system-wide"
    return 1
  fi
  if ! "$vmcuda_ldc"; then
    vmcuda_driver_say "ldconfig failed: run it once more for $vmcuda_driver_conf to take effect"
    return 1
  fi
  return 0
}

# vmcuda_driver_unregister PREFIX: removes the driver file if it lists PREFIX/driver (an
# other installation's stays) and rebuilds the loader's cache.
vmcuda_driver_unregister() {
  if [ "$(vmcuda_driver_listed)" = "$1/driver" ]; then
    rm -f "$vmcuda_driver_conf"
    if vmcuda_ldc=$(vmcuda_ldconfig); then
      "$vmcuda_ldc" || vmcuda_driver_say "ldconfig failed: run it once more"
    fi
  fi
  return 0
}
