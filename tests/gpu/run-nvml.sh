#!/usr/bin/env bash
# tests/gpu/run-nvml.sh [CARRY]: NVIDIA's NVML natively and the guest's NVML through
# vmcuda, in the same run, while a native process keeps the GPU busy:
#   - tests/gpu/nvml_check.py (pynvml, as nvitop and gpustat use it, and torch's NVML
#     calls), each side holding 256 MiB through torch: names, UUIDs, bus ids, compute
#     capabilities, memory, utilization under load, its own process listed, a state
#     change refused;
#   - tests/c/nvml_query (the C API, CARRY/nvml_query) against a daemon without a quota
#     and one with an 8 GiB quota.
# The bridged runs have the GPU hidden (hide-gpu.sh). pynvml comes from CARRY/py (the
# nvidia-ml-py wheel's pynvml.py, which carry.sh fetches). Writes $OUT/RESULTS-NVML.md.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry="$(cd "${1:-.carry/gpu}" && pwd)" || exit 2
host_bin="$carry/bin/vmcuda-host"
guest_lib="$carry/guest/lib"
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
out="${OUT:-build/gpu-results}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
raw="$(mktemp -d)"
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
real_cudart=/usr/local/cuda/lib64
preload=""
for l in libcuda.so.1; do
    preload="${preload:+$preload:}$guest_lib/$l"
done
pids=()
start() { # name config-text
    printf '%b' "$2" >"$raw/$1.toml"
    rm -f "/tmp/vmcuda-nvml-$1.sock"
    "$host_bin" serve --unix "/tmp/vmcuda-nvml-$1.sock" --executor cuda --config "$raw/$1.toml" --state-dir "$raw/$1-state" \
        --state-dir "$raw/state-$1" >"$raw/$1.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do [ -S "/tmp/vmcuda-nvml-$1.sock" ] && return; sleep 0.1; done
}
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
start plain '[local]\n'
start quota '[local]\nmemory_quota = "8GiB"\n'

# A native process keeps GPU 0 busy for the whole comparison.
"$py" -c '
import time, torch
a = torch.randn(8192, 8192, device="cuda")
end = time.time() + 60
while time.time() < end:
    for _ in range(20): a = torch.tanh(a @ a)
    torch.cuda.synchronize()
' >"$raw/busy.log" 2>&1 &
busy=$!
sleep 4
export PYTHONPATH="$carry/py"
timeout 120 "$py" tests/gpu/nvml_check.py --hold 256 >"$raw/py.native.json" 2>"$raw/py.native.err"
echo "native pynvml rc $?" >>"$raw/rc"
${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$preload" LD_LIBRARY_PATH="$guest_lib:$real_cudart" \
    VMCUDA_SERVER=unix:/tmp/vmcuda-nvml-plain.sock PYTHONPATH="$carry/py" \
    timeout 120 "$py" tests/gpu/nvml_check.py --hold 256 >"$raw/py.bridged.json" 2>"$raw/py.bridged.err"
echo "bridged pynvml rc $?" >>"$raw/rc"
env LD_LIBRARY_PATH="$real_cudart" timeout 60 "$carry/nvml_query" 256 >"$raw/c.native.out" 2>&1
for d in plain quota; do
    ${isolate[@]+"${isolate[@]}"} env LD_LIBRARY_PATH="$guest_lib:$real_cudart" VMCUDA_SERVER="unix:/tmp/vmcuda-nvml-$d.sock" \
        timeout 60 "$carry/nvml_query" 256 >"$raw/c.bridged-$d.out" 2>&1
done
kill "$busy" 2>/dev/null; wait "$busy" 2>/dev/null

"$py" - "$raw" "$(cat "$carry/COMMIT" 2>/dev/null)" "$isolation" >"$out/RESULTS-NVML.md" <<'PY'
import json, sys, os, datetime, subprocess
raw, commit, isolation = sys.argv[1:]
def load(n):
    try: return json.load(open(os.path.join(raw, n)))
    except Exception as e: return {"error": str(e), "devices": []}
def text(n):
    try: return open(os.path.join(raw, n)).read()
    except Exception: return ""
n, b = load("py.native.json"), load("py.bridged.json")
gpus = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip().replace("\n", "; ")
print("# NVML: NVIDIA's natively, the guest's through vmcuda, same run\n")
print(f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}")
print(f"- commit: {commit}")
print("- command: `tests/gpu/run-nvml.sh CARRY`")
print(f"- GPUs: {gpus}")
print(f"- bridged process isolation: {isolation}")
print("- load: a native torch process keeps GPU 0 busy throughout; each side holds 256 MiB through torch\n")
print("## pynvml (nvidia-ml-py, as nvitop and gpustat use it) and torch's NVML calls\n")
print("| field | native | bridged | agree |\n| --- | --- | --- | --- |")
nd = (n.get("devices") or [{}])[0]; bd = (b.get("devices") or [{}])[0]
def row(k, nv, bv, ok):
    print(f"| {k} | {nv} | {bv} | {'yes' if ok else '**no**'} |")
row("device count", len(n.get("devices", [])), len(b.get("devices", [])), len(n.get("devices", [])) == len(b.get("devices", [])))
for k in ["name", "uuid", "bus", "cc", "total_mib"]:
    row(k, nd.get(k), bd.get(k), nd.get(k) == bd.get(k) and k in nd)
row("used_mib (bridged: this guest's own; native: every process on the GPU)", nd.get("used_mib"), bd.get("used_mib"),
    bd.get("used_mib") is not None and nd.get("used_mib") is not None and 256 <= bd.get("used_mib") <= nd.get("used_mib"))
row("utilization under load, max of 5 samples (%)", nd.get("utilization_max"), bd.get("utilization_max"),
    (nd.get("utilization_max") or 0) > 50 and (bd.get("utilization_max") or 0) > 50)
row("own process listed", nd.get("own_process_listed"), bd.get("own_process_listed"), nd.get("own_process_listed") and bd.get("own_process_listed"))
row("own process memory (MiB)", nd.get("own_process_mib"), bd.get("own_process_mib"), (bd.get("own_process_mib") or 0) >= 256)
row("set power limit", nd.get("set_power_limit"), bd.get("set_power_limit"), "Permission" in str(bd.get("set_power_limit")))
for k in ["torch_utilization", "torch_memory_usage", "torch_gpu_processes"]:
    row(k, n.get(k), b.get(k), b.get(k) is not None and (k != "torch_utilization" or (b.get(k) or 0) > 50))
if n.get("error") or b.get("error"):
    print(f"\nerrors: native {n.get('error')}; bridged {b.get('error')}")
    print("```\n" + text("py.bridged.err")[-3000:] + "\n```")
print("\n## The C API (tests/c/nvml_query 256)\n")
for name in ["c.native.out", "c.bridged-plain.out", "c.bridged-quota.out"]:
    print(f"{name.replace('.out','')}:\n```\n{text(name).strip()}\n```")
PY
tar -C "$raw" -czf "$out/nvml-raw.tar.gz" . 2>/dev/null
cat "$out/RESULTS-NVML.md"
