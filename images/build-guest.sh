#!/usr/bin/env bash
# Builds the minimal test guest: a Debian 12 cloud kernel and a busybox initramfs that
# runs CUDA test programs against the vmcuda guest library and prints their results
# on the serial console (see images/README.md for the console protocol).
#
#   images/build-guest.sh OUTDIR [--guest-lib DIR | --guest-deb FILE] [--apps DIR] [--host-bin FILE]
#                         [--cudart DIR] [--cache DIR]
#
# OUTDIR receives vmlinuz, initramfs.cpio.gz and manifest.txt (what went in).
#   --guest-lib DIR  the guest library dir (libcuda.so.1, libnvidia-ml.so.1), copied to
#                    /opt/vmcuda/lib
#   --guest-deb FILE the guest package (images/guest-deb/build.sh) instead: its files are
#                    unpacked into the image as dpkg would install them (the guest boots
#                    with vmcuda.launcher=vmcuda-run to run the programs through it)
#   --apps DIR       CUDA programs (executable files), copied to /opt/vmcuda/apps
#   --extra-apps DIR more programs for /opt/vmcuda/apps, run only when named
#                    (vmcuda.apps=...): the tests' own (suspend_steps)
#   --host-bin FILE  vmcuda-host, copied to /opt/vmcuda/bin: lets the guest serve itself
#                    over AF_VSOCK + vsock_loopback (tests the AF_VSOCK listener)
#   --cli-bin FILE   the guest's `vmcuda` command, copied to /opt/vmcuda/bin: its
#                    guest-ram-broker serves guest RAM to unprivileged programs
#                    (vmcuda.broker=1)
#   --cudart DIR     where NVIDIA's libcudart.so.13 is, for the programs built with
#                    `-cudart shared` (default: the nvcc wheels' lib/, from
#                    .ci/install-nvcc.sh): copied to /lib/x86_64-linux-gnu, where a
#                    distribution's CUDA runtime would be (redistributable; the image is
#                    built, never committed)
#   --cache DIR      where the .deb files are kept (default: $VMCUDA_CACHE or
#                    $HOME/.cache/vmcuda/debs)
#
# Needs: apt-get (package lists present: `apt-get update` once), dpkg-deb, ldd,
# python3. No root needed: the initramfs is written by a small Python cpio writer, so
# file owners and the /dev/console node come out right without fakeroot.
# Idempotent: debs are downloaded once per version; the image is rebuilt from scratch
# into OUTDIR/.work and written byte-for-byte reproducibly.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" | grep -v shellcheck | sed 's/^# \{0,1\}//' >&2; exit 2; }

out=""; guest_lib=""; guest_deb=""; apps=""; extra_apps=""; host_bin=""; cli_bin=""; cudart=""; cache="${VMCUDA_CACHE:-${HOME:-/tmp}/.cache/vmcuda/debs}"
while [ $# -gt 0 ]; do
  case "$1" in
    --guest-lib) guest_lib=$2; shift 2 ;;
    --guest-deb) guest_deb=$2; shift 2 ;;
    --apps) apps=$2; shift 2 ;;
    --extra-apps) extra_apps=$2; shift 2 ;;
    --host-bin) host_bin=$2; shift 2 ;;
    --cli-bin) cli_bin=$2; shift 2 ;;
    --cudart) cudart=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "build-guest.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || usage; out=$1; shift ;;
  esac
done
[ -n "$out" ] || usage
for d in "$guest_lib" "$apps"; do
  [ -z "$d" ] || [ -d "$d" ] || { echo "build-guest.sh: no such directory: $d" >&2; exit 1; }
done
[ -z "$guest_deb" ] || [ -f "$guest_deb" ] || { echo "build-guest.sh: no such file: $guest_deb" >&2; exit 1; }
if [ -n "$guest_lib" ] && [ -n "$guest_deb" ]; then
  echo "build-guest.sh: --guest-lib and --guest-deb both install /opt/vmcuda/lib: give one" >&2; exit 2
fi
for tool in apt-get apt-cache dpkg-deb ldd objdump python3; do
  command -v "$tool" >/dev/null || { echo "build-guest.sh: needs $tool" >&2; exit 1; }
done

mkdir -p "$out" "$cache"
out=$(cd "$out" && pwd); cache=$(cd "$cache" && pwd)
log() { echo "build-guest.sh: $*" >&2; }

# --- 1. packages -------------------------------------------------------------------
# Prints the path of PKG's .deb in the cache, downloading the candidate version when
# it is not there yet. Without apt lists, falls back to whatever version is cached.
fetch_deb() {
  local pkg=$1 ver file
  ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | head -n1 || true)
  if [ -n "$ver" ]; then
    file="$cache/${pkg}_${ver//:/%3a}_amd64.deb"
    if [ ! -s "$file" ]; then
      log "downloading $pkg $ver"
      (cd "$cache" && apt-get download -q "$pkg=$ver" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2) || true
      [ -s "$file" ] || { log "apt-get download $pkg=$ver failed"; return 1; }
    fi
  else
    file=$(ls -1 "$cache/${pkg}"_*_amd64.deb 2>/dev/null | sort -V | tail -n1 || true)
    [ -n "$file" ] || { log "apt knows no $pkg and none is cached (run apt-get update)"; return 1; }
    log "apt knows no $pkg; using cached $(basename "$file")"
  fi
  echo "$file"
}

meta_deb=$(fetch_deb linux-image-cloud-amd64)
# The meta package depends on the versioned image package, which holds the kernel.
kpkg=$(dpkg-deb -f "$meta_deb" Depends | tr ',' '\n' | sed -n 's/^ *\(linux-image-[0-9][^ ]*-cloud-amd64\).*/\1/p' | head -n1)
[ -n "$kpkg" ] || { log "cannot find the kernel package in $(dpkg-deb -f "$meta_deb" Depends)"; exit 1; }
kernel_deb=$(fetch_deb "$kpkg")
busybox_deb=$(fetch_deb busybox-static)

work="$out/.work"
rm -rf "$work"
mkdir -p "$work/kernel" "$work/busybox"
log "extracting $(basename "$kernel_deb") and $(basename "$busybox_deb")"
dpkg-deb -x "$kernel_deb" "$work/kernel"
dpkg-deb -x "$busybox_deb" "$work/busybox"

kver=$(ls -1 "$work/kernel/lib/modules" | head -n1)
[ -n "$kver" ] || { log "no lib/modules in $kernel_deb"; exit 1; }
cp -f "$work/kernel/boot/vmlinuz-$kver" "$out/vmlinuz.tmp" && mv -f "$out/vmlinuz.tmp" "$out/vmlinuz"

# --- 2. root file system -------------------------------------------------------------
root="$work/root"
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,run,etc,root,lib/modules,lib64,lib/x86_64-linux-gnu,opt/vmcuda/lib,opt/vmcuda/apps}
mkdir -p "$root/usr"
for d in bin sbin lib lib64; do ln -s "../$d" "$root/usr/$d"; done

cp "$work/busybox/bin/busybox" "$root/bin/busybox"
applets="sh ash cat cp mv rm ls ln mkdir rmdir echo printf test [ sleep sed awk grep tr cut head tail wc od
  mount umount insmod lsmod modinfo ip ifconfig route ping nc poweroff reboot halt dmesg uname env timeout
  date stty sync free ps kill find xargs tee hexdump seq true false expr id hostname basename dirname
  readlink realpath which stat vi less more clear reset top chmod touch sort uniq du df"
for a in $applets; do ln -sf busybox "$root/bin/$a"; done
for a in poweroff reboot halt insmod ip ifconfig route; do ln -sf ../bin/busybox "$root/sbin/$a"; done

# Kernel modules: the roots below and what they depend on (read from each module's
# .modinfo section), in dependency order; anything built into the kernel is skipped.
python3 - "$work/kernel" "$kver" "$root/lib/modules" <<'PY'
import os, shutil, struct, subprocess, sys, lzma
kroot, kver, dest = sys.argv[1:4]
moddir = os.path.join(kroot, "lib/modules", kver, "kernel")
config = {}
for line in open(os.path.join(kroot, "boot", "config-" + kver)):
    if line.startswith("CONFIG_") and "=" in line:
        k, v = line.strip().split("=", 1); config[k] = v
# root module -> the CONFIG_ symbol that builds it
roots = [("virtio_pci", "CONFIG_VIRTIO_PCI"),
         ("virtio_net", "CONFIG_VIRTIO_NET"),
         ("vmw_vsock_virtio_transport", "CONFIG_VIRTIO_VSOCKETS"),
         ("vsock_loopback", "CONFIG_VSOCKETS_LOOPBACK"),
         # /sys/firmware/qemu_fw_cfg: options for /init from QEMU's -fw_cfg
         ("qemu_fw_cfg", "CONFIG_FW_CFG_SYSFS")]
files = {}
for d, _, fs in os.walk(moddir):
    for f in fs:
        for ext in (".ko", ".ko.xz", ".ko.zst", ".ko.gz"):
            if f.endswith(ext):
                files[f[: -len(ext)].replace("-", "_")] = os.path.join(d, f)
def load(path):
    data = open(path, "rb").read()
    if path.endswith(".xz"): return lzma.decompress(data)
    if path.endswith(".gz"):
        import gzip; return gzip.decompress(data)
    if path.endswith(".zst"):
        return subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout
    return data
def modinfo(elf):
    # ELF64 little endian: find the .modinfo section by name.
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    def sh(i): return struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize)
    stroff = sh(shstrndx)[4]
    for i in range(shnum):
        s = sh(i)
        name = elf[stroff + s[0]: elf.index(b"\0", stroff + s[0])].decode()
        if name == ".modinfo":
            raw = elf[s[4]: s[4] + s[5]]
            return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)
    return {}
order, seen, blobs = [], set(), {}
def visit(name, chain=()):
    name = name.replace("-", "_")
    if name in seen: return
    if name in chain: sys.exit(f"module dependency cycle at {name}")
    if name not in files: sys.exit(f"module {name} not found under {moddir}")
    blob = load(files[name]); info = modinfo(blob)
    for dep in filter(None, info.get("depends", "").split(",")):
        visit(dep, chain + (name,))
    seen.add(name); order.append(name); blobs[name] = blob
for name, sym in roots:
    v = config.get(sym)
    if v == "y": print(f"  {name}: built in ({sym}=y)", file=sys.stderr); continue
    if v != "m": sys.exit(f"{sym} is {v!r} in the kernel config: {name} unavailable")
    visit(name)
for name in order:
    with open(os.path.join(dest, name + ".ko"), "wb") as f: f.write(blobs[name])
with open(os.path.join(dest, "load-order"), "w") as f: f.write("\n".join(order) + "\n")
print("  modules: " + " ".join(order), file=sys.stderr)
PY

# Guest library and programs.
if [ -n "$guest_lib" ]; then
  cp -a "$guest_lib"/. "$root/opt/vmcuda/lib/"
  # Release builds carry debug info (~15 MB); the guest does not need it.
  if command -v strip >/dev/null; then
    find "$root/opt/vmcuda/lib" -type f -name '*.so*' -exec strip --strip-debug {} + 2>/dev/null || true
  fi
fi
if [ -n "$guest_deb" ]; then
  # As dpkg would unpack it; /usr/bin and friends are links to /bin here, kept as such.
  dpkg-deb --fsys-tarfile "$guest_deb" | tar -x -C "$root" --keep-directory-symlink --no-same-owner \
    --exclude='./usr/share/doc*'
  if command -v strip >/dev/null; then
    find "$root/opt/vmcuda" -type f -name '*.so*' -exec strip --strip-debug {} + 2>/dev/null || true
  fi
fi
for dir in "$apps" "$extra_apps"; do
  [ -n "$dir" ] || continue
  for f in "$dir"/*; do
    if [ -f "$f" ] && [ -x "$f" ]; then cp "$f" "$root/opt/vmcuda/apps/"; fi
  done
done

if [ -n "$host_bin" ]; then
  mkdir -p "$root/opt/vmcuda/bin"
  cp "$host_bin" "$root/opt/vmcuda/bin/vmcuda-host"
  command -v strip >/dev/null && strip --strip-debug "$root/opt/vmcuda/bin/vmcuda-host" 2>/dev/null || true
fi

if [ -n "$cli_bin" ]; then
  mkdir -p "$root/opt/vmcuda/bin"
  cp "$cli_bin" "$root/opt/vmcuda/bin/vmcuda"
  command -v strip >/dev/null && strip --strip-debug "$root/opt/vmcuda/bin/vmcuda" 2>/dev/null || true
fi

# Shared libraries the programs and the guest library need, resolved on this machine.
# The driver and NVML come from /opt/vmcuda/lib (LD_LIBRARY_PATH), never from here;
# NVIDIA's libcudart.so.13 from --cudart (below); cuBLAS, cuBLASLt and cuDNN are not
# carried (the programs that need them run on the GPU machine). NVRTC (135 MB) is not
# carried: with it the initramfs no longer unpacks in a 512 MiB guest, and the programs
# that compile kernels with it are not run in the test guest.
elfs=()
while IFS= read -r -d '' f; do
  if head -c 4 "$f" | grep -q 'ELF'; then elfs+=("$f"); fi
done < <(find "$root/opt/vmcuda" -type f -print0)
# NVIDIA's runtime, as it is, for the programs that NEED it (`-cudart shared`): on
# vmcuda's libcuda.so.1 it is the guest's CUDA runtime.
needs_cudart=""
for f in ${elfs[@]+"${elfs[@]}"}; do
  if objdump -p "$f" 2>/dev/null | awk '$1 == "NEEDED" { print $2 }' | grep -qx 'libcudart.so.13'; then
    needs_cudart=1
  fi
done
if [ -n "$needs_cudart" ]; then
  if [ -z "$cudart" ]; then
    cudart="$(bash "$here/../.ci/install-nvcc.sh" | tail -n 1)/lib"
  fi
  [ -f "$cudart/libcudart.so.13" ] || { echo "build-guest.sh: no NVIDIA libcudart.so.13 in $cudart (--cudart DIR)" >&2; exit 1; }
  cp -L "$cudart/libcudart.so.13" "$root/lib/x86_64-linux-gnu/libcudart.so.13"
  # Its own libraries (libdl, librt, ...) are resolved with the programs'.
  elfs+=("$root/lib/x86_64-linux-gnu/libcudart.so.13")
fi
declare -A libs=()
for f in ${elfs[@]+"${elfs[@]}"}; do
  while read -r line; do
    case "$line" in
      *libcudart.so*|*libcuda.so*|*libnvidia-ml.so*|*libcublas.so*|*libcublasLt.so*|*libcudnn.so*) continue ;;
      *libnvrtc*|*linux-vdso*|*"not a dynamic executable"*) continue ;;
      *"=> not found"*) log "warning: $(basename "$f"): ${line%% *} not found on this machine" ;;
      *"=> /"*) p=${line#*=> }; p=${p%% (*}; libs["${line%% *}"]=$p ;;
      /*) p=${line%% (*}; libs["$p"]=$p ;;   # the dynamic loader itself
    esac
  done < <(LD_LIBRARY_PATH="$root/opt/vmcuda/lib" ldd "$f" 2>/dev/null || true)
done
for name in "${!libs[@]}"; do
  src=${libs[$name]}
  case "$name" in
    /*) # the program interpreter, e.g. /lib64/ld-linux-x86-64.so.2
        mkdir -p "$root$(dirname "$name")"
        rm -f "$root$name"; cp -L "$src" "$root$name" ;;
    *)  cp -L "$src" "$root/lib/x86_64-linux-gnu/$name" ;;
  esac
done
if [ -e "$root/lib64/ld-linux-x86-64.so.2" ] && [ ! -e "$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ]; then
  ln -s /lib64/ld-linux-x86-64.so.2 "$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
fi
if command -v strip >/dev/null; then
  find "$root/lib/x86_64-linux-gnu" -type f -name '*.so*' ! -name 'libcudart.so.13' -exec strip --strip-unneeded {} + 2>/dev/null || true
fi

install -m 0755 "$here/guest/init" "$root/init"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
# For the console shell (vmcuda.shell=1).
cat >"$root/etc/profile" <<'EOF'
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root
PS1='vmcuda-guest:\w# '
EOF
cat >"$root/etc/motd" <<'EOF'

vmcuda guest shell (busybox; the root file system is in RAM; `exit` powers off).
  ls /opt/vmcuda/apps                       the CUDA programs in this image
  vmcuda-run /opt/vmcuda/apps/vector_add    run one through the bridge (or
                                            LD_LIBRARY_PATH=/opt/vmcuda/lib PROGRAM)
  vmcuda info, vmcuda doctor                the host's GPUs; what is wrong
VMCUDA_SERVER defaults to vsock:2:7731 (the host over virtio-vsock).
EOF

# --- 3. initramfs ----------------------------------------------------------------------
python3 - "$root" "$out/initramfs.cpio.gz.tmp" <<'PY'
import gzip, os, stat, sys
root, dest = sys.argv[1:3]
mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
entries = []
for d, dirs, files in os.walk(root):
    dirs.sort()
    for n in sorted(dirs + files):
        entries.append(os.path.relpath(os.path.join(d, n), root))
out = gzip.GzipFile(dest, "wb", compresslevel=9, mtime=0)
ino = [100]
def emit(name, mode, data=b"", rdev=(0, 0), nlink=1):
    ino[0] += 1
    nb = name.encode() + b"\0"
    hdr = "070701" + "".join("%08X" % v for v in (
        ino[0], mode, 0, 0, nlink, mtime, len(data), 0, 0, rdev[0], rdev[1], len(nb), 0))
    out.write(hdr.encode() + nb + b"\0" * ((-(110 + len(nb))) % 4))
    out.write(data + b"\0" * ((-len(data)) % 4))
emit("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1))
emit("dev/null", stat.S_IFCHR | 0o666, rdev=(1, 3))
for rel in entries:
    p = os.path.join(root, rel); st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode):
        emit(rel, stat.S_IFLNK | 0o777, os.readlink(p).encode())
    elif stat.S_ISDIR(st.st_mode):
        emit(rel, stat.S_IFDIR | (0o1777 if rel == "tmp" else 0o755), nlink=2)
    elif stat.S_ISREG(st.st_mode):
        perm = 0o755 if st.st_mode & 0o111 else 0o644
        emit(rel, stat.S_IFREG | perm, open(p, "rb").read())
emit("TRAILER!!!", 0)
out.close()
PY
mv -f "$out/initramfs.cpio.gz.tmp" "$out/initramfs.cpio.gz"

{
  echo "kernel: $(basename "$kernel_deb") ($kver)"
  echo "busybox: $(basename "$busybox_deb")"
  echo "modules (load order): $(tr '\n' ' ' <"$root/lib/modules/load-order")"
  echo "apps: $(ls "$root/opt/vmcuda/apps" | tr '\n' ' ')"
  echo "guest lib: $(ls "$root/opt/vmcuda/lib" | tr '\n' ' ')"
  [ -z "$guest_deb" ] || echo "guest package: $(basename "$guest_deb"): $(dpkg-deb -c "$guest_deb" | awk '$1 !~ /^d/ { print $6 }' | grep -v '/usr/share/doc/' | tr '\n' ' ')"
  echo "shared libs: $(cd "$root" && find lib lib64 -name '*.so*' | sort | tr '\n' ' ')"
  echo "initramfs: $(du -k "$out/initramfs.cpio.gz" | cut -f1) KiB gzipped, $(du -sk "$root" | cut -f1) KiB unpacked"
} >"$out/manifest.txt"
rm -rf "$work"
cat "$out/manifest.txt" >&2
log "wrote $out/vmlinuz and $out/initramfs.cpio.gz"
