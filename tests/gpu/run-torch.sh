#!/usr/bin/env bash
# tests/gpu/run-torch.sh: the stock torch wheel natively and through vmcuda, on a GPU
# machine, in the same run (tests/gpu/torch_check.py does the checks).
#
#   VMCUDA_HOST_BIN   host daemon            (default build/bin/vmcuda-host)
#   VMCUDA_GUEST_LIB  the guest libraries    (default build/guest/lib)
#   VMCUDA_TORCH_PYTHON  python with torch   (default /opt/torch/.venv/bin/python)
#   VMCUDA_TORCH_STEPS   MLP steps (default 60); VMCUDA_TORCH_OPINFO: OpInfo ops (default 0)
#   VMCUDA_COMMIT_FILE   file holding the commit (default: git rev-parse HEAD)
#
# The bridged run loads the guest libraries with LD_PRELOAD (torch's DT_RPATH would
# otherwise win over LD_LIBRARY_PATH), exactly as guest-lib/vmcuda-run does, and must
# map no real libcuda.so.1 and open no /dev/nvidia* file: everything goes to the host.
# PASS when both runs pass every check and their stdout (check lines, MLP losses as
# exact floats, GPU random-number sums) is identical. Results: $OUT/RESULTS-TORCH.md
# (the Markdown also goes to stdout, last), raw outputs as $OUT/torch-raw.tar.gz.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
host_bin="${VMCUDA_HOST_BIN:-build/bin/vmcuda-host}"
guest_lib="$(cd "${VMCUDA_GUEST_LIB:-build/guest/lib}" && pwd)" || exit 2
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
steps="${VMCUDA_TORCH_STEPS:-60}"
opinfo="${VMCUDA_TORCH_OPINFO:-0}"
timeout_s="${VMCUDA_TORCH_TIMEOUT:-420}"
out="${OUT:-build/gpu-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
raw="$(mktemp -d)"
sock=/tmp/vmcuda-torch.sock
commit="$(cat "${VMCUDA_COMMIT_FILE:-/dev/null}" 2>/dev/null || true)"
[ -n "$commit" ] || commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"

preload=""
for l in libcuda.so.1; do
    [ -e "$guest_lib/$l" ] && preload="${preload:+$preload:}$guest_lib/$l"
done

rm -f "$sock"
"$host_bin" serve --unix "$sock" --executor cuda --state-dir "$raw/state" >"$raw/host.log" 2>&1 &
host_pid=$!
trap 'kill $host_pid 2>/dev/null; wait $host_pid 2>/dev/null; rm -f $sock' EXIT
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done

# The bridged run sees this machine as a VM guest does: in its own mount namespace the
# GPU device files and the host's driver libraries (libcuda.so.1, NVML) are /dev/null,
# so nothing in it can reach the GPU but through the bridge. Needs root (the GPU
# machine's runs are); elsewhere the bridged run goes without, and says so.
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"

t0=$(date +%s)
env -u VMCUDA_SERVER timeout -k 10 "$timeout_s" "$py" tests/gpu/torch_check.py --json "$raw/native.json" \
    --steps "$steps" --opinfo "$opinfo" >"$raw/native.stdout" 2>"$raw/native.stderr"
native_rc=$?
t1=$(date +%s)
${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$preload" LD_LIBRARY_PATH="$guest_lib" VMCUDA_SERVER="unix:$sock" \
    timeout -k 10 "$timeout_s" "$py" tests/gpu/torch_check.py --json "$raw/bridged.json" \
    --steps "$steps" --opinfo "$opinfo" >"$raw/bridged.stdout" 2>"$raw/bridged.stderr"
bridged_rc=$?
t2=$(date +%s)

same=no
cmp -s "$raw/native.stdout" "$raw/bridged.stdout" && same=yes
diff "$raw/native.stdout" "$raw/bridged.stdout" >"$raw/stdout.diff"
connected=$(grep -c 'guest connected' "$raw/host.log" || true)

"$py" - "$raw" "$native_rc" "$bridged_rc" "$same" "$connected" "$commit" "$((t1 - t0))" "$((t2 - t1))" \
    "$steps" "$opinfo" "$isolation" >"$out/RESULTS-TORCH.md" <<'EOF'
import json, sys, os, datetime
raw, nrc, brc, same, conn, commit, nt, bt, steps, opinfo, isolation = sys.argv[1:]
def load(m):
    try:
        return json.load(open(os.path.join(raw, m + ".json")))
    except Exception as e:
        return {"checks": {}, "timings": {}, "error": str(e)}
n, b = load("native"), load("bridged")
print("# torch through vmcuda: the stock wheel natively and bridged, same run\n")
print(f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}")
print(f"- commit: {commit}")
print(f"- command: `tests/gpu/run-torch.sh` (VMCUDA_TORCH_STEPS={steps}, VMCUDA_TORCH_OPINFO={opinfo})")
print(f"- torch: {n.get('torch')} natively, {b.get('torch')} bridged (the same wheel, unmodified)")
print(f"- bridged: LD_PRELOAD of the guest libraries, vmcuda-host (CUDA executor) on a Unix socket; "
      f"guest connections seen by the host: {conn}")
print(f"- bridged process isolation: {isolation}")
print(f"- libcuda / NVIDIA device files mapped by the bridged process: {b.get('driver_libraries')} / {b.get('nvidia_device_fds')}")
print(f"- exit status: native {nrc}, bridged {brc}; stdout identical (check lines, exact losses, GPU random sums): **{same}**")
print(f"- wall time: native {nt} s, bridged {bt} s\n")
print("| check | native | bridged |\n| --- | --- | --- |")
for name in n.get("checks", {}) | b.get("checks", {}):
    print(f"| {name} | {n['checks'].get(name, '-')} | {b['checks'].get(name, '-')} |")
nt_, bt_ = n.get("timings", {}), b.get("timings", {})
if "mlp_step_s_median" in nt_ and "mlp_step_s_median" in bt_:
    r = bt_["mlp_step_s_median"] / nt_["mlp_step_s_median"]
    print(f"\nMLP step time (median after 5 warm-up steps; Adam, 3 Linear layers, batch 512): "
          f"native {nt_['mlp_step_s_median']*1e3:.3f} ms, bridged {bt_['mlp_step_s_median']*1e3:.3f} ms, ratio **{r:.2f}x**")
if "opinfo" in n or "opinfo" in b:
    def cnt(r):
        o = r.get("opinfo", {})
        return {k: len(v) for k, v in o.items()}
    print(f"\ntorch OpInfo sweep (first {opinfo} ops of op_db, float32 samples, CUDA vs CPU): native {cnt(n)}, bridged {cnt(b)}")
    nf = set(n.get("opinfo", {}).get("passed", [])) - set(b.get("opinfo", {}).get("passed", []))
    if nf:
        print(f"passing natively but not bridged: {sorted(nf)}")
print(f"\ncuDNN (NVIDIA's, on the guest driver): native: {n.get('cudnn')}; bridged: {b.get('cudnn')}")
EOF
if [ -s "$raw/stdout.diff" ]; then
    { echo; echo "stdout differences (native <, bridged >):"; echo '```diff'; head -40 "$raw/stdout.diff"; echo '```'; } >>"$out/RESULTS-TORCH.md"
fi
# Nothing may reach the GPU around the bridge: no libcuda.so.1 but the guest's, no
# /dev/nvidia* mapping or descriptor in the bridged process.
bypass=$("$py" -c 'import json,sys; b=json.load(open(sys.argv[1])); g=sys.argv[2]
print(" ".join([l for l in b.get("driver_libraries",[]) if not l.startswith(g)] + b.get("nvidia_device_fds",[])))' \
    "$raw/bridged.json" "$guest_lib" 2>/dev/null || echo "unknown (no bridged.json)")
echo "- reached the GPU around the bridge: ${bypass:-nothing}" >>"$out/RESULTS-TORCH.md"
tar -C "$raw" -czf "$out/torch-raw.tar.gz" . 2>/dev/null
cat "$out/RESULTS-TORCH.md"
[ "$native_rc" = 0 ] && [ "$bridged_rc" = 0 ] && [ "$same" = yes ] && [ -z "$bypass" ]
