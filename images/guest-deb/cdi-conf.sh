# shellcheck shell=sh
# vmcuda's CDI spec, /etc/cdi/vmcuda.json: containers in this guest started with
# `--device vmcuda.dev/gpu=all` (Podman, Docker with CDI on) get vmcuda's libraries and
# vmcuda-run's environment. Written by PREFIX/bin/vmcuda (`vmcuda cdi generate`) from
# the files as they are (the token, server and CA files it mounts), with none of the
# installing user's variables. Harmless where no container runtime is installed: only
# runtimes read it.
#
# Shared by the guest package's maintainer scripts (images/guest-deb/build.sh pastes it
# in) and the tarball's install.sh (which sources it). POSIX sh; only functions and
# variables named vmcuda_*. Uses vmcuda_driver_say (driver-conf.sh) for messages.
#
# One installation's spec at a time: that of the PREFIX it names, kept unless that
# installation is gone (its PREFIX/lib has no libcuda.so.1 any more).

vmcuda_cdi_spec=/etc/cdi/vmcuda.json

# The library directory the spec names (its LD_LIBRARY_PATH), or nothing.
vmcuda_cdi_listed() {
  if [ -f "$vmcuda_cdi_spec" ]; then
    sed -n 's/.*"LD_LIBRARY_PATH=\([^"]*\)".*/\1/p' "$vmcuda_cdi_spec" | head -n 1
  fi
}

# vmcuda_cdi_register PREFIX: writes the spec for PREFIX. Status 0 when written; 1 when
# left alone, saying why on stderr.
vmcuda_cdi_register() {
  if [ ! -x "$1/bin/vmcuda" ]; then
    vmcuda_driver_say "no $1/bin/vmcuda in this build: no CDI spec for containers"
    return 1
  fi
  vmcuda_cdi_lib=$(vmcuda_cdi_listed)
  if [ -n "$vmcuda_cdi_lib" ] && [ "$vmcuda_cdi_lib" != "$1/lib" ] &&
    [ -e "$vmcuda_cdi_lib/libcuda.so.1" ]; then
    vmcuda_driver_say "$vmcuda_cdi_spec is for $vmcuda_cdi_lib (another vmcuda installation's); left as is"
    return 1
  fi
  if ! env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$1/bin/vmcuda" cdi generate \
    --lib-dir "$1/lib" --output "$vmcuda_cdi_spec" 2>/dev/null; then
    vmcuda_driver_say "could not write $vmcuda_cdi_spec (run as root): containers get no vmcuda device; \"vmcuda cdi generate --output $vmcuda_cdi_spec\" writes it"
    return 1
  fi
  return 0
}

# vmcuda_cdi_unregister PREFIX: removes the spec if it is PREFIX's (another
# installation's stays).
vmcuda_cdi_unregister() {
  if [ "$(vmcuda_cdi_listed)" = "$1/lib" ]; then
    rm -f "$vmcuda_cdi_spec"
  fi
  return 0
}
