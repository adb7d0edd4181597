#!/usr/bin/env bash
# tests/gpu/run-torch-libs.sh: NVIDIA's libraries under the stock torch wheel (cuDNN
# convolutions and attention, cuFFT, cuSOLVER, cuSPARSE, torch.compile and Triton) and
# CuPy, natively and over vmcuda's libcuda.so.1, in the same run.
#
#   VMCUDA_HOST_BIN, VMCUDA_GUEST_LIB, VMCUDA_TORCH_PYTHON, VMCUDA_COMMIT_FILE: as
#   run-torch.sh.
#
# The bridged run keeps torch's own CUDA runtime and libraries: only libcuda.so.1 is
# vmcuda's (LD_PRELOAD, and TRITON_LIBCUDA_PATH for Triton's launcher), in a mount
# namespace where the GPU's device files and the host's driver libraries are
# /dev/null. VMCUDA_TORCH_PRELOAD (names in the guest library directory, space-separated;
# default libcuda.so.1) preloads more of vmcuda's libraries: "libcudart.so.13
# libcublas.so.13 libcublasLt.so.13 libcuda.so.1" is vmcuda-run's set, where torch's
# runtime and cuBLAS are vmcuda's and NVIDIA's other libraries share its driver. Each check compares the GPU's result with the CPU itself; the harness
# then compares the two runs' numbers (losses of the training loops included).
# Results: $OUT/RESULTS-TORCH-LIBS.md, also printed last.
#
# The same harness runs other check scripts of the same command line (checklib.py):
# VMCUDA_CHECKS_SCRIPT (default tests/gpu/torch_libs_check.py) and VMCUDA_CHECKS_NAME
# (the results' name, default TORCH-LIBS); tests/gpu/run-jax.sh runs jax_check.py.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
host_bin="${VMCUDA_HOST_BIN:-build/bin/vmcuda-host}"
guest_lib="$(cd "${VMCUDA_GUEST_LIB:-build/guest/lib}" && pwd)" || exit 2
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
timeout_s="${VMCUDA_TORCH_TIMEOUT:-240}"
out="${OUT:-build/gpu-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
preload_names="${VMCUDA_TORCH_PRELOAD:-libcuda.so.1}"
preload=""
for name in $preload_names; do preload="${preload:+$preload:}$guest_lib/$name"; done
raw="$(mktemp -d)"
export VMCUDA_CHECKS_SCRIPT="${VMCUDA_CHECKS_SCRIPT:-tests/gpu/torch_libs_check.py}"
script=$VMCUDA_CHECKS_SCRIPT
name="${VMCUDA_CHECKS_NAME:-TORCH-LIBS}"
title="${VMCUDA_CHECKS_TITLE:-NVIDIA's libraries under torch and CuPy, over vmcuda's libcuda.so.1}"
sock=/tmp/vmcuda-checks-$$.sock
commit="$(cat "${VMCUDA_COMMIT_FILE:-/dev/null}" 2>/dev/null || true)"
[ -n "$commit" ] || commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"

rm -f "$sock"
"$host_bin" serve --unix "$sock" --executor cuda --state-dir "$raw/state" >"$raw/host.log" 2>&1 &
host_pid=$!
trap 'kill $host_pid 2>/dev/null; wait $host_pid 2>/dev/null; rm -f $sock' EXIT
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done

# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"

# Each check runs in a process of its own, natively and bridged: a check that crashes
# costs only itself. VMCUDA_TORCH_CHECKS names a subset.
checks="${VMCUDA_TORCH_CHECKS:-$("$py" "$script" --json /dev/null --list)}"
native_rc=0
bridged_rc=0
t0=$(date +%s)
for check in $checks; do
    env -u VMCUDA_SERVER timeout -k 10 "$timeout_s" "$py" "$script" --only "$check" \
        --json "$raw/native.json" >>"$raw/native.stdout" 2>>"$raw/native.stderr" || {
        native_rc=$?
        echo "$check: exit status $native_rc" >>"$raw/native.stdout"
    }
done
t1=$(date +%s)
for check in $checks; do
    echo "== $check" >>"$raw/bridged.stderr"
    # As vmcuda-run does: the driver's directory first on the library path as well as
    # preloaded, for a library that opens the driver by another name or path.
    ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$preload" TRITON_LIBCUDA_PATH="$guest_lib" \
        LD_LIBRARY_PATH="$guest_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        VMCUDA_SERVER="unix:$sock" timeout -k 10 "$timeout_s" "$py" "$script" --only "$check" \
        --json "$raw/bridged.json" >>"$raw/bridged.stdout" 2>>"$raw/bridged.stderr" || {
        rc=$?
        bridged_rc=$rc
        echo "$check: exit status $rc" >>"$raw/bridged.stdout"
    }
done
t2=$(date +%s)

"$py" - "$raw" "$native_rc" "$bridged_rc" "$commit" "$((t1 - t0))" "$((t2 - t1))" "$isolation" "$preload_names" "$name" "$title" \
    >"$out/RESULTS-$name.md" <<'PY'
import json, os, sys, datetime
raw, nrc, brc, commit, nt, bt, isolation, preloaded, name, title = sys.argv[1:]
def load(m):
    try:
        return json.load(open(os.path.join(raw, m + ".json")))
    except Exception as e:
        return {"checks": {}, "values": {}, "errors": {"run": str(e)}, "timings": {}}
n, b = load("native"), load("bridged")
# A check whose process died recorded nothing: say how it ended.
for which, m in (("native", n), ("bridged", b)):
    try:
        for line in open(os.path.join(raw, which + ".stdout")):
            name, _, rest = line.strip().partition(": exit status ")
            if rest and name not in m["checks"]:
                m["checks"][name] = f"died ({rest})"
    except OSError:
        pass
print(f"# {title}\n")
print(f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}")
print(f"- commit: {commit}")
script = os.environ.get("VMCUDA_CHECKS_SCRIPT", "tests/gpu/torch_libs_check.py")
print(f"- command: `VMCUDA_TORCH_PRELOAD='{preloaded}' VMCUDA_CHECKS_SCRIPT={script} tests/gpu/run-torch-libs.sh`")
print(f"- {n.get('framework', n.get('torch'))} on {n.get('device')}; bridged: vmcuda's {', '.join(preloaded.split())} "
      "preloaded (LD_PRELOAD), the framework's own copies of NVIDIA's libraries for the rest, "
      "vmcuda-host with the CUDA executor")
print(f"- bridged process isolation: {isolation}")
print(f"- exit status: native {nrc}, bridged {brc}; wall time: native {nt} s, bridged {bt} s\n")
print("| check | native | bridged | numbers agree | max relative difference |")
print("| --- | --- | --- | --- | --- |")
passed = 0
names = list(dict.fromkeys(list(n["checks"]) + list(b["checks"])))
for name in names:
    nv, bv = n["values"].get(name), b["values"].get(name)
    agree, worst = "-", "-"
    if nv is not None and bv is not None and len(nv) == len(bv):
        worst_v = max((abs(x - y) / max(abs(x), 1e-12) for x, y in zip(nv, bv)), default=0.0)
        agree = "yes" if worst_v <= 1e-4 else "NO"
        worst = f"{worst_v:.1e}"
    nc, bc = n["checks"].get(name, "-"), b["checks"].get(name, "-")
    if nc == "PASS" and bc == "PASS" and agree == "yes":
        passed += 1
    print(f"| {name} | {nc} | {bc} | {agree} | {worst} |")
print(f"\n**{passed}/{len(names)} checks pass in both runs with the same numbers.**")
for name, err in b.get("errors", {}).items():
    print(f"\n- bridged {name}: `{err[:300]}`")
for name, err in n.get("errors", {}).items():
    print(f"\n- native {name}: `{err[:300]}`")
nt_, bt_ = n.get("timings", {}), b.get("timings", {})
for k in nt_:
    if k in bt_:
        print(f"\n- {k}: native {nt_[k]:.3f} s, bridged {bt_[k]:.3f} s, ratio {bt_[k] / nt_[k]:.2f}x")
PY
grep -iv "warn" "$raw/bridged.stderr" | grep -i "vmcuda" | sort | uniq -c | sort -rn | head -20 >"$raw/vmcuda-lines.txt"
{ echo; echo "vmcuda's lines on the bridged run's stderr (counted):"; echo '```'; cat "$raw/vmcuda-lines.txt"; echo '```'; } >>"$out/RESULTS-$name.md"
tar -C "$raw" -czf "$out/$(echo "$name" | tr "A-Z" "a-z")-raw.tar.gz" . 2>/dev/null
cat "$out/RESULTS-$name.md"
grep -q "^\*\*\([0-9]*\)/\1 checks" "$out/RESULTS-$name.md" && [ "$native_rc" = 0 ] && [ "$bridged_rc" = 0 ]
