#!/usr/bin/env bash
# On the GPU machine: the test programs inside a QEMU guest (TCG), through the project's
# vhost-user vsock device, against the real GPU (CUDA executor); and the same programs
# natively on the host, in the same run. Compares stdout, stderr (less vmcuda's own
# lines) and exit codes per program, and writes RESULTS-VM.md.
#
#   tests/gpu/run-vm.sh CARRYDIR
#
# CARRYDIR (prepared on the build machine):
#   qemu.tar.gz       tests/vm/pack-qemu.sh DIR --tar CARRYDIR/qemu.tar.gz
#   image/            images/build-guest.sh CARRYDIR/image --guest-lib ... --apps CARRYDIR/apps
#   apps/             tests/apps/build.sh CARRYDIR/apps
#   bin/              release vmcuda-host and vmcuda-vhost-vsock
#   COMMIT            the commit the artifacts were built from
# VMCUDA_VM_APPEND: more guest kernel command line (images/guest/init's options), e.g.
# "vmcuda.user=1 vmcuda.broker=1" to run the programs as an unprivileged user with the
# guest's RAM broker (the image then needs --cli-bin).
# Results go to $OUT (or build/gpu-vm-results): RESULTS-VM.md, results.tar.gz (every
# stream of every run), vhost.log, console.log.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 2
carry=$(cd "${1:?usage: run-vm.sh CARRYDIR}" && pwd)
out=${OUT:-$repo/build/gpu-vm-results}
work=$(mktemp -d)
mkdir -p "$out" "$work/qemu" "$work/native" "$work/guest"
tar -xzf "$carry/qemu.tar.gz" -C "$work/qemu"
qemu=$(find "$work/qemu" -maxdepth 2 -name qemu -type f | head -n 1)
[ -x "$qemu" ] || { echo "run-vm.sh: no qemu wrapper in the pack" >&2; exit 2; }
real_cudart=${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}
apps=$(ls "$carry/apps")

# Known, explained differences: shown as such, never counted as passes.
declare -A known=(
  [zero_copy]="kernels on pinned guest memory need the shared-memory data path (guest RAM through the device); over vsock pinned memory stays private"
  [pointer_mem]="cudaHostGetDevicePointer needs the same shared-memory data path"
  [driver_library]="compiles its kernels with NVRTC, a toolkit library the test guest does not carry"
  [runtime_rest]="compiles a library with NVRTC, a toolkit library the test guest does not carry"
)

# Programs whose guest run differs from the native one by design, as in run.sh: the
# native run must pass and the guest's stderr hold the text, its stdout the line.
declare -A expected_guest_stderr=()
declare -A expected_guest_stdout=()

echo "== native runs"
for app in $apps; do
  env LD_LIBRARY_PATH="$real_cudart" timeout -k 5 120 "$carry/apps/$app" \
    >"$work/native/$app.stdout" 2>"$work/native/$app.stderr" </dev/null
  echo $? >"$work/native/$app.rc"
done

echo "== guest runs (QEMU TCG, vhost-user vsock device, CUDA executor)"
start=$(date +%s)
bash tests/vm/run-guest.sh --mode vhost-user --executor cuda --qemu "$qemu" \
  --kernel "$carry/image/vmlinuz" --initrd "$carry/image/initramfs.cpio.gz" \
  --host-bin "$carry/bin/vmcuda-host" --vhost-bin "$carry/bin/vmcuda-vhost-vsock" \
  --out "$work/guest" --timeout 480 --app-timeout 120 ${VMCUDA_VM_APPEND:+--append "$VMCUDA_VM_APPEND"} \
  >"$work/run-guest.log" 2>&1
guest_status=$?
guest_secs=$(( $(date +%s) - start ))

pass=0; total=0; rows=""
for app in $apps; do
  total=$((total + 1))
  n="$work/native/$app"; g="$work/guest/$app"
  nrc=$(cat "$n.rc"); grc=$(cat "$g.rc" 2>/dev/null || echo missing)
  so=same; cmp -s "$n.stdout" "$g.stdout" || so=DIFF
  se=same; cmp -s <(grep -v '^vmcuda:' "$n.stderr") <(grep -v '^vmcuda:' "$g.stderr" 2>/dev/null) || se=DIFF
  if [ -n "${expected_guest_stderr[$app]:-}" ]; then
    so=expected; se=expected
    if [ "$nrc" = 0 ] && grep -qF -- "${expected_guest_stderr[$app]}" "$g.stderr" 2>/dev/null &&
      grep -qxF -- "${expected_guest_stdout[$app]}" "$g.stdout" 2>/dev/null; then
      result=PASS; pass=$((pass + 1))
    else
      result=FAIL
    fi
  elif [ "$so" = same ] && [ "$se" = same ] && [ "$nrc" = "$grc" ]; then
    result=PASS; pass=$((pass + 1))
  elif [ -n "${known[$app]:-}" ]; then
    result="DIFF (known: ${known[$app]})"
  else
    result=FAIL
  fi
  rows+="| $app | $nrc | $grc | $so | $se | $result |"$'\n'
done

{
  echo "# vmcuda in a VM on the GPU: guest (QEMU TCG + vhost-user vsock device) vs native"
  echo
  echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
  echo "- commit: $(cat "$carry/COMMIT" 2>/dev/null || echo unknown)"
  echo "- command: \`tests/gpu/run-vm.sh $1\`"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  echo "- guest: $(grep -a 'GUEST-BOOT' "$work/guest/console.log" | head -n 1 | tr -d '\r' | sed 's/^=== VMCUDA-//')"
  echo "- QEMU: $("$qemu" --version | head -n 1), TCG, guest run $guest_status, ${guest_secs}s"
  echo "- result: $pass/$total programs pass: identical to native"
  # The guest's programs run as root with huge pages: their copies should go through
  # guest RAM (the device's workers map it), not the socket.
  echo "- data path through guest RAM (workers that said so in vhost.log): $(grep -c 'copies use the shared-memory data path.*guest_pages=true' "$work/guest/vhost.log" 2>/dev/null || echo 0) of $(grep -c 'worker{.*guest connected' "$work/guest/vhost.log" 2>/dev/null || echo 0) connections"
  echo "- command ring in guest RAM: $(grep -c 'calls travel through the command ring.*guest_pages=true' "$work/guest/vhost.log" 2>/dev/null || echo 0) connections; guest page grants from the guest's RAM broker: $(grep -c 'guest page grant' "$work/guest/vhost.log" 2>/dev/null || echo 0)"
  echo "- guest command line added: ${VMCUDA_VM_APPEND:-none}"
  echo
  echo "| program | native exit | guest exit | stdout | stderr | result |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s' "$rows"
} >"$out/RESULTS-VM.md"
cp "$work/guest/vhost.log" "$work/guest/console.log" "$out/" 2>/dev/null
tar -czf "$out/results.tar.gz" -C "$work" native guest run-guest.log
cat "$out/RESULTS-VM.md"
